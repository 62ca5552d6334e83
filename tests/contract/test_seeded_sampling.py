"""Seeded sampling gives ``model.generate(do_sample=True)``'s tokens under the same seed.

transformers draws one ``[B, V]`` block of exponential noise per step (``torch.multinomial``'s
one-sample path); lookahead reads the same blocks through a ``NoiseStream``, row by row, at
whatever rate each row advances. These tests compare with ``model.generate`` itself, token for
token, for single sequences and left-padded batches, over families, warpers, processors and EOS
lists; ``test_sampling.py`` keeps the distribution-level check as a second line of proof.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from test_batch import eos_ending_rows

import lookahead
from lookahead.checking import examples as testing
from lookahead.checking.verdict import TIE_GAP, race_verdict, replay_noise
from lookahead.sampling.noise import NoiseStream

from strategies import batch_rows, eos_ids, prompts
from tiny_models import CASES, left_pad, tiny_model, tiny_tokenizer

PAD = 0
configs = testing.configs(max_window=6, max_ngram=5, max_guesses=6)


def seeded(fn, seed: int, *args, **kwargs):
    """``fn(*args, **kwargs)`` under ``torch.manual_seed(seed)``; also the RNG state after it."""
    torch.manual_seed(seed)
    out = fn(*args, **kwargs)
    return out, torch.get_rng_state()


@given(
    case=st.sampled_from(CASES),
    prompt=prompts,
    config=configs,
    options=testing.sampling_options(),
    eos=eos_ids,
    new=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_one_sequence_equals_seeded_generate(case, prompt, config, options, eos, new, seed):
    """The same tokens, and the global RNG left where ``generate`` leaves it: nothing else in
    the call (calibration, probes, guesses) draws from it."""
    model = tiny_model(*case)
    kwargs = dict(
        do_sample=True,
        max_new_tokens=new,
        pad_token_id=PAD,
        eos_token_id=eos,
        attention_mask=torch.ones_like(prompt),
        **options,
    )
    expected, state = seeded(model.generate, seed, prompt, **kwargs)
    got, got_state = seeded(lookahead.generate, seed, model, prompt, lookahead_config=config, **kwargs)
    assert got.tolist() == expected.tolist()
    assert torch.equal(got_state, state)


@given(
    rows=batch_rows(max_rows=3),
    config=configs,
    curve=testing.cost_curves(),
    options=testing.sampling_options(),
    new=st.integers(1, 32),
    seed=st.integers(0, 2**16),
)
def test_seeded_generate_on_any_cost_curve(rows, config, curve, options, new, seed):
    """The seeded tokens whatever the forwards cost (two tokens below one or above), one
    sequence or a batch."""
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad(rows)
    kwargs = dict(do_sample=True, attention_mask=mask, max_new_tokens=new, pad_token_id=PAD, **options)
    stats = lookahead.LookaheadStats()
    expected, _ = seeded(model.generate, seed, ids, eos_token_id=None, **kwargs)
    mine = dict(lookahead_config=config, lookahead_costs=curve, lookahead_stats=stats, eos_token_id=None)
    got, _ = seeded(lookahead.generate, seed, model, ids, **mine, **kwargs)
    assert got.tolist() == expected.tolist()


@given(
    case=st.sampled_from(CASES),
    rows=batch_rows(max_rows=4),
    config=configs,
    options=testing.sampling_options(),
    new=st.integers(1, 32),
    picks=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 31)), max_size=2),
    dict_out=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_batch_equals_seeded_generate(case, rows, config, options, new, picks, dict_out, seed):
    """Rows that accept different numbers of tokens per step still read generate's ``[B, V]``
    block of each of their steps; rows ending at an EOS are padded as ``generate`` pads them,
    and with ``output_scores`` their per-step scores are ``generate``'s too."""
    model = tiny_model(*case)
    ids, mask = left_pad(rows)
    kwargs = dict(
        do_sample=True,
        attention_mask=mask,
        max_new_tokens=new,
        pad_token_id=PAD,
        eos_token_id=eos_ending_rows(model, ids, mask, new, picks),
        **options,
    )
    if dict_out:
        kwargs.update(return_dict_in_generate=True, output_scores=True)
    expected, _ = seeded(model.generate, seed, ids, **kwargs)
    got, _ = seeded(lookahead.generate, seed, model, ids, lookahead_config=config, **kwargs)
    if not dict_out:
        assert got.tolist() == expected.tolist()
        return
    assert got.sequences.tolist() == expected.sequences.tolist()
    assert len(got.scores) == len(expected.scores)
    for mine, theirs in zip(got.scores, expected.scores, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [1, 3])
def test_a_generator_replays_the_seed_it_was_given(rows):
    """``generator=torch.Generator().manual_seed(s)`` draws what ``torch.manual_seed(s)`` draws,
    so it gives ``generate``'s tokens for seed s and leaves the global RNG alone."""
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad([[5, 6, 7, 8] * 3, [9, 4, 9, 4, 11], [12, 13] * 5][:rows])
    kwargs = dict(do_sample=True, attention_mask=mask, max_new_tokens=24, pad_token_id=PAD, eos_token_id=None, top_k=8)
    expected, _ = seeded(model.generate, 21, ids, **kwargs)
    torch.manual_seed(99)
    before = torch.get_rng_state()
    got = lookahead.generate(model, ids, generator=torch.Generator().manual_seed(21), **kwargs)
    assert got.tolist() == expected.tolist()
    assert torch.equal(torch.get_rng_state(), before)


def test_custom_generate_and_stop_strings_equal_seeded_generate():
    """Through ``model.generate(custom_generate=...)`` and with ``stop_strings``, the same tokens."""
    model, tok = tiny_model("qwen2", "sdpa"), tiny_tokenizer()
    ids = torch.tensor([tok("abcabcabcab").input_ids])
    kwargs = dict(
        do_sample=True,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=30,
        pad_token_id=PAD,
        eos_token_id=None,
        temperature=0.7,
    )
    expected, _ = seeded(model.generate, 3, ids, **kwargs)
    got, _ = seeded(model.generate, 3, ids, custom_generate=lookahead.custom_generate, **kwargs)
    assert got.tolist() == expected.tolist()
    stop = tok.decode(expected[0, ids.shape[1] + 4 : ids.shape[1] + 6])  # a string the sample reaches
    expected, _ = seeded(model.generate, 3, ids, stop_strings=[stop], tokenizer=tok, **kwargs)
    got, _ = seeded(lookahead.generate, 3, model, ids, stop_strings=[stop], tokenizer=tok, **kwargs)
    assert got.tolist() == expected.tolist() and got.shape[1] < ids.shape[1] + 30


class NoiseStreamMachine(RuleBasedStateMachine):
    """``NoiseStream`` against a reference that draws every block up front from the same seed:
    rows read their steps in order at any pace and peek ahead of them, each read or peek is
    the reference block's row, the generator is where the reference's was after as many
    blocks, and the stream keeps no more blocks than the fastest live row's lead over the
    slowest."""

    @initialize(rows=st.integers(1, 4), seed=st.integers(0, 100))
    def start(self, rows, seed):
        self.like = torch.zeros(1, 7)
        self.generator = torch.Generator().manual_seed(seed)
        self.stream = NoiseStream(rows, self.generator)
        gen = torch.Generator().manual_seed(seed)
        self.states = [gen.get_state()]
        self.reference = []
        for _ in range(40):
            self.reference.append(torch.empty(rows, 7).exponential_(generator=gen))
            self.states.append(gen.get_state())
        self.next = [0] * rows
        self.live = set(range(rows))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def peek(self, data):
        row = data.draw(st.sampled_from(sorted(self.live)))
        step = self.next[row] + data.draw(st.integers(0, 6))
        if step < len(self.reference):
            got = self.stream.peek(row, step, self.like)
            assert torch.equal(got, self.reference[step][row : row + 1])

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def read(self, data):
        row = data.draw(st.sampled_from(sorted(self.live)))
        if self.next[row] >= len(self.reference):
            return
        got = self.stream.take(row, self.next[row], self.like)
        assert torch.equal(got, self.reference[self.next[row]][row : row + 1])
        self.next[row] += 1

    @precondition(lambda self: len(self.live) > 1)  # one row keeps reading
    @rule(data=st.data())
    def release(self, data):
        row = data.draw(st.sampled_from(sorted(self.live)))
        self.stream.release(row)
        self.live.discard(row)

    @invariant()
    def draws_are_bounded(self):
        if not hasattr(self, "stream"):
            return
        assert self.stream.drawn == max(self.next)  # drawn in order, only when first needed
        assert torch.equal(self.generator.get_state(), self.states[self.stream.drawn])
        lead = max(self.next) - min(self.next[r] for r in self.live)
        assert self.stream.held == lead


TestNoiseStream = NoiseStreamMachine.TestCase


def test_a_peeked_block_is_read_without_drawing_it_again(monkeypatch):
    stream = NoiseStream(1, torch.Generator().manual_seed(3))
    like = torch.zeros(1, 5)
    draws = []
    real_draw = stream._draw
    monkeypatch.setattr(stream, "_draw", lambda *a: draws.append(1) or real_draw(*a))
    peeked = [stream.peek(0, t, like).clone() for t in range(3)]
    read = [stream.take(0, t, like) for t in range(4)]
    assert len(draws) == 4  # three peeks, one block past them
    assert all(torch.equal(p, r) for p, r in zip(peeked, read[:3]))


def test_peeks_stale_after_another_draw_are_not_read():
    """Something else draws from the generator between a peek and the read: the read is the
    block ``generate`` would draw then, not the peeked one."""
    gen = torch.Generator().manual_seed(5)
    stream = NoiseStream(1, gen)
    like = torch.zeros(1, 5)
    stream.peek(0, 1, like)
    torch.rand(3, generator=gen)
    ref = torch.Generator().manual_seed(5)
    torch.rand(3, generator=ref)
    expected = [torch.empty(1, 5).exponential_(generator=ref) for _ in range(2)]
    assert torch.equal(stream.take(0, 0, like), expected[0])
    assert torch.equal(stream.peek(0, 1, like), expected[1])  # peeks from the generator as it is now
    assert torch.equal(stream.take(0, 1, like), expected[1])
    assert torch.equal(gen.get_state(), ref.get_state())


def test_a_row_cannot_read_a_step_twice_or_after_release():
    stream = NoiseStream(2)
    like = torch.zeros(1, 5)
    stream.take(0, 0, like)
    with pytest.raises(RuntimeError, match="step 0 again"):
        stream.take(0, 0, like)
    stream.release(1)
    with pytest.raises(RuntimeError, match="released"):
        stream.take(1, 0, like)
    with pytest.raises(ValueError, match="rows must be >= 1"):
        NoiseStream(0)


@pytest.mark.parametrize("rows", [1, 2])
def test_replayed_noise_decides_every_token_generate_sampled(rows):
    """``replay_noise`` is the ``q`` of generate's step t: the race over it, recomputed the
    plain way at every position, picks each token ``generate`` sampled, so the gap between that
    token and any other is positive, and zero against itself."""
    model = tiny_model("gpt2", "eager")
    ids, mask = left_pad([[5, 6, 7, 8] * 2, [9, 4, 11]][:rows])
    torch.manual_seed(8)
    out = model.generate(
        ids, attention_mask=mask, do_sample=True, max_new_tokens=12, pad_token_id=PAD, eos_token_id=None
    )
    for r in range(rows):
        real = ids[r][mask[r].bool()]
        for t in range(12):
            prefix = torch.cat([real, out[r, ids.shape[1] : ids.shape[1] + t]])
            chosen = int(out[r, ids.shape[1] + t])
            logits = model(input_ids=prefix[None]).logits[0, -1].float()
            race = torch.log_softmax(logits, -1) - replay_noise(8, t, rows, r, logits.shape[-1]).log()
            assert int(race.argmax()) == chosen
            assert race_verdict(model, prefix, (chosen, chosen), 8, t, rows, r).race_gap == 0.0
            other = (chosen + 1) % logits.shape[-1]
            assert race_verdict(model, prefix, (chosen, other), 8, t, rows, r).race_gap > TIE_GAP


def test_bench_checks_seeded_samples_and_names_a_planted_difference(monkeypatch):
    """``bench --sample`` compares the seed-exact methods with seeded ``generate`` token for
    token (prompt lookup's speculative sampling is not compared), and a sampler that reads the
    wrong noise is a mismatch whose race gap is far from a rounding tie."""
    from lookahead.bench import methods, report, runner
    from lookahead.bench.prompts import Prompt

    def wrong_noise(model, input_ids, settings):  # lookahead, after one stray draw
        torch.rand(1)
        return methods.run_lookahead(model, input_ids, settings)

    monkeypatch.setitem(methods.METHODS, "planted", wrong_noise)
    monkeypatch.setattr(methods, "SEED_EXACT", (*methods.SEED_EXACT, "planted"))
    model = tiny_model("llama", "sdpa")
    settings = dict(max_new_tokens=24, do_sample=True, temperature=0.8, top_p=0.9, pad_token_id=PAD, seed=4)
    variants = [
        runner.Variant(m, m, methods.Settings(**settings)) for m in ("greedy", "lookahead", "prompt-lookup", "planted")
    ]
    encoded = [[5, 6, 7, 8] * 3, [9, 4, 9, 4, 11, 3, 3]]
    prompts_ = [Prompt(f"p{i}", token_ids=ids) for i, ids in enumerate(encoded)]
    records, skipped = runner.run(model, prompts_, encoded, variants, progress=False)
    assert not skipped
    doc = report.document({}, records, [v.label for v in variants], methods.BASELINE, exactness=True)
    assert doc["methods"]["lookahead"]["mismatches"] == 0
    assert doc["methods"]["prompt-lookup"]["mismatches"] is None  # not seed-exact: not compared
    assert doc["methods"]["planted"]["mismatches"] == 2 and doc["methods"]["planted"]["ties"] == 0
    planted = [r for r in records if r.label == "planted"]
    assert all(r.tie_margin is not None and r.tie_margin > runner.TIE_MARGIN for r in planted), [
        (r.first_mismatch, r.tie_margin, len(r.result.tokens)) for r in planted
    ]
    assert all(r.flip is not None and r.flip["kind"] == "bug" for r in planted), [r.flip for r in planted]
    assert "likely a bug" in "\n".join(report.mismatch_lines(doc))


def test_check_sample_compares_seeded_and_names_a_planted_difference(monkeypatch):
    """``lookahead check --sample`` passes on a correct decoder, and a decoder that reads the
    wrong noise is caught, shrunk, and told apart from a rounding flip by its race gap."""
    from lookahead.checking.check import run_check

    model, tok = tiny_model("llama", "sdpa"), tiny_tokenizer()
    result = run_check(model, tok, examples=6, seed=1, max_new_tokens=12, sample=True)
    assert result.ok and result.exit_status() == 0 and "seeded model.generate" in result.lines()[0]

    real = lookahead.generate

    def stray_draw(*args, **kwargs):
        torch.rand(1)  # one draw the real generate does not make: every later token may move
        return real(*args, **kwargs)

    monkeypatch.setattr(lookahead, "generate", stray_draw)
    result = run_check(model, tok, examples=20, seed=1, max_new_tokens=12, sample=True)
    m = result.mismatch
    assert m is not None and m.seed is not None and m.kwargs["do_sample"] is True
    assert m.race_gap is not None and m.race_gap > TIE_GAP and not result.flip
    assert m.verdict is not None and m.verdict.kind == "bug" and m.verdict.race_gap == m.race_gap
    assert result.exit_status() == 1
    text = "\n".join(result.lines())
    assert "seeded sampling race" in text and "likely a bug" in text and f"torch.manual_seed({m.seed})" in text


def test_calibration_and_the_static_warm_up_draw_no_random_numbers():
    """The first call on a model measures its cost curve, and a static cache's first call traces
    its buckets: neither may move the RNG a seeded sample reads."""
    from lookahead.runtime.calibration import calibrate

    model = tiny_model("phi", "sdpa")
    torch.manual_seed(5)
    before = torch.get_rng_state()
    calibrate(model, sizes=(1, 2, 4), repeats=1)
    model.__dict__.pop("_lookahead_cache", None)
    ids = torch.tensor([[5, 6, 7, 8] * 3])
    lookahead.generate(model, ids, max_new_tokens=8, eos_token_id=None, pad_token_id=PAD, cache_implementation="static")
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_planted_token_is_a_bug_and_generate_s_own_is_not(dtype):
    """At every position of a seeded sample: ``generate``'s token against itself is a race flip
    of gap 0, and the token the model likes least in its place (outside the top-p nucleus) is
    a bug, in half precision too, where the tolerance is far wider."""
    from lookahead.checking.verdict import race_verdict, warpers

    model = tiny_model("llama", "sdpa")
    model = model if dtype == torch.float32 else copy.deepcopy(model).to(dtype)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    torch.manual_seed(3)
    kwargs = dict(do_sample=True, temperature=0.5, top_p=0.8, top_k=0, pad_token_id=PAD, eos_token_id=None)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, **kwargs)
    for t in range(6):
        prefix, chosen = out[0, : 6 + t], int(out[0, 6 + t])
        with torch.inference_mode():
            worst = int(model(input_ids=prefix[None]).logits[0, -1].argmin())
        same = race_verdict(model, prefix, (chosen, chosen), 3, t, processors=warpers(0.5, 0.8))
        assert same.kind == "race" and same.race_gap == 0.0
        planted = race_verdict(model, prefix, (chosen, worst), 3, t, processors=warpers(0.5, 0.8))
        assert planted.kind == "bug" and not planted.flip and planted.edge == "top-p", planted
        assert planted.edge_gap > planted.tolerance and "outside the top-p support" in planted.reason


def test_check_calls_a_planted_token_outside_the_support_a_bug(monkeypatch):
    """``lookahead check --sample`` on a decoder that swaps its first new token for the one the
    model likes least: the shrunk mismatch's verdict (from generate's own logits, processors
    and noise) is a bug, and the report says so."""
    from lookahead.checking.check import run_check

    model, tok = tiny_model("llama", "sdpa"), tiny_tokenizer()
    real = lookahead.generate

    def planted(model, ids, **kwargs):
        out = real(model, ids, **kwargs)
        if out.shape[1] > ids.shape[1]:
            with torch.inference_mode():
                worst = int(model(input_ids=ids).logits[0, -1].argmin())
            out = out.clone()
            out[0, ids.shape[1]] = worst
        return out

    monkeypatch.setattr(lookahead, "generate", planted)
    result = run_check(model, tok, examples=10, seed=2, max_new_tokens=6, sample=True)
    m = result.mismatch
    assert m is not None and m.position == 0 and m.verdict is not None, m
    assert m.verdict.kind == "bug" and not result.flip and result.exit_status() == 1, m.verdict
    assert "likely a bug" in "\n".join(result.lines())


@given(prompt=prompts, cut=st.floats(0.1, 0.95), options=testing.sampling_options(), seed=st.integers(0, 2**16))
def test_a_cache_holding_a_prompt_prefix_gives_seeded_generates_tokens(prompt, cut, options, seed):
    """From a ``DynamicCache`` already holding the prompt's start (as ``lookahead serve`` keeps a
    conversation's), seeded sampling draws ``model.generate``'s tokens from that cache."""
    from transformers.cache_utils import DynamicCache

    from lookahead.compat import takes_cache_keyword

    model = tiny_model("llama", "sdpa")
    ids = prompt if prompt.shape[1] > 1 else torch.cat([prompt, prompt], dim=1)
    prefix = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids[:, : max(1, int(cut * (ids.shape[1] - 1)))], cache=prefix, use_cache=True)
    keyword = "cache" if takes_cache_keyword(model) else "past_key_values"
    kwargs = dict(do_sample=True, max_new_tokens=16, pad_token_id=PAD, **options)
    expected, _ = seeded(model.generate, seed, ids, **{keyword: copy.deepcopy(prefix)}, **kwargs)
    got, _ = seeded(lookahead.generate, seed, model, ids, **{keyword: copy.deepcopy(prefix)}, **kwargs)
    assert got.tolist() == expected.tolist()
