"""lookahead's opt-in attention backend: sdpa without ``repeat_kv`` on masked GQA steps."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers.integrations.sdpa_attention as sdpa
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

import lookahead
from lookahead.runtime.attention import gqa_sdpa_attention, register_attention
from lookahead.support import check_model

from tiny_models import ATTENTION, tiny_model


class _Heads(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def test_register_is_idempotent_and_names_the_backend_for_attention_and_masks():
    assert register_attention() == register_attention() == ATTENTION == "lookahead_sdpa"
    assert AttentionInterface()[ATTENTION] is gqa_sdpa_attention
    assert ATTENTION in AttentionMaskInterface()


@settings(max_examples=60)
@given(
    kv_heads=st.integers(1, 3),
    groups=st.integers(1, 4),
    q=st.integers(1, 6),
    past=st.integers(0, 9),
    bool_mask=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_equals_transformers_sdpa_under_a_tree_mask(kv_heads, groups, q, past, bool_mask, seed):
    """Under any step mask (each query sees a random subset of the step, every query itself),
    the backend's output equals transformers' sdpa with ``repeat_kv``, to float rounding."""
    gen = torch.Generator().manual_seed(seed)
    heads, dim, keys = kv_heads * groups, 8, past + q
    query = torch.randn(2, heads, q, dim, generator=gen)
    key, value = (torch.randn(2, kv_heads, keys, dim, generator=gen) for _ in range(2))
    seen = torch.rand(2, 1, q, keys, generator=gen) < 0.6
    seen[..., :past] |= torch.rand(2, 1, q, past, generator=gen) < 0.5
    seen[..., torch.arange(q), past + torch.arange(q)] = True  # every query sees itself
    mask = seen if bool_mask else torch.where(seen, 0.0, torch.finfo(torch.float32).min)
    module = _Heads(groups)
    ours, _ = gqa_sdpa_attention(module, query, key, value, mask, scaling=dim**-0.5)
    theirs, _ = sdpa.sdpa_attention_forward(module, query, key, value, mask, scaling=dim**-0.5)
    assert ours.shape == theirs.shape == (2, q, heads, dim)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_masked_multi_token_gqa_steps_never_repeat_kv(monkeypatch):
    """Through a whole lookahead decode the backend never copies keys and values, where
    transformers' sdpa does on every masked step; both give ``generate``'s tokens."""
    copies = []
    real = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda x, n: copies.append(n) or real(x, n))
    ids = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 8]])
    kw = dict(max_new_tokens=24, do_sample=False)
    plain = tiny_model("llama", "sdpa")
    expected = plain.generate(ids, **kw)
    copies.clear()
    assert torch.equal(lookahead.generate(plain, ids, **kw), expected)
    assert copies, "transformers' sdpa copied no KV: the test no longer shows what the backend saves"
    ours = copy.deepcopy(plain)
    ours.set_attn_implementation(register_attention())
    copies.clear()
    stats = lookahead.LookaheadStats()
    assert torch.equal(lookahead.generate(ours, ids, lookahead_stats=stats, **kw), expected)
    assert torch.equal(ours.generate(ids, **kw), expected)
    assert stats.guess_tokens > 0 and copies == []


@pytest.mark.parametrize("case", ["no mask", "one token", "no groups"])
def test_other_calls_are_transformers_sdpa_itself(case):
    gen = torch.Generator().manual_seed(0)
    groups = 1 if case == "no groups" else 2
    q = 1 if case == "one token" else 3
    query = torch.randn(1, 4, q, 8, generator=gen)
    key, value = (torch.randn(1, 4 // groups, 5, 8, generator=gen) for _ in range(2))
    mask = None if case == "no mask" else torch.zeros(1, 1, q, 5)
    module = _Heads(groups)
    ours, _ = gqa_sdpa_attention(module, query, key, value, mask)
    theirs, _ = sdpa.sdpa_attention_forward(module, query, key, value, mask)
    assert torch.equal(ours, theirs)


def test_a_model_on_the_backend_passes_the_support_check_without_a_probe(monkeypatch):
    import lookahead.support as support

    monkeypatch.setattr(support, "probe", lambda model: pytest.fail("a verified family was probed"))
    check_model(tiny_model("llama", ATTENTION))
