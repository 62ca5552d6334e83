"""Sliding-window models: ``lookahead.generate`` equals ``model.generate`` (tokens and logits)
when one step accepts more tokens than the window is long.

In a sliding layer a token sees only the ``sliding_window`` newest positions. Short guesses
never reach that depth, so here a wide window and long copy guesses run on text the copy guess
predicts (with a check that some step really accepted more than ``SLIDING`` tokens), and on
the models' own text from repetitive prompts. The mask and cache sides are pinned in
tests/unit/test_mask.py and tests/unit/test_cache.py.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LogitsProcessor, LogitsProcessorList

import lookahead

from tiny_models import CASES, SLIDING, SLIDING_FAMILIES, VOCAB, tiny_model

tokens = st.integers(3, VOCAB - 1)

# A wide window and long copy guesses: on text that repeats, single steps accept up to
# copy_length + 1 tokens, far more than SLIDING.
LONG_STEPS = lookahead.LookaheadConfig(window=16, ngram=5, guesses=8, copy_length=16, copy_match=6, method="classic")


SLIDING_CASES = [(family, backend) for family, backend in CASES if family in SLIDING_FAMILIES]


PERIOD = [5, 9, 14, 7, 22, 31, 40, 12, 27, 18, 33]  # 11 distinct tokens, longer than SLIDING


class Periodic(LogitsProcessor):
    """Makes greedy text continue ``PERIOD`` (a +100 bias on the next token of the pattern),
    so copy guesses hold in full whatever the random model prefers. Tokens are then forced,
    but the raw logits that ``output_logits`` reports are still the model's own, computed
    under the step's mask: they are what the comparison checks."""

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, PERIOD[input_ids.shape[1] % len(PERIOD)]] += 100.0
        return scores


def generate_both(model, ids, config, new, **extra):
    kwargs = dict(
        max_new_tokens=new, eos_token_id=None, pad_token_id=0, return_dict_in_generate=True, output_logits=True, **extra
    )
    expected = model.generate(ids, do_sample=False, **kwargs)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    return expected, got, stats


def assert_same_generation(expected, got):
    """Same tokens, and the same logits at every position (a wrong mask shows in the logits
    even where it does not flip an argmax)."""
    assert got.sequences.tolist() == expected.sequences.tolist()
    assert len(got.logits) == len(expected.logits)
    for a, b in zip(got.logits, expected.logits):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def longest_step(stats):
    return max(k for k, n in enumerate(stats.accepted) if n)


@pytest.mark.parametrize("family,backend", SLIDING_CASES)
def test_steps_longer_than_the_window_equal_greedy(family, backend):
    model = tiny_model(family, backend)
    ids = torch.tensor([PERIOD * 3])
    processors = LogitsProcessorList([Periodic()])
    expected, got, stats = generate_both(model, ids, LONG_STEPS, 64, logits_processor=processors)
    assert expected.sequences[0, -len(PERIOD) :].tolist() != [expected.sequences[0, -1].item()] * len(PERIOD)
    assert_same_generation(expected, got)
    assert longest_step(stats) > SLIDING, f"no step accepted more than the {SLIDING}-token window: {stats.accepted}"


@settings(max_examples=max(4, settings.default.max_examples // 2))
@given(
    family=st.sampled_from(SLIDING_FAMILIES),
    motif=st.lists(tokens, min_size=2, max_size=7),
    repeats=st.integers(3, 6),
    window=st.integers(8, 16),
    copy_length=st.sampled_from([10, 16, 24]),
)
def test_long_copied_steps_equal_greedy(family, motif, repeats, window, copy_length):
    """The model's own text on repetitive prompts (no forcing): tokens and logits."""
    model = tiny_model(family, "eager")
    config = lookahead.LookaheadConfig(
        window=window, ngram=4, guesses=4, copy_length=copy_length, copy_match=4, method="classic"
    )
    expected, got, _ = generate_both(model, torch.tensor([motif * repeats]), config, 48)
    assert_same_generation(expected, got)
