"""What ``lookahead.generate`` returns and does around the decoder, against ``model.generate``.

The output object (scores, logits, cache: what ``generate`` would return), the fallback to
plain ``generate`` (its counts, streaming, output object), the total time, when the cost curve
is measured and that a given one drives the draft budget, the checks at both entry points
(``input_ids`` by keyword, right padding, ``generate``'s own guessers, unknown model inputs),
the batch path's arguments and request shapes the other tests never build (a one-token prompt,
a single new token, a sliding model with ``use_cache`` off).
"""

from __future__ import annotations

import time

import pytest
import torch
import transformers as tf

import lookahead
from lookahead import LookaheadConfig
from lookahead.step.costmodel import CostCurve

from tiny_models import tiny_model

REPEAT = torch.tensor([[5, 6, 7, 8, 9] * 4])
NEW = dict(max_new_tokens=12, eos_token_id=None, pad_token_id=0)
BATCH = torch.tensor([[0, 0, 0, 5, 6, 7, 5, 6, 7, 5], [9, 10, 11, 12, 9, 10, 11, 12, 9, 10]])  # 2 rows, left-padded
BATCH_MASK = (BATCH != 0).long()
RANDOM = torch.tensor([[7, 30, 12, 41, 3, 19, 25, 8, 44, 16]])


@pytest.mark.parametrize("penalty", [None, 1.3])
@pytest.mark.parametrize("asked", ["output_scores", "output_logits"])
def test_scores_or_logits_alone_equal_generate(asked, penalty):
    """Asked for one of them, the output carries it and not the other, as ``model.generate``:
    with no processor (the rule then takes every argmax at once) and with one (a repetition
    penalty, whose processed scores differ from the raw logits)."""
    model = tiny_model("llama", "sdpa")
    kwargs = dict(NEW, return_dict_in_generate=True, repetition_penalty=penalty, **{asked: True})
    expected = model.generate(REPEAT, do_sample=False, **kwargs)
    got = lookahead.generate(model, REPEAT, **kwargs)
    assert got.sequences.tolist() == expected.sequences.tolist()
    for name in ("scores", "logits"):
        want, have = getattr(expected, name), getattr(got, name)
        assert (have is None) == (want is None)
        if want is not None:
            assert len(have) == len(want) == 12
            for a, b in zip(have, want):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_output_carries_the_cache_generate_would():
    """``past_key_values``: every token but the last, with the entries plain decoding wrote."""
    model = tiny_model("llama", "sdpa")
    kwargs = dict(NEW, return_dict_in_generate=True)
    expected = model.generate(REPEAT, do_sample=False, **kwargs)
    got = lookahead.generate(model, REPEAT, **kwargs)
    assert got.past_key_values is not None
    assert got.past_key_values.get_seq_length() == expected.past_key_values.get_seq_length()
    for mine, theirs in zip(got.past_key_values.layers, expected.past_key_values.layers):
        torch.testing.assert_close(mine.keys, theirs.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(mine.values, theirs.values, rtol=1e-4, atol=1e-5)


class Recorder:
    """A streamer that keeps what it was given: ``put`` calls as lists, ``end`` as ``"end"``."""

    def __init__(self):
        self.calls = []

    def put(self, value):
        self.calls.append(value.reshape(-1).tolist())

    def end(self):
        self.calls.append("end")


def mpt():
    """An unsupported model (MPT: ALiBi), for the fallback to plain ``generate``."""
    torch.manual_seed(0)
    config = tf.MptConfig(vocab_size=48, d_model=32, n_layers=2, n_heads=4)
    return tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


FALLBACK = LookaheadConfig(on_unsupported="fallback")


def test_fallback_counts_what_plain_decoding_did():
    """One forward per new token, added to what the stats already held (two calls of a
    2-row batch), and the call's time added to ``total_s``."""
    model = mpt()
    ids = torch.tensor([[5, 6, 7, 5, 6, 7], [5, 6, 7, 5, 6, 7]])
    kwargs = dict(max_new_tokens=10, pad_token_id=0, eos_token_id=None)
    expected = model.generate(ids, do_sample=False, **kwargs)
    stats = lookahead.LookaheadStats(total_s=100.0)
    started = time.perf_counter()
    for calls in (1, 2):
        with pytest.warns(UserWarning, match="falling back"):
            got = lookahead.generate(model, ids, lookahead_stats=stats, lookahead_config=FALLBACK, **kwargs)
        assert got.tolist() == expected.tolist()
        assert stats.fallback
        assert (stats.new_tokens, stats.forwards, stats.row_forwards) == (20 * calls, 10 * calls, 20 * calls)
        assert 100.0 < stats.total_s < 100.0 + time.perf_counter() - started


def test_fallback_streams_and_returns_the_output_object():
    model = mpt()
    ids = torch.tensor([[5, 6, 7, 5, 6, 7]])
    kwargs = dict(max_new_tokens=6, pad_token_id=0, eos_token_id=None, return_dict_in_generate=True)
    theirs, mine = Recorder(), Recorder()
    expected = model.generate(ids, do_sample=False, streamer=theirs, **kwargs)
    with pytest.warns(UserWarning, match="falling back"):
        got = lookahead.generate(model, ids, streamer=mine, lookahead_config=FALLBACK, **kwargs)
    assert got.sequences.tolist() == expected.sequences.tolist()
    assert mine.calls == theirs.calls
    assert mine.calls[0] == ids[0].tolist() and len(mine.calls) == 1 + 6 + 1


def test_total_time_adds_the_call_s_time():
    model = tiny_model("llama", "sdpa")
    stats = lookahead.LookaheadStats(total_s=100.0)
    started = time.perf_counter()
    lookahead.generate(model, REPEAT, lookahead_stats=stats, lookahead_costs=CostCurve.linear(0.5), **NEW)
    assert 100.0 < stats.total_s < 100.0 + time.perf_counter() - started


@pytest.mark.parametrize(
    "config,measured",
    [
        (LookaheadConfig(), True),
        (LookaheadConfig(method="classic"), False),
        (LookaheadConfig(method="jacobi"), False),
    ],
)
def test_cost_curve_measured_only_for_the_draft_budget(monkeypatch, config, measured):
    """The budget's cost curve is measured (about a second, kept on disk) only when a draft
    budget decides and no curve was given."""
    calls = []
    monkeypatch.setattr(lookahead.api, "cost_curve", lambda model, **kwargs: calls.append(kwargs) or CostCurve.linear())
    model = tiny_model("llama", "sdpa")
    lookahead.generate(model, REPEAT, lookahead_config=config, **NEW)
    lookahead.generate(model, BATCH, attention_mask=BATCH_MASK, lookahead_config=config, **NEW)
    assert calls == ([{"rows": 1}, {"rows": 2}] if measured else [])  # a curve per batch size
    lookahead.generate(model, REPEAT, lookahead_config=config, lookahead_costs=CostCurve.linear(0.5), **NEW)
    assert len(calls) == 2 * int(measured)


def test_one_token_prompt_equals_generate():
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[5]])
    assert lookahead.generate(model, ids, **NEW).tolist() == model.generate(ids, do_sample=False, **NEW).tolist()


def test_input_ids_by_keyword():
    model = tiny_model("llama", "sdpa")
    expected = model.generate(input_ids=REPEAT, do_sample=False, **NEW)
    assert lookahead.generate(model, input_ids=REPEAT, **NEW).tolist() == expected.tolist()
    with pytest.raises(ValueError, match="2-D"):
        lookahead.generate(model, input_ids=REPEAT[0], **NEW)


def test_a_single_new_token_equals_generate():
    model = tiny_model("llama", "sdpa")
    kwargs = dict(NEW, max_new_tokens=1)
    assert (
        lookahead.generate(model, REPEAT, **kwargs).tolist()
        == model.generate(REPEAT, do_sample=False, **kwargs).tolist()
    )


RIGHT_PADDED = torch.tensor([[0, 5, 6, 7], [5, 6, 7, 0], [5, 6, 0, 0]])


@pytest.mark.parametrize("entry", ["generate", "custom_generate"])
def test_right_padding_names_the_rows(entry):
    """Refused at both entries (``model.generate`` only warns about right padding)."""
    model = tiny_model("llama", "sdpa")
    kwargs = dict(attention_mask=(RIGHT_PADDED != 0).long(), **NEW)
    with pytest.raises(ValueError, match=r"right padding \(rows \[1, 2\] end in 0\).*padding_side = 'left'"):
        if entry == "generate":
            lookahead.generate(model, RIGHT_PADDED, **kwargs)
        else:
            model.generate(RIGHT_PADDED, custom_generate=lookahead.custom_generate, do_sample=False, **kwargs)


@pytest.mark.parametrize(
    "name,value,error",
    [
        ("prompt_lookup_num_tokens", 3, NotImplementedError),
        ("custom_generate", lookahead.custom_generate, ValueError),
    ],
)
def test_generate_s_own_guessers_refused(name, value, error):
    model = tiny_model("llama", "sdpa")
    with pytest.raises(error, match=name):
        lookahead.generate(model, REPEAT, **{name: value}, **NEW)


def test_sampling_runs_the_processors():
    """Sampling with ``top_k=1`` leaves one token to draw: greedy's, in one row and in a batch."""
    model = tiny_model("llama", "sdpa")
    for ids, mask in ((RANDOM, None), (BATCH, BATCH_MASK)):
        greedy = model.generate(ids, attention_mask=mask, do_sample=False, **NEW)
        got = lookahead.generate(model, ids, attention_mask=mask, do_sample=True, top_k=1, **NEW)
        assert got.tolist() == greedy.tolist()


def test_batch_output_and_pool():
    """A batch returns ``generate``'s scores and logits, and feeds a kept pool."""
    model = tiny_model("llama", "sdpa")
    kwargs = dict(
        NEW,
        attention_mask=BATCH_MASK,
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
        repetition_penalty=1.3,
    )
    expected = model.generate(BATCH, do_sample=False, **kwargs)
    kept = lookahead.KeptState()
    got = lookahead.generate(model, BATCH, lookahead_pool=kept, **kwargs)
    assert got.sequences.tolist() == expected.sequences.tolist()
    for name in ("scores", "logits"):
        assert len(getattr(got, name)) == len(getattr(expected, name)) == 12
        for a, b in zip(getattr(got, name), getattr(expected, name)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert len(kept.pool) > 0


@pytest.mark.parametrize("ids,mask", [(RANDOM, None), (BATCH, BATCH_MASK)])
def test_the_given_cost_curve_drives_the_budget(ids, mask):
    """On text few guesses match, a flat curve (every width as cheap as one token) keeps the
    guesses on (plain steps only where no source had one: measured 7 of 15 steps, 18 of 32
    for the batch), where the default proportional one backs off to plain steps (23 of 25,
    47 of 52)."""
    model = tiny_model("llama", "sdpa")
    kwargs = dict(NEW, attention_mask=mask, max_new_tokens=30)
    flat, default = lookahead.LookaheadStats(), lookahead.LookaheadStats()
    lookahead.generate(model, ids, lookahead_stats=flat, lookahead_costs=CostCurve.linear(0.0), **kwargs)
    lookahead.generate(model, ids, lookahead_stats=default, lookahead_costs=CostCurve.linear(1.0), **kwargs)
    assert flat.plain_steps / flat.steps < 0.7 < default.plain_steps / default.steps


def test_batch_pads_with_the_first_eos_when_there_is_no_pad_id():
    """``generate`` fills finished rows with the first EOS id when no pad id is set."""
    model = tiny_model("llama", "sdpa")
    free = model.generate(BATCH, attention_mask=BATCH_MASK, do_sample=False, **NEW)
    eos = int(free[1, BATCH.shape[1] + 2])  # row 1 ends early; row 0 runs longer
    kwargs = dict(attention_mask=BATCH_MASK, max_new_tokens=12, eos_token_id=[eos, 2], pad_token_id=None)
    expected = model.generate(BATCH, do_sample=False, **kwargs)
    assert expected[1, -1].item() == eos and expected[0, -1].item() != eos
    assert lookahead.generate(model, BATCH, **kwargs).tolist() == expected.tolist()
    kwargs.update(eos_token_id=None)  # nothing to pad with, and nothing that would need it
    expected = model.generate(BATCH, do_sample=False, **kwargs)
    assert lookahead.generate(model, BATCH, **kwargs).tolist() == expected.tolist()


def test_unknown_model_inputs_are_refused():
    """GPT-2 takes ``token_type_ids``; the decoder does not feed them, so it says so."""
    model = tiny_model("gpt2", "sdpa")
    with pytest.raises(NotImplementedError, match="token_type_ids"):
        lookahead.generate(model, REPEAT, token_type_ids=torch.zeros_like(REPEAT), **NEW)


def test_sliding_model_with_use_cache_off_equals_greedy():
    """The cache the decoder makes itself is built from the model's config: a sliding one."""
    model = tiny_model("mistral", "sdpa")
    model.generation_config.use_cache = False
    try:
        ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11] * 3])
        kwargs = dict(NEW, max_new_tokens=24)
        expected = model.generate(ids, do_sample=False, **kwargs)
        assert lookahead.generate(model, ids, **kwargs).tolist() == expected.tolist()
    finally:
        model.generation_config.use_cache = True
