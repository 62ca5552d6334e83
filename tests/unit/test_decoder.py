"""The decode loop's parts (``lookahead.step``: loop, proposer, classic) against their documented behaviour.

Token buffers past their growth; default stopping criteria answered without running them and
``ignore_stops``; which source a step's accepted guesses are credited to; every stats count
against what the forwards were fed; the copy guess fed as far as it pays; recycled guesses'
length; the window's pool keys (one- and two-token); each text n-gram filed exactly once; one
source named per guess row; guess rows padded with -1; models the other tests never build
(one layer, no ``logits_to_keep``, ``use_cache=False``); plain steps on padded and
sliding-window models; the cost curve the draft budget weighs.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers as tf
from transformers import StoppingCriteriaList
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

import lookahead
from lookahead.classic import ClassicProposer, _stack
from lookahead.drafts import kernels
from lookahead.sampling.rule import Pick
from lookahead.stats import LookaheadStats
from lookahead.step.costmodel import CostCurve
from lookahead.step.proposer import Plan, Proposer, _common
from lookahead.step.sequence import TokenSequence
from lookahead.verify.tree import GuessTree

from tiny_models import CONFIGS, VOCAB, tiny_model, two_requests

REPEAT = torch.tensor([[5, 6, 7, 8, 9] * 4])


def pick(token: int) -> Pick:
    row = torch.full((1, VOCAB), float(token))
    return Pick(token, row, row + 1)


def sequence(prompt, criteria=(), keep_scores=False, keep_logits=False) -> TokenSequence:
    return TokenSequence(
        torch.tensor([prompt]), StoppingCriteriaList(list(criteria)), None, LookaheadStats(), keep_scores, keep_logits
    )


@pytest.mark.parametrize("read_every", [1, 97])
def test_sequence_grows_past_its_buffers(read_every):
    """200 tokens after a one-token prompt outgrow both buffers (sized 2 * prompt + 64); the
    ids and the int64 array stay the tokens, whether the array is read after every append
    or first after the growth."""
    seq = sequence([5])
    tokens = [5]
    for i in range(200):
        token = 3 + (7 * i) % (VOCAB - 3)
        seq.append(pick(token))
        tokens.append(token)
        assert seq.ids.tolist() == [tokens]
        if (i + 1) % read_every == 0:
            array = seq.array()
            assert array.dtype == np.int64
            assert array.tolist() == tokens
    assert seq.array().tolist() == tokens and seq.array().dtype == np.int64
    assert seq.stats.new_tokens == 200 and not seq.done


@pytest.mark.parametrize("keep_scores,keep_logits", [(False, False), (True, False), (False, True), (True, True)])
def test_sequence_keeps_scores_and_logits_only_when_asked(keep_scores, keep_logits):
    seq = sequence([5, 6], keep_scores=keep_scores, keep_logits=keep_logits)
    picks = [pick(t) for t in (7, 8, 9)]
    for p in picks:
        seq.append(p)
    assert (seq.scores is not None) == keep_scores and (seq.logits is not None) == keep_logits
    if keep_scores:
        assert all(a is p.scores for a, p in zip(seq.scores, picks)) and len(seq.scores) == 3
    if keep_logits:
        assert all(a is p.logits for a, p in zip(seq.logits, picks)) and len(seq.logits) == 3


def test_default_criteria_are_answered_without_running_them(monkeypatch):
    """A length limit and EOS ids (the criteria ``generate`` builds by default) are answered
    from the length and the newest token (lookahead.step.sequence): the criteria never run."""

    def never_call(self, *args, **kwargs):
        raise AssertionError("the default criteria ran")

    monkeypatch.setattr(MaxLengthCriteria, "__call__", never_call)
    monkeypatch.setattr(EosTokenCriteria, "__call__", never_call)
    criteria = [MaxLengthCriteria(max_length=12), EosTokenCriteria(eos_token_id=[7, 9])]
    seq = sequence([5, 6], criteria)
    for token in (3, 4, 7):
        seq.append(pick(token))
    assert seq.done  # EOS 7
    seq = sequence([5, 6], criteria)
    for n, token in enumerate([3, 4, 5, 6, 8, 10, 11, 12, 13, 14], start=3):
        seq.append(pick(token))
        assert seq.done == (n >= 12)


def test_ignore_stops_goes_on_past_eos_and_length():
    """A batch row that stopped goes on while the others do: after ``ignore_stops`` neither
    EOS nor the length limit (nor any criterion) stops it."""
    criteria = [MaxLengthCriteria(max_length=6), EosTokenCriteria(eos_token_id=[7])]
    seq = sequence([5, 6], criteria)
    seq.append(pick(7))
    assert seq.done
    seq.ignore_stops()
    assert not seq.done
    for token in (7, 3, 4, 7, 8):
        seq.append(pick(token))
        assert not seq.done
    assert seq.ids.tolist() == [[5, 6, 7, 7, 3, 4, 7, 8]]


def layout(chain, rows, origins) -> Plan:
    """A classic step's plan: the window's level 0 (``chain``) as the first row, the window's."""
    if chain:
        rows, origins = [chain, *rows], ["window", *origins]
    cands = None
    if rows:  # rows padded with -1, as the decoder stacks them
        cands = np.full((len(rows), max(map(len, rows))), -1, dtype=np.int64)
        for i, row in enumerate(rows):
            cands[i, : len(row)] = row
    tree = GuessTree.build(cands)
    return Plan(tree, [0, *tree.tokens.tolist()], cands, tuple(origins), tree.layout())


@pytest.mark.parametrize(
    "chain,rows,origins,held,source",
    [
        # level 0 matches longest
        ([10, 11, 12], [[10, 11, 13], [10]], ["copy", "pool"], [10, 11, 12], "window"),
        # a row matches longer than level 0
        ([10, 11, 12], [[10, 11, 13], [10]], ["copy", "pool"], [10, 11, 13], "copy"),
        ([10, 11, 12], [[10], [10, 11, 13, 14]], ["copy", "pool"], [10, 11, 13, 14], "pool"),
        # ties: level 0 first, then the first row among the longest
        ([10, 11, 12], [[10, 11, 12], [10, 11, 12]], ["copy", "pool"], [10, 11, 12], "window"),
        ([], [[20, 21, -1], [20, 21, 22]], ["copy", "pool"], [20, 21], "copy"),
        ([], [[20, 21, -1], [20, 21, 22]], ["pool", "successors"], [20, 21, 5], "pool"),
        # nothing guessed matches (cannot happen after an accepted guess, but defined: no source)
        ([], [[30, 31]], ["pool"], [40], ""),
    ],
)
def test_source_of_credits_the_longest_match(chain, rows, origins, held, source):
    assert layout(chain, rows, origins).source_of(held) == source


def test_source_of_the_window_s_level_alone_is_the_window():
    assert layout([10, 11], [], []).source_of([10, 11]) == "window"


@pytest.mark.parametrize(
    "row,held,n",
    [
        ([1, 2, 3], [1, 2, 4], 2),
        ([1, 2], [1, 2, 3], 2),
        ([1, 2, 3], [1, 2], 2),
        ([5], [1], 0),
        ([], [1], 0),
        ([1, 2, 3, 4], [1, 2, 3, 4], 4),
        (np.array([7, -1]), [7, 8], 1),
    ],
)
def test_common_prefix(row, held, n):
    assert _common(row, held) == n


def test_one_layer_model_equals_greedy():
    """The decoder reads one cache layer per attention kind: a model with a single layer."""
    config = CONFIGS["llama"]()
    config.num_hidden_layers = 1
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    kwargs = dict(max_new_tokens=24, eos_token_id=None, pad_token_id=0)
    got = lookahead.generate(model, REPEAT, **kwargs)
    assert got.tolist() == model.generate(REPEAT, do_sample=False, **kwargs).tolist()


def test_output_carries_scores_and_logits_only_when_asked():
    """``return_dict_in_generate`` alone: no scores and no logits, as ``model.generate``."""
    model = tiny_model("llama", "sdpa")
    kwargs = dict(max_new_tokens=12, eos_token_id=None, pad_token_id=0, return_dict_in_generate=True)
    for extra in ({}, {"output_scores": True}, {"output_logits": True}):
        expected = model.generate(REPEAT, do_sample=False, **kwargs, **extra)
        got = lookahead.generate(model, REPEAT, **kwargs, **extra)
        assert got.sequences.tolist() == expected.sequences.tolist()
        assert (got.scores is None) == (expected.scores is None)
        assert (got.logits is None) == (expected.logits is None)


def fresh_model(family="llama", **changes):
    """A tiny model of its own (the cached ones are shared: never patch those)."""
    config = CONFIGS[family]()
    for name, value in changes.items():
        setattr(config, name, value)
    torch.manual_seed(0)
    return tf.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


@pytest.mark.parametrize("asked", [True, None])
def test_model_with_use_cache_off_in_its_config_equals_greedy(asked):
    """Checkpoints may ship ``use_cache=False`` (left from training); asked to use a cache or
    not (then ``generate`` prepares none and the decoder makes its own), the decoder's
    forwards fill and read one."""
    model = fresh_model(use_cache=False)
    kwargs = dict(max_new_tokens=16, eos_token_id=None, pad_token_id=0)
    if asked:
        kwargs["use_cache"] = True
    got = lookahead.generate(model, REPEAT, **kwargs)
    assert got.tolist() == model.generate(REPEAT, do_sample=False, **kwargs).tolist()


def test_prefill_computes_the_last_row_of_logits_only():
    """The prompt's forward asks for one row of logits (``logits_to_keep=1``), not ``[n, V]``."""
    model = fresh_model()
    rows = []
    model.register_forward_hook(lambda module, args, out: rows.append(out.logits.shape[1]))
    lookahead.generate(model, REPEAT, max_new_tokens=4, eos_token_id=None, pad_token_id=0)
    assert rows[0] == 1


def test_model_without_logits_to_keep_equals_greedy():
    """A model that cannot keep only the last row returns logits for the whole prompt: the
    first token is picked from the last of them."""
    model = fresh_model()
    forward = model.forward

    def forward_without_logits_to_keep(*args, **kwargs):
        assert "logits_to_keep" not in kwargs, "a model without the argument would raise"
        return forward(*args, **kwargs)

    model.forward = forward_without_logits_to_keep  # transformers reads the signature: no support
    assert not model._supports_logits_to_keep()
    kwargs = dict(max_new_tokens=16, eos_token_id=None, pad_token_id=0)
    got = lookahead.generate(model, REPEAT, **kwargs)
    assert got.tolist() == model.generate(REPEAT, do_sample=False, **kwargs).tolist()


RANDOM = torch.tensor([[0, 0, 0, 7, 30, 12, 41, 3, 19, 25, 8, 44, 16]])  # three pads on the left


def test_plain_steps_over_full_attention_leave_the_mask_to_the_model():
    """Plain steps over an unpadded cache of a full-attention model feed no mask of ours (the
    model's causal mask is the same and cheaper); over a padded cache they must feed one."""
    model = tiny_model("llama", "sdpa")
    for ids, masked in ((RANDOM[:, 3:], False), (RANDOM, True)):
        plain = []  # per one-token forward: whether it fed a mask
        handle = model.register_forward_pre_hook(
            lambda module, args, kwargs, plain=plain: (
                plain.append(kwargs["attention_mask"] is not None) if kwargs["input_ids"].shape[1] == 1 else None
            ),
            with_kwargs=True,
        )
        stats = LookaheadStats()
        try:
            lookahead.generate(
                model,
                ids,
                attention_mask=(ids != 0).long(),
                lookahead_stats=stats,
                lookahead_costs=CostCurve.linear(1.0),
                max_new_tokens=24,
                eos_token_id=None,
                pad_token_id=0,
            )
        finally:
            handle.remove()
        assert stats.plain_steps > 5
        # one-token forwards with a mask: plain steps over padding, or guessing steps that found no guess
        assert plain.count(False) == (0 if masked else stats.plain_steps)


@pytest.mark.parametrize(
    "family,padded", [("llama", False), ("llama", True), ("mistral", False), ("mistral", True), ("qwen2", False)]
)
def test_plain_steps_equal_greedy(family, padded):
    """Plain steps (the budget backs off on random text when a forward costs in
    proportion to its tokens), 40 of them: over a left-padded prompt they still mask the
    padding, and on sliding-window models (all layers, or some) the window still slides."""
    model = tiny_model(family, "sdpa")
    ids = RANDOM if padded else RANDOM[:, 3:]
    kwargs = dict(max_new_tokens=40, eos_token_id=None, pad_token_id=0, attention_mask=(ids != 0).long())
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_stats=stats, lookahead_costs=CostCurve.linear(1.0), **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    # every step is the budget's: a draft, or plain
    assert stats.steps // 2 < stats.plain_steps and stats.plain_steps + stats.draft_steps == stats.steps


def test_the_budget_weighs_the_given_cost_curve():
    """Guessing that costs almost nothing keeps guessing (plain steps only where no source had
    a guess); guessing that costs in proportion to the tokens fed backs off, on the same
    random text (measured: 7 plain steps of 20 and 37 of 40)."""
    model = tiny_model("llama", "sdpa")
    kwargs = dict(max_new_tokens=48, eos_token_id=None, pad_token_id=0, attention_mask=(RANDOM != 0).long())
    plain = {}
    for per_token in (0.01, 1.0):
        stats = lookahead.LookaheadStats()
        lookahead.generate(model, RANDOM, lookahead_stats=stats, lookahead_costs=CostCurve.linear(per_token), **kwargs)
        plain[per_token] = stats.plain_steps
    assert plain[0.01] < plain[1.0] // 3 and plain[1.0] > 10


@pytest.mark.parametrize("per_token", [1e-3, 1.0])
def test_copy_guess_feeds_what_pays(per_token):
    """The copy guess feeds as much of its draft as pays for its cost: where a forward's
    tokens are nearly free, whole trees of many nodes; where each fed token costs as much as
    a forward, none (no node holds surely enough), so every step is plain. Exact both ways;
    checked from what each forward was fed, on a copy-only config."""
    model = fresh_model("gpt2")
    config = lookahead.LookaheadConfig(window=0, guesses=0, successors=0, copy_length=16)
    fed = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    for prompt in ([4, 8, 15] * 5, [9, 9, 10, 11, 12] * 3, [5, 9, 14, 7, 22, 31] * 3):
        fed.clear()
        ids = torch.tensor([prompt])
        kwargs = dict(max_new_tokens=48, eos_token_id=None, pad_token_id=0)
        out = lookahead.generate(
            model, ids, lookahead_config=config, lookahead_costs=CostCurve.linear(per_token), **kwargs
        )
        steps = fed[1:]  # after the prefill
        assert out.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
        if per_token < 0.01:
            assert max(steps) > 8 and len(steps) < 24
        else:
            assert set(steps) == {1}


def test_stack_rows_pads_shorter_rows_with_minus_one():
    copy, pool, successors = np.array([[4, 5, 6, 7, 8]]), np.array([[9, 3], [2, 2]]), np.array([[6, 6, 6]])
    assert _stack([]) is None
    one = _stack([pool])
    assert one.dtype == np.int64 and one.tolist() == pool.tolist()
    rows = _stack([copy, pool, successors])
    assert rows.dtype == np.int64
    assert rows.tolist() == [[4, 5, 6, 7, 8], [9, 3, -1, -1, -1], [2, 2, -1, -1, -1], [6, 6, 6, -1, -1]]


def test_each_guess_row_has_its_source(monkeypatch):
    """``plan`` names the source of every guess row: as many names as rows, copy first, then
    the pool's rows, then the successors'."""
    model = tiny_model("llama", "sdpa")
    plans = []
    plan = ClassicProposer.plan

    def spy(self, *args, **kwargs):
        out = plan(self, *args, **kwargs)
        plans.append((out.rows, out.origins))
        return out

    monkeypatch.setattr(ClassicProposer, "plan", spy)
    config = lookahead.LookaheadConfig(window=3, ngram=3, guesses=3, successors=2, method="classic")
    lookahead.generate(model, REPEAT, lookahead_config=config, max_new_tokens=24, eos_token_id=None, pad_token_id=0)
    order = {"window": -1, "copy": 0, "pool": 1, "successors": 2}
    mixed = 0
    for cands, origins in plans:
        if cands is None:
            assert origins == ()
            continue
        assert cands.dtype == np.int64 and len(origins) == cands.shape[0]
        assert [order[o] for o in origins] == sorted(order[o] for o in origins)
        mixed += {"copy", "pool", "successors"} <= set(origins)
    assert mixed > 0


def test_accepted_text_is_filed_once():
    """The pool learns each n-gram of the text once, when its last token is accepted (no
    window: text n-grams only): the filed n-grams are the final text's, in order."""
    filed = []

    class Recording(lookahead.NgramPool):
        def insert_text(self, tokens, start=0):
            filed.extend(kernels.text_ngrams(np.asarray(tokens, dtype=np.int64), start, self.ngram)[0].tolist())
            super().insert_text(tokens, start)

    model = tiny_model("llama", "sdpa")
    config = lookahead.LookaheadConfig(window=0, ngram=4, guesses=4, successors=0, method="classic")
    out = lookahead.generate(
        model,
        REPEAT,
        lookahead_config=config,
        lookahead_pool=lookahead.KeptState(Recording(4, 4)),
        max_new_tokens=24,
        eos_token_id=None,
        pad_token_id=0,
    )
    assert filed == kernels.text_ngrams(out[0].numpy(), 0, 4)[0].tolist()


def test_window_ngrams_are_keyed_after_the_steps_root(monkeypatch):
    """The window's level 0 follows the step's root: its n-grams are filed with the root as
    the token before column 0 (two-token pool keys), the root being what the step fed first."""
    model = tiny_model("phi", "sdpa")
    roots, fed = [], []
    advance = ClassicProposer._advance_window

    def spy(self, plan, preds, accepted, root):
        roots.append(root)
        return advance(self, plan, preds, accepted, root)

    monkeypatch.setattr(ClassicProposer, "_advance_window", spy)
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append(int(kwargs["input_ids"][0, 0])), with_kwargs=True
    )
    try:
        config = lookahead.LookaheadConfig(window=4, ngram=4, guesses=4, method="classic")
        lookahead.generate(model, REPEAT, lookahead_config=config, max_new_tokens=24, eos_token_id=None, pad_token_id=0)
    finally:
        handle.remove()
    assert len(roots) == len(fed) - 1 > 3  # every step after the prefill is windowed
    assert roots == fed[1:]


def test_window_ngrams_are_filed_under_their_two_token_context():
    """With ``context_tokens=2`` the window's n-grams are also filed under the pair of the
    token before them and their first token (the pool's keys from 2**32 on)."""
    model = tiny_model("phi", "sdpa")
    config = lookahead.LookaheadConfig(
        window=4, ngram=4, guesses=4, method="classic", prompt_ngrams=False, context_tokens=2, successors=0
    )
    pool = lookahead.NgramPool(4, 4, context_tokens=2)
    lookahead.generate(
        model,
        REPEAT,
        lookahead_config=config,
        lookahead_pool=lookahead.KeptState(pool),
        max_new_tokens=16,
        eos_token_id=None,
        pad_token_id=0,
    )
    keys = pool._keys[pool._keys >= 0]
    assert (keys < 1 << 32).any() and (keys >= 1 << 32).any()


def test_recycled_guesses_are_ngram_minus_one_long():
    """Each recycled guess (LookaheadConfig.successors) is ``ngram - 1`` tokens: the deepest
    node a step feeds sits ``ngram - 1`` positions after its root."""
    model = tiny_model("llama", "sdpa")
    depths = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: depths.append(int(kwargs["position_ids"][0, -1] - kwargs["position_ids"][0, 0])),
        with_kwargs=True,
    )
    try:
        for ngram in (3, 5):
            depths.clear()
            config = lookahead.LookaheadConfig(
                window=0, guesses=0, copy_length=0, prompt_ngrams=False, method="classic", successors=2, ngram=ngram
            )
            lookahead.generate(
                model, REPEAT, lookahead_config=config, max_new_tokens=24, eos_token_id=None, pad_token_id=0
            )
            assert max(depths[1:]) == ngram - 1
    finally:
        handle.remove()


def fed_per_forward(model, run):
    """``run()``'s forwards as (tokens fed, root position) pairs, in order."""
    fed = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append((kwargs["input_ids"].shape[1], int(kwargs["position_ids"][0, 0]))),
        with_kwargs=True,
    )
    try:
        run()
    finally:
        handle.remove()
    return fed


def test_stats_count_what_the_forwards_did():
    """Every count in LookaheadStats against what the model was fed: forwards, steps, the
    accepted-length histogram (from the positions each step starts at), guess tokens, and,
    with the pool as the only source, one lookup per step and a hit exactly when the step
    fed guesses."""
    model = tiny_model("gpt2", "sdpa")
    config = lookahead.LookaheadConfig(
        window=0, guesses=4, ngram=4, copy_length=0, successors=0, prompt_ngrams=True, method="classic"
    )
    ids = torch.tensor([[4, 8, 15] * 5])
    stats = lookahead.LookaheadStats()
    out = []
    fed = fed_per_forward(
        model,
        lambda: out.append(
            lookahead.generate(
                model,
                ids,
                lookahead_config=config,
                lookahead_stats=stats,
                max_new_tokens=40,
                eos_token_id=None,
                pad_token_id=0,
            )
        ),
    )
    steps = fed[1:]
    assert stats.forwards == stats.row_forwards == len(fed) and stats.steps == len(steps)
    assert stats.new_tokens == out[0].shape[1] - ids.shape[1] == 40
    starts = [root for _, root in steps] + [ids.shape[1] + 40 - 1]
    accepted = [b - a for a, b in zip(starts, starts[1:])]
    histogram = [0] * (max(accepted) + 1)
    for k in accepted:
        histogram[k] += 1
    assert stats.accepted == histogram
    assert stats.guess_tokens == sum(n - 1 for n, _ in steps)
    assert stats.pool_lookups == len(steps)
    assert stats.pool_hits == sum(n > 1 for n, _ in steps) > 0
    # method="classic": the full shape always (plain where it found no guess), never a budget's draft
    assert (stats.draft_steps, stats.plain_steps) == (0, sum(n == 1 for n, _ in steps))
    assert stats.source_tokens == {"pool": sum(accepted) - len(steps)}
    assert 0 < stats.forward_s < stats.total_s


def test_count_credits_the_guess_that_held_longest():
    """A step that appended ``held + [free token]`` credits ``len(held)`` tokens to the
    source whose guess matched the most of ``held`` (the whole of it, not its start)."""
    stats = lookahead.LookaheadStats()
    step = layout([10, 11, 12], [[10, 11, 13, 14]], ["pool"])
    Proposer.count(SimpleNamespace(stats=stats, planner=None), step, 8, [10, 11, 13, 14, 30])
    assert stats.source_tokens == {"pool": 4}
    assert (stats.steps, stats.guess_tokens, stats.accepted) == (1, 7, [0, 0, 0, 0, 0, 1])


def test_copy_guess_reads_a_kept_pool_s_history():
    """With a pool kept across requests, the copy guess may copy from an earlier request's
    text: the second request of the same prompt, copy only, equals greedy and copies more."""
    model = tiny_model("llama", "sdpa")
    config = lookahead.LookaheadConfig(
        window=0, guesses=1, ngram=2, copy_length=16, prompt_ngrams=False, successors=0, method="classic"
    )
    first, second = two_requests(model, REPEAT, config, lookahead.KeptState())
    assert second.source_tokens.get("copy", 0) > first.source_tokens.get("copy", 0)
