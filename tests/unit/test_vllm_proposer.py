"""``lookahead.vllm.LookaheadProposer`` driven as vLLM's model runner drives it
(``tests/helpers/vllm_runner.py``), without vLLM: new, finished, preempted and chunked requests,
rows that move; what it drafts, what it learns, what it keeps. The real engine's check (vLLM's
tokens with and without the proposer) is ``benchmarks/vllm_check.sh``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lookahead.drafts.history import History
from lookahead.vllm import LookaheadProposer, ProposerOptions

from vllm_runner import FakeRequest, FakeRunner

K = 6


def config(k: int = K, max_model_len: int = 4096):
    """The parts of vLLM's ``VllmConfig`` the proposer reads."""
    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=max_model_len),
    )


def proposer_with(**options) -> LookaheadProposer:
    cls = type("Tuned", (LookaheadProposer,), {"options": ProposerOptions(**options)})
    return cls(config())


def code_like(rng, lines: int, vocab: int = 1000, prompt_lines: int = 6) -> FakeRequest:
    """A text of lines drawn from a few fixed ones (8 tokens each): predictable within a line."""
    pool = rng.integers(10, vocab, size=(5, 8))
    picks = np.concatenate([np.arange(5), rng.integers(0, 5, size=lines)])
    text = pool[picks].reshape(-1).astype(np.int32)
    return FakeRequest(text, prompt_lines * 8)


# a drafted token costs a fifth of a step: it pays where it holds more than about one time in six
DEAR = 0.2


def noise(rng, n: int, prompt: int = 40) -> FakeRequest:
    """Tokens drawn from 64: the text's end matches earlier text often, and a guess holds
    once in 64, far below what a drafted token costs at ``DEAR``."""
    return FakeRequest(rng.integers(0, 64, size=n).astype(np.int32), prompt)


def occurs(draft: list[int], texts: list[np.ndarray]) -> bool:
    """``draft`` is a run of some text, or of a text followed by itself (the copy guess
    predicts a loop past a text's end)."""
    d = len(draft)
    for text in texts:
        doubled = np.concatenate([text, text]).tolist()
        if any(doubled[i : i + d] == draft for i in range(len(doubled) - d + 1)):
            return True
    return False


def test_import_leaves_vllm_torch_and_numba_alone():
    """The proposer's module loads where vLLM is missing (this suite), costs vLLM's worker no
    torch import of its own, and loads no numba: vLLM's kernel registration scans every loaded
    module, and numba's library wrapper (``llvmlite.binding.ffi.lib``) breaks that scan, so a
    user's module that subclasses the proposer must be importable before ``LLM(...)`` is built.
    A fresh interpreter imports none of them, subclass and all."""
    probe = (
        "import sys, lookahead.vllm\n"
        "class Tuned(lookahead.vllm.LookaheadProposer):\n"
        "    options = lookahead.vllm.ProposerOptions(token_cost=0.1)\n"
        "print(sorted({'vllm', 'torch', 'transformers', 'numba', 'llvmlite'} & {m.split('.')[0] for m in sys.modules}))"
    )
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


def test_predictable_requests_draft_what_their_texts_hold():
    rng = np.random.default_rng(0)
    proposer = proposer_with()
    runner = FakeRunner(proposer)
    requests = [code_like(rng, 40) for _ in range(4)]
    for req in requests:
        runner.add(req)
    runner.run()
    written = sum(r.target.shape[0] - r.prompt_len for r in requests)
    assert all(r.done for r in requests)
    assert runner.steps < 0.6 * written / len(requests)  # drafts held: fewer steps than tokens
    assert proposer.acceptance_rate > 0.6
    for req in requests:
        for length, draft in req.drafts:
            assert len(draft) <= K
            assert occurs(draft, [req.target[:length]]), (length, draft)


def test_an_unpredictable_request_stops_drafting():
    rng = np.random.default_rng(1)
    proposer = proposer_with(token_cost=DEAR)
    runner = FakeRunner(proposer)
    req = noise(rng, 600)
    runner.add(req)
    runner.run()
    drafted_late = [d for _, d in req.drafts[-200:] if d]
    assert len(drafted_late) <= 1, drafted_late  # a candidate of a never-seen kind may be tried once
    assert sum(len(d) for _, d in req.drafts[:50]) > 0  # it tried first


def test_a_predictable_request_beside_it_keeps_drafting():
    rng = np.random.default_rng(2)
    proposer = proposer_with(token_cost=DEAR)
    runner = FakeRunner(proposer)
    free, code = noise(rng, 500), code_like(rng, 80)
    runner.add(free)
    runner.add(code)
    runner.run()
    assert sum(len(d) for _, d in code.drafts[-20:]) > 20
    assert sum(len(d) for _, d in free.drafts[-100:]) == 0


def run_schedule(swap: bool, preempt: bool, chunks: int) -> list[list]:
    """Six requests through a batch of at most four, finishing at different times; rows swap
    every step (``swap``), one request is preempted and resumed (``preempt``), new requests
    sample nothing for ``chunks`` steps. Returns each request's drafts."""
    rng = np.random.default_rng(3)
    runner = FakeRunner(proposer_with(token_cost=0.0))  # no cost: every node drafts, whatever the batch
    requests = [code_like(rng, 10 + 6 * i) for i in range(6)]
    waiting = list(requests)
    for _ in range(4):
        runner.add(waiting.pop(0), chunks)
    out_at = None
    while runner.rows or waiting:
        if waiting and len(runner.rows) < 4:
            runner.add(waiting.pop(0), chunks)
        if preempt and runner.steps == 5:
            out_at = runner.rows[1]
            runner.remove(out_at)
        if preempt and runner.steps == 9:
            runner.add(out_at)
        if swap and len(runner.rows) > 1:
            runner.swap(0, len(runner.rows) - 1)
        runner.step()
    return [r.drafts for r in requests], runner


def test_rows_that_move_keep_their_requests():
    plain, _ = run_schedule(swap=False, preempt=False, chunks=0)
    swapped, _ = run_schedule(swap=True, preempt=False, chunks=0)
    assert swapped == plain


def test_preempted_and_chunked_requests_keep_their_state():
    _, runner = run_schedule(swap=True, preempt=True, chunks=2)
    proposer = runner.proposer
    assert proposer.acceptance_rate > 0.5
    assert len(proposer.requests) <= proposer.options.max_absent + 4


def test_a_resumed_request_finds_its_state():
    rng = np.random.default_rng(4)
    proposer = proposer_with()
    runner = FakeRunner(proposer)
    req = code_like(rng, 30)
    runner.add(req)
    for _ in range(6):
        runner.step()
    state = proposer.requests.state(0)
    runner.remove(req)
    runner.add(code_like(rng, 30))  # another request takes the row meanwhile
    runner.step()
    runner.add(req)
    runner.step()
    assert proposer.requests.state(1) is state


def test_a_resumed_request_files_what_it_wrote_after_its_return():
    """Preempted, a request files its text so far; resumed and finished, the rest of it too
    (with the tokens before the seam, so a later text's end matches across it)."""
    rng = np.random.default_rng(5)
    proposer = proposer_with()
    runner = FakeRunner(proposer)
    req = FakeRequest(rng.integers(100, 5000, size=120).astype(np.int32), 20)
    runner.add(req)
    for _ in range(30):
        runner.step()
    runner.remove(req)
    other = code_like(rng, 4)
    runner.add(other)
    runner.step()  # the call that finds req gone files its text so far
    runner.remove(other)
    runner.add(req)
    runner.run()
    before = len(proposer.history)
    runner.add(code_like(rng, 4))
    runner.step()  # req left: what it wrote since its return is filed
    history = proposer.history.tokens
    tail = req.target[-40:]
    assert any(np.array_equal(history[i : i + 40], tail) for i in range(len(history) - 39))
    assert len(proposer.history) - before < req.target.shape[0]  # not the whole text again


def test_the_next_turn_carries_its_conversations_state():
    """A turn's prompt holds the last turn's whole text: it continues that request's state
    (its learnt ratios), and the new message between them teaches nothing."""
    rng = np.random.default_rng(8)
    proposer = proposer_with()
    runner = FakeRunner(proposer)
    first = code_like(rng, 20)
    runner.add(first)
    runner.run()
    state = proposer.requests.state(0)
    fed = state.planner.budget.fed.sum()
    message = rng.integers(2000, 3000, size=12).astype(np.int32)
    text = np.concatenate([first.target, message, code_like(rng, 10).target])
    runner.add(FakeRequest(text, first.target.shape[0] + message.shape[0]))
    runner.step()
    assert proposer.requests.state(0) is state
    assert state.planner.budget.fed.sum() == fed  # the gap was not scored


def test_the_runner_hooks_exist():
    proposer = LookaheadProposer(config())
    assert proposer.load_model(object()) is None  # vLLM's CPU runner calls it with the model
    assert proposer.propose([], np.zeros(0, dtype=np.int32), np.zeros((0, 8), dtype=np.int32)) == []


def test_history_drafts_a_repeated_request_from_its_first_step():
    rng = np.random.default_rng(5)
    proposer = proposer_with()
    runner = FakeRunner(proposer)
    first = FakeRequest(rng.integers(0, 30_000, size=200).astype(np.int32), 20)
    runner.add(first)
    runner.run()
    first_steps = runner.steps
    again = FakeRequest(first.target.copy(), 20)
    runner.add(again)
    runner.run()
    assert again.drafts[0][1] == first.target[21 : 21 + len(again.drafts[0][1])].tolist()
    assert len(again.drafts[0][1]) > 0
    assert runner.steps - first_steps <= (200 - 20) / K + 4


def test_history_stays_within_its_bound():
    history = History(1000)
    rng = np.random.default_rng(6)
    for _ in range(200):
        history.remember(rng.integers(0, 100, size=int(rng.integers(1, 400))))
        assert len(history) <= 1000
        assert len(history.indexes()) <= 2 and sum(len(index) for index in history.indexes()) <= 2 * 1000
    assert len(History(0)) == 0


def test_the_absent_requests_kept_are_bounded():
    rng = np.random.default_rng(7)
    proposer = proposer_with(max_absent=3, history_tokens=500)
    runner = FakeRunner(proposer)
    for _ in range(12):
        runner.add(code_like(rng, 3))
        runner.run()
    assert len(proposer.requests) <= 3 + 1  # the last request, finished after the last call
    assert len(proposer.history) <= 500


def test_drafts_stop_at_the_model_length():
    proposer = type("P", (LookaheadProposer,), {})(config(k=4, max_model_len=12))
    text = np.array([[1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 0, 0]], dtype=np.int32)
    for n in (8, 9, 10):
        drafts = proposer.propose([[text[0, n - 1]]], np.array([n]), text)
        assert len(drafts[0]) <= max(12 - n - 1, 0)
    assert proposer.propose([[1]], np.array([12]), text) == [[]]


def test_the_budget_drafts_a_prefix_of_the_likeliest_chain():
    """Cut to a chain, the budget's choice follows, from the root, each node's likeliest child
    (the first on a tie): siblings off that chain are never drafted, however likely."""
    from lookahead.drafts.budget import DraftBudget
    from lookahead.step.costmodel import CostCurve

    tree = (np.array([5, 6, 7, 8, 9]), np.array([-1, 0, -1, 1, 0]), np.array([0.7, 0.6, 0.3, 0.5, 0.1]), 8)
    chain = DraftBudget(8, CostCurve.linear(0.0), 0.0, (), 4, chain=True)
    assert chain.plan([tree], [])[0].tolist() == [[5, 6, 8]]
    tree_shaped = DraftBudget(8, CostCurve.linear(0.0), 0.0, (), 4)
    assert sorted(map(tuple, tree_shaped.plan([tree], [])[0].tolist())) == [(5, 6, 8), (5, 9, -1), (7, -1, -1)]


def test_a_bigger_batch_drafts_less_a_row():
    """A step over more rows spreads its fixed cost thinner, so each row's token costs more of
    its share (``Drafting._curve``): at the same chances a row drafts no more in a batch of 8
    than alone, and a dear token drafts nothing."""
    proposer = proposer_with()
    alone, batch = proposer.drafting._curve(1), proposer.drafting._curve(8)
    assert alone(2) - 1 == pytest.approx(0.05 / 1.05) and batch(2) - 1 == pytest.approx(0.4 / 1.4)
    assert proposer_with(token_cost=DEAR).drafting._curve(8)(2) > batch(2)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(history_tokens=-1), "history_tokens must be an int >= 0, got -1"),
        (dict(max_absent=1.5), "max_absent must be an int >= 0, got 1.5"),
        (dict(token_cost=-0.1), "token_cost must be a number >= 0, got -0.1"),
        (dict(min_share=2), r"min_share must be a number in \(0, 1\], got 2"),
        (dict(min_share=0.0), r"min_share must be a number in \(0, 1\], got 0.0"),
        (dict(guesses=-1), "guesses must be an int >= 0, got -1"),
        (dict(max_match=0), "max_match must be an int >= 1, got 0"),
    ],
)
def test_bad_options_name_themselves(options, message):
    with pytest.raises(ValueError, match=message):
        ProposerOptions(**options)


def test_bad_configs_name_the_field():
    with pytest.raises(ValueError, match="num_speculative_tokens must be an int >= 1, got 0"):
        LookaheadProposer(config(k=0))
    with pytest.raises(ValueError, match="max_model_len must be an int >= 1, got None"):
        LookaheadProposer(config(max_model_len=None))
    with pytest.raises(TypeError, match="options must be a ProposerOptions, got dict"):
        type("P", (LookaheadProposer,), {"options": {}})(config())
    proposer = LookaheadProposer(config())
    with pytest.raises(ValueError, match=r"token_ids_cpu must be \[rows >= 2, max_model_len\], got \(1, 4\)"):
        proposer.propose([[1], [2]], np.array([1, 1]), np.zeros((1, 4), dtype=np.int32))
