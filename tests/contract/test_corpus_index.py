"""A corpus index (``lookahead_index=``): exact like every guess source, drafted from where the
corpus continues the text, shared by a batch's rows, and refused when it does not fit the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lookahead
from lookahead import SuffixIndex

from tiny_models import tiny_model

KW = dict(max_new_tokens=40, eos_token_id=None, pad_token_id=0)
PROMPT = torch.tensor([[7, 30, 12, 41, 3, 19, 25, 8]])  # random: the text itself repeats nothing
CHEAP = lookahead.CostCurve.linear(0.001)  # every draft pays: what the index gives shows


def _greedy(model, ids, **kwargs):
    return model.generate(ids, do_sample=False, **{**KW, **kwargs})


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", "sdpa")


def test_an_index_of_the_answer_drafts_it(model):
    """An index holding what greedy writes after the prompt: the copy guess drafts it from there
    from the first step on (measured: 8 tokens per forward, against 4 without the index, where
    the copy guess waits for the tiny model's output to loop)."""
    want = _greedy(model, PROMPT)
    index = SuffixIndex.from_texts([want[0].numpy(), np.array([5, 6, 7, 8, 9], dtype=np.int64)])
    with_index, without = lookahead.LookaheadStats(), lookahead.LookaheadStats()
    got = lookahead.generate(
        model, PROMPT, lookahead_index=index, lookahead_stats=with_index, lookahead_costs=CHEAP, **KW
    )
    assert got.tolist() == want.tolist()
    lookahead.generate(model, PROMPT, lookahead_stats=without, lookahead_costs=CHEAP, **KW)
    assert with_index.tokens_per_forward >= 1.5 * without.tokens_per_forward
    assert with_index.source_tokens.get("copy", 0) >= 30


def test_an_unrelated_index_stays_exact_in_a_batch(model):
    batch = torch.tensor([[0, 0, 5, 9, 14, 7, 22], [16, 23, 42, 7, 16, 23, 42]])
    mask = (batch != 0).long()
    index = SuffixIndex.from_texts([np.arange(3, 48, dtype=np.int64), np.array([16, 23, 42, 7, 5] * 4)])
    want = _greedy(model, batch, attention_mask=mask)
    got = lookahead.generate(model, batch, attention_mask=mask, lookahead_index=index, **KW)
    assert got.tolist() == want.tolist()


def test_an_index_that_does_not_fit_is_refused(model):
    with pytest.raises(TypeError, match="lookahead_index must be a lookahead.SuffixIndex"):
        lookahead.generate(model, PROMPT, lookahead_index="corpus.npz", **KW)
    foreign = SuffixIndex.from_texts([np.array([3, 4, 60000], dtype=np.int64)])
    with pytest.raises(ValueError, match="holds token id 60000, but the model has 48 ids"):
        lookahead.generate(model, PROMPT, lookahead_index=foreign, **KW)
