"""What ``lookahead.generate`` returns and does around the decoder, against ``model.generate``.

Written against ``lookahead/api.py``'s mutation run (docs/mutation.md): the output's scores,
logits and cache when asked for one at a time, the fallback's stats, when the cost curve is
measured, one-token prompts.
"""

from __future__ import annotations

import pytest
import torch
import transformers as tf

import lookahead
from lookahead import LookaheadConfig
from lookahead.costmodel import CostCurve
from tiny_models import tiny_model

REPEAT = torch.tensor([[5, 6, 7, 8, 9] * 4])
NEW = dict(max_new_tokens=12, eos_token_id=None, pad_token_id=0)


@pytest.mark.parametrize("asked", ["output_scores", "output_logits"])
def test_scores_or_logits_alone_equal_generate(asked):
    """Asked for one of them, the output carries it (processed scores differ from the raw
    logits here: a repetition penalty runs) and not the other, as ``model.generate``."""
    model = tiny_model("llama", "sdpa")
    kwargs = dict(NEW, return_dict_in_generate=True, repetition_penalty=1.3, **{asked: True})
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


def test_fallback_counts_what_plain_decoding_did():
    """An unsupported model (MPT: ALiBi) with ``on_unsupported="fallback"``: one forward per
    new token, all of it in the stats, and the stats in the output object."""
    torch.manual_seed(0)
    config = tf.MptConfig(vocab_size=48, d_model=32, n_layers=2, n_heads=4)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    ids = torch.tensor([[5, 6, 7, 5, 6, 7], [5, 6, 7, 5, 6, 7]])
    stats = lookahead.LookaheadStats()
    with pytest.warns(UserWarning, match="falling back"):
        got = lookahead.generate(model, ids, lookahead_stats=stats, lookahead_config=LookaheadConfig(
            on_unsupported="fallback"), max_new_tokens=10, pad_token_id=0, eos_token_id=None)
    assert got.tolist() == model.generate(ids, do_sample=False, max_new_tokens=10, pad_token_id=0,
                                          eos_token_id=None).tolist()
    assert stats.fallback
    assert (stats.new_tokens, stats.forwards, stats.row_forwards) == (20, 10, 20)
    assert stats.total_s > 0


@pytest.mark.parametrize("config,measured", [
    (LookaheadConfig(), True),
    (LookaheadConfig(adaptive=False), False),
    (LookaheadConfig(method="jacobi"), False),
])
def test_cost_curve_measured_only_for_the_adaptive_controller(monkeypatch, config, measured):
    """The controller's cost curve is measured (about a second, kept on disk) only when the
    adaptive controller runs and no curve was given."""
    calls = []
    monkeypatch.setattr(lookahead.api, "cost_curve", lambda model, **kwargs: calls.append(model) or CostCurve.linear())
    model = tiny_model("llama", "sdpa")
    lookahead.generate(model, REPEAT, lookahead_config=config, **NEW)
    assert len(calls) == int(measured)
    lookahead.generate(model, REPEAT, lookahead_config=config, lookahead_costs=CostCurve.linear(0.5), **NEW)
    assert len(calls) == int(measured)


def test_one_token_prompt_equals_generate():
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[5]])
    assert lookahead.generate(model, ids, **NEW).tolist() == model.generate(ids, do_sample=False, **NEW).tolist()
