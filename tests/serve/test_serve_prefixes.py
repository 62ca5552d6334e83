"""Recent requests' cache entries kept by ``lookahead serve``: a conversation's next turn prefills
only what is new and every answer stays plain ``transformers serve``'s; the store's own rules
(longest shared prefix, cut to leave the prefill a token, taken while in use, bounded by bytes,
full-attention caches only)."""

from __future__ import annotations

import pytest
import torch
from test_serve_exact import chat, complete
from test_serve_stats import stats
from transformers.cache_utils import DynamicCache

from lookahead.serve.prefixes import MIN_TOKENS, PrefixCaches

from tiny_models import VOCAB, tiny_model

TASKS = ("def mean(xs):\n", "def median(xs):\n", "def mode(xs):\n")


def test_a_conversations_turns_reuse_its_cache_and_stay_exact(servers):
    """Three turns, each re-sending the conversation so far: the later turns start from the
    cache the earlier one left, and every answer equals plain serve's."""
    history, before = "", stats(servers.look)["prefixes"]["reused_tokens"]
    for task in TASKS:
        prompt = f"{history}# Next\n{task}"
        got = complete(servers.look, True, prompt=prompt, max_tokens=40)
        assert got == complete(servers.plain, True, prompt=prompt, max_tokens=40)
        history = f"{prompt}{got[0]}\n\n"
    assert stats(servers.look)["prefixes"]["reused_tokens"] - before >= 2 * MIN_TOKENS


def test_a_chat_reuses_its_cache_and_stays_exact(servers):
    messages, before = [{"role": "system", "content": "Short, correct code. " * 6}], stats(servers.look)
    for task in TASKS:
        messages = [*messages, {"role": "user", "content": task}]
        got = chat(servers.look, False, messages=messages, max_tokens=32)
        assert got == chat(servers.plain, False, messages=messages, max_tokens=32)
        messages = [*messages, {"role": "assistant", "content": got[0]}]
    assert stats(servers.look)["prefixes"]["reused_tokens"] > before["prefixes"]["reused_tokens"]


def cache_of(model, ids: list[int]) -> DynamicCache:
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True)
    return cache


TOKENS = [3 + (7 * i) % (VOCAB - 3) for i in range(2 * MIN_TOKENS)]


def test_the_longest_shared_prefix_is_taken_cut_and_removed():
    model, store = tiny_model("llama"), PrefixCaches(1 << 30)
    store.keep(cache_of(model, TOKENS), torch.tensor(TOKENS))
    store.keep(
        cache_of(model, TOKENS[:MIN_TOKENS] + [5] * MIN_TOKENS), torch.tensor(TOKENS[:MIN_TOKENS] + [5] * MIN_TOKENS)
    )
    prompt = torch.tensor(TOKENS[: MIN_TOKENS + 10] + [7, 7])
    cache, held = store.take(prompt)
    assert held == MIN_TOKENS + 10 and cache.get_seq_length() == held  # the first entry, cut where they part
    assert store.describe()["entries"] == 1  # taken out while its request decodes
    again, _ = store.take(prompt)
    assert again.get_seq_length() == MIN_TOKENS  # the other entry shares less
    assert store.take(prompt) == (None, 0)


def test_a_prompt_the_entry_holds_whole_leaves_the_prefill_one_token():
    model, store = tiny_model("llama"), PrefixCaches(1 << 30)
    store.keep(cache_of(model, TOKENS), torch.tensor(TOKENS))
    cache, held = store.take(torch.tensor(TOKENS))
    assert held == len(TOKENS) - 1 == cache.get_seq_length()


def test_a_short_shared_prefix_takes_nothing():
    model, store = tiny_model("llama"), PrefixCaches(1 << 30)
    store.keep(cache_of(model, TOKENS), torch.tensor(TOKENS))
    assert store.take(torch.tensor(TOKENS[: MIN_TOKENS - 1] + [9] * 40)) == (None, 0)
    assert store.describe()["entries"] == 1


def test_the_store_is_bounded_by_bytes_oldest_out_first():
    model = tiny_model("llama")
    one = cache_of(model, TOKENS)
    size = sum(t.numel() * t.element_size() for layer in one.layers for t in (layer.keys, layer.values))
    store = PrefixCaches(2 * size)
    for first in (4, 5, 6):  # three texts that part at once
        ids = [first, *TOKENS[1:]]
        store.keep(cache_of(model, ids), torch.tensor(ids))
    assert store.describe()["entries"] == 2 and store.describe()["bytes"] <= 2 * size
    assert store.take(torch.tensor([4, *TOKENS[1:], 1]))[0] is None  # the oldest went
    assert store.take(torch.tensor([6, *TOKENS[1:], 1]))[0] is not None


@pytest.mark.parametrize("limit, family", [(0, "llama"), (1 << 30, "mistral")], ids=["none-kept", "sliding"])
def test_nothing_is_kept_at_limit_0_or_from_a_sliding_window_cache(limit, family):
    model, store = tiny_model(family), PrefixCaches(limit)
    store.keep(cache_of(model, TOKENS), torch.tensor(TOKENS))
    assert store.describe()["entries"] == 0
    with pytest.raises(ValueError, match="limit_bytes"):
        PrefixCaches(-1)
