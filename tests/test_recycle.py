"""Recycled successors, longest-suffix copying and the pool kept across requests."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lookahead
from lookahead import kernels
from lookahead.pool import NgramPool
from lookahead.recycle import SuccessorTable
from strategies import copy_texts, eos_ids, max_new_tokens, prompts
from tiny_models import VOCAB, tiny_model

small = st.integers(0, 7)


@given(feeds=st.lists(st.tuples(st.lists(small, min_size=1, max_size=6), st.integers(0, 1000)), max_size=8),
       root=small, k=st.integers(1, 3), length=st.integers(1, 5))
def test_successor_table_against_a_dict(feeds, root, k, length):
    """The table keeps each token's newest top-k; rows follow first successors from there."""
    table = SuccessorTable(8, k, length)
    latest: dict[int, list[int]] = {}
    for fed, seed in feeds:
        logits = torch.randn(len(fed), 8, generator=torch.Generator().manual_seed(seed))
        table.update(torch.tensor(fed), logits)
        top = logits.topk(k, dim=-1).indices.tolist()
        for token, row in zip(fed, top):
            latest[token] = row
    rows = []
    for first in latest.get(root, []):
        row, cur = [], first
        while len(row) < length:
            row.append(cur)
            if cur not in latest:
                break
            cur = latest[cur][0]
        rows.append(row + [-1] * (length - len(row)))
    assert table.guesses(root).tolist() == rows


@settings(max_examples=400)  # a pure function on short arrays: examples are cheap
@given(tokens=copy_texts(), match=st.integers(1, 8), length=st.integers(1, 8))
def test_copy_follows_the_longest_suffix_match(tokens, match, length):
    """Among earlier ends of the text, the one whose preceding tokens match the most trailing
    tokens (capped at ``match``) wins, the latest among equals."""
    arr = np.array(tokens, dtype=np.int64)
    out = np.empty(length, dtype=np.int64)
    got = out[: kernels.copy_guess(arr, match, length, out)].tolist()
    n, best, best_m = len(tokens), None, 0
    for end in range(n - 1, 0, -1):
        m = 0
        while m < min(match, n - 1) and m < end and tokens[end - 1 - m] == tokens[n - 1 - m]:
            m += 1
        if m > best_m:
            best, best_m = end, m
    expected = []
    if best is not None:
        text = list(tokens)
        while len(expected) < length:
            text.append(text[best + len(expected)])
            expected.append(text[-1])
    assert got == expected


@pytest.mark.parametrize("family,backend", [("llama", "sdpa"), ("mistral", "eager"), ("gpt2", "sdpa")])
@given(ids=prompts, new=max_new_tokens, eos=eos_ids, k=st.integers(1, 4), window=st.integers(0, 4))
def test_successor_guesses_keep_greedy_exact(family, backend, ids, new, eos, k, window):
    model = tiny_model(family, backend)
    kwargs = dict(max_new_tokens=new, eos_token_id=eos, pad_token_id=0)
    config = lookahead.LookaheadConfig(window=window, successors=k, adaptive=False)
    got = lookahead.generate(model, ids, lookahead_config=config, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()


def test_successors_alone_compress_a_repeating_text():
    """With every other source off, recycled predictions still accept several tokens."""
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[5, 9, 14, 7, 22, 31] * 4])
    kwargs = dict(max_new_tokens=60, eos_token_id=None, pad_token_id=0)
    config = lookahead.LookaheadConfig(window=0, guesses=0, copy_length=0, successors=2, adaptive=False)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    assert stats.tokens_per_forward > 1.5


def test_pool_saved_and_loaded_answers_the_same(tmp_path):
    pool = NgramPool(4, 3, capacity=64, context_tokens=2)
    rng = np.random.default_rng(0)
    pool.insert_text(rng.integers(0, 12, size=200).astype(np.int64))
    pool.save(tmp_path / "pool.npz")
    again = NgramPool.load(tmp_path / "pool.npz")
    assert (again.ngram, again.guesses, again.context_tokens, again.capacity) == (4, 3, 2, 64)
    for key in range(12):
        for before in (-1, 3):
            assert again.lookup(key, before).tolist() == pool.lookup(key, before).tolist()


def test_loading_a_foreign_archive_is_a_clear_error(tmp_path):
    NgramPool(4, 3, capacity=64).save(tmp_path / "a.npz")
    data = dict(np.load(tmp_path / "a.npz"))
    data["conts"] = data["conts"][:, :1]
    np.savez(tmp_path / "b.npz", **data)
    with pytest.raises(ValueError, match="conts"):
        NgramPool.load(tmp_path / "b.npz")


def test_vocab_bound_ignores_out_of_range_tokens():
    table = SuccessorTable(VOCAB, 2, 3)
    table.update(torch.tensor([VOCAB + 5, -1]), torch.randn(2, VOCAB))
    assert table.guesses(0).shape == (0, 3)
