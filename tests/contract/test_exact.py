"""The contract: lookahead.generate equals model.generate(do_sample=False), token for token."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lookahead
from lookahead.checking import examples as testing

from strategies import configs, eos_ids, max_new_tokens, prompts, repetitive_prompts
from tiny_models import CASES, FAMILIES, tiny_model


def greedy(model, ids, **kwargs):
    return model.generate(ids, do_sample=False, **kwargs)


@pytest.mark.parametrize("family,backend", CASES)
@given(ids=prompts, config=configs, new=max_new_tokens, eos=eos_ids)
def test_equals_greedy(family, backend, ids, config, new, eos):
    model = tiny_model(family, backend)
    kwargs = dict(max_new_tokens=new, eos_token_id=eos, pad_token_id=0)
    expected = greedy(model, ids, **kwargs)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    assert got.tolist() == expected.tolist()
    assert stats.new_tokens == expected.shape[1] - ids.shape[1]
    assert stats.forwards == stats.steps + 1
    assert sum(k * n for k, n in enumerate(stats.accepted)) + 1 == stats.new_tokens


@given(ids=prompts, config=configs, curve=testing.cost_curves(), new=max_new_tokens, eos=eos_ids)
def test_equals_greedy_on_any_cost_curve(ids, config, curve, new, eos):
    """Whatever the forwards cost (two tokens below one or above), the tokens are greedy's."""
    model = tiny_model("llama", "sdpa")
    kwargs = dict(max_new_tokens=new, eos_token_id=eos, pad_token_id=0)
    stats = lookahead.LookaheadStats()
    mine = dict(lookahead_config=config, lookahead_costs=curve, lookahead_stats=stats)
    got = lookahead.generate(model, ids, **mine, **kwargs)
    assert got.tolist() == greedy(model, ids, **kwargs).tolist()
    assert stats.forwards == stats.steps + 1


@pytest.mark.parametrize("family", FAMILIES)
def test_repetitive_prompts_accept_several_tokens_per_forward(family):
    """Not vacuous: on repeating text the pool hits and steps accept more than one token."""
    model = tiny_model(family, "eager")
    motif = [5, 9, 14, 7, 22, 31]
    ids = torch.tensor([motif * 6])
    expected = greedy(model, ids, max_new_tokens=64, eos_token_id=None, pad_token_id=0)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(
        model,
        ids,
        max_new_tokens=64,
        eos_token_id=None,
        pad_token_id=0,
        lookahead_config=lookahead.LookaheadConfig(window=4, ngram=4, guesses=4, method="classic"),
        lookahead_stats=stats,
    )
    assert got.tolist() == expected.tolist()
    assert stats.pool_hits > 0
    assert max(k for k, n in enumerate(stats.accepted) if n) >= 2


@settings(max_examples=15)
@given(ids=repetitive_prompts(min_len=12).map(lambda ids: torch.tensor([ids])), seed=st.integers(0, 3))
def test_repetitive_prompts_compress_on_average(ids, seed):
    """Across random repetitive prompts, mean tokens per forward is above one."""
    model = tiny_model("llama", "sdpa")
    stats = lookahead.LookaheadStats()
    config = lookahead.LookaheadConfig(window=3 + seed, ngram=4, guesses=6)
    got = lookahead.generate(
        model, ids, max_new_tokens=40, eos_token_id=None, pad_token_id=0, lookahead_config=config, lookahead_stats=stats
    )
    assert got.tolist() == greedy(model, ids, max_new_tokens=40, eos_token_id=None, pad_token_id=0).tolist()
    # every step asks the pool: the draft budget decides whether its rows are fed
    assert stats.pool_lookups == stats.steps


def test_mean_compression_over_repetitive_prompts():
    model = tiny_model("gpt2", "sdpa")
    total = lookahead.LookaheadStats()
    for motif in ([4, 8, 15], [16, 23, 42, 7], [9, 9, 10, 11, 12]):
        ids = torch.tensor([motif * 5])
        lookahead.generate(model, ids, max_new_tokens=40, eos_token_id=None, pad_token_id=0, lookahead_stats=total)
    assert total.tokens_per_forward > 1.3


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma2"])
def test_window_off_pool_only(family):
    model = tiny_model(family, "eager")
    ids = torch.tensor([[5, 6, 7, 8] * 5])
    config = lookahead.LookaheadConfig(window=0, guesses=5)
    kwargs = dict(max_new_tokens=30, eos_token_id=None, pad_token_id=0)
    assert (
        lookahead.generate(model, ids, lookahead_config=config, **kwargs).tolist()
        == greedy(model, ids, **kwargs).tolist()
    )


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_left_padding(family):
    model = tiny_model(family, "sdpa")
    ids = torch.tensor([[0, 0, 0, 5, 6, 7, 8, 5, 6, 7, 8, 5]])
    mask = (ids != 0).long()
    kwargs = dict(attention_mask=mask, max_new_tokens=25, eos_token_id=None, pad_token_id=0)
    assert lookahead.generate(model, ids, **kwargs).tolist() == greedy(model, ids, **kwargs).tolist()


def test_long_generation_slides_past_the_window():
    """Well past the sliding window on a hybrid model (full + sliding layers)."""
    model = tiny_model("qwen2", "sdpa")
    ids = torch.tensor([[7, 8, 9, 10, 11, 12] * 4])
    kwargs = dict(max_new_tokens=120, eos_token_id=None, pad_token_id=0)
    config = lookahead.LookaheadConfig(window=6, ngram=5, guesses=8)
    assert (
        lookahead.generate(model, ids, lookahead_config=config, **kwargs).tolist()
        == greedy(model, ids, **kwargs).tolist()
    )


def test_long_generation_grows_the_host_made_steps_buffers():
    """A short prompt and a long answer on a full-attention model (whose CPU steps are made
    on the host): the keep flags and the token buffer grow past their first size mid-decode,
    and the tokens stay generate's."""
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[5, 6, 7, 8, 9]])  # buffers of 2 x 5 + 64 entries to begin with
    kwargs = dict(max_new_tokens=160, min_new_tokens=160, pad_token_id=0)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_stats=stats, **kwargs)
    assert got.shape[1] == 165 and stats.tokens_per_forward > 1
    assert got.tolist() == greedy(model, ids, **kwargs).tolist()


@pytest.mark.parametrize("family", ["llama", "mistral"])
@settings(max_examples=10)
@given(ids=repetitive_prompts(min_len=8).map(lambda ids: torch.tensor([ids])), cut=st.floats(0.1, 0.95))
def test_a_cache_holding_a_prompt_prefix_gives_generates_tokens(family, ids, cut):
    """A ``DynamicCache`` already holding the prompt's first tokens (a shared prefix reused, as
    a server keeps a conversation's) decodes to the tokens ``generate`` gives from that cache,
    and ends holding every token but the last."""
    from copy import deepcopy

    from transformers.cache_utils import DynamicCache

    from lookahead.compat import takes_cache_keyword

    model = tiny_model(family, "sdpa")
    held = max(1, int(cut * ids.shape[1]))
    prefix = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids[:, :held], cache=prefix, use_cache=True)
    keyword = "cache" if takes_cache_keyword(model) else "past_key_values"
    kwargs = dict(max_new_tokens=24, eos_token_id=None, pad_token_id=0)
    expected = greedy(model, ids, **{keyword: deepcopy(prefix)}, **kwargs)
    cache = deepcopy(prefix)
    got = lookahead.generate(model, ids, **{keyword: cache}, **kwargs)
    assert got.tolist() == expected.tolist()
    assert cache.get_seq_length() == got.shape[1] - 1
