"""Recycled successors (``SuccessorTable``): the top-k next tokens the model predicted at every
fed token, against a dict; under seeded sampling the rows follow the race with the known
noise; guesses grown from them keep greedy decoding exact, and alone they compress a
repeating text.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import lookahead
from lookahead.drafts.successors import SuccessorTable

from strategies import eos_ids, max_new_tokens, prompts
from tiny_models import recycle, tiny_model

small = st.integers(0, 7)


@given(
    feeds=st.lists(st.tuples(st.lists(small, min_size=1, max_size=6), st.integers(0, 1000)), max_size=8),
    root=small,
    k=st.integers(1, 3),
    length=st.integers(1, 5),
)
def test_successor_table_against_a_dict(feeds, root, k, length):
    """The table keeps each token's newest top-k; rows follow first successors from there."""
    table = SuccessorTable(8, k, length)
    latest: dict[int, list[int]] = {}
    for fed, seed in feeds:
        logits = torch.randn(len(fed), 8, generator=torch.Generator().manual_seed(seed))
        recycle(table, torch.tensor(fed), logits)
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


def _fill(table: SuccessorTable, feeds) -> dict[int, tuple[list[int], list[float]]]:
    """Feed ``table`` and return each token's newest (successors, logits), as a dict."""
    latest = {}
    for fed, seed in feeds:
        logits = torch.randn(len(fed), 8, generator=torch.Generator().manual_seed(seed))
        recycle(table, torch.tensor(fed), logits)
        top = logits.topk(table.k, dim=-1)
        for token, ids, values in zip(fed, top.indices.tolist(), top.values.tolist()):
            latest[token] = (ids, values)
    return latest


@given(
    feeds=st.lists(st.tuples(st.lists(small, min_size=1, max_size=6), st.integers(0, 1000)), max_size=8),
    root=small,
    k=st.integers(1, 4),
    length=st.integers(1, 5),
    m=st.integers(0, 6),
    temperature=st.floats(0.3, 2.0),
    seed=st.integers(0, 1000),
)
def test_raced_rows_follow_the_known_noise(feeds, root, k, length, m, temperature, seed):
    """Row 0 starts with, and every row goes on by, the stored successor that wins the race
    ``logit / T - log q`` with the noise of its depth (the first successor past the noise's m
    rows); rows 1.. start with the root's other successors, best first."""
    table = SuccessorTable(8, k, length)
    latest = _fill(table, feeds)
    noise = torch.empty(m, 8).exponential_(generator=torch.Generator().manual_seed(seed)).numpy()

    def successor(token: int, depth: int) -> int | None:
        if token not in latest:
            return None
        ids, values = latest[token]
        if depth >= m:
            return ids[0]
        scores = [
            float(np.float32(v)) * (1.0 / temperature) - float(np.log(noise[depth, t])) for t, v in zip(ids, values)
        ]
        return ids[int(np.argmax(scores))]

    first = successor(root, 0)
    starts = [] if first is None else [first] + [t for t in latest[root][0] if t != first]
    rows = []
    for cur in starts:
        row = []
        while cur is not None and len(row) < length:
            row.append(cur)
            cur = successor(cur, len(row))
        rows.append(row + [-1] * (length - len(row)))
    assert table.guesses(root, noise, temperature).tolist() == rows


@given(seed=st.integers(0, 2**16), temperature=st.floats(0.3, 2.0))
def test_a_whole_distribution_s_race_is_the_seeded_sample(seed, temperature):
    """Where the table keeps every token (k = V), the first guess after the root is what
    seeded sampling from the recorded distribution draws with that noise:
    ``argmax(softmax(logits / T) / q)``, ``torch.multinomial``'s race."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, 8, generator=gen) * 3
    q = torch.empty(1, 8).exponential_(generator=gen)
    table = SuccessorTable(8, 8, 1)
    recycle(table, torch.tensor([3]), logits)
    sample = int((torch.softmax(logits / temperature, dim=-1) / q).argmax())
    assert table.guesses(3, q.numpy(), temperature)[0, 0] == sample


@pytest.mark.parametrize("family,backend", [("llama", "sdpa"), ("mistral", "eager"), ("gpt2", "sdpa")])
@given(ids=prompts, new=max_new_tokens, eos=eos_ids, k=st.integers(1, 4), window=st.integers(0, 4))
def test_successor_guesses_keep_greedy_exact(family, backend, ids, new, eos, k, window):
    model = tiny_model(family, backend)
    kwargs = dict(max_new_tokens=new, eos_token_id=eos, pad_token_id=0)
    config = lookahead.LookaheadConfig(window=window, successors=k, method="classic")
    got = lookahead.generate(model, ids, lookahead_config=config, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()


def test_successors_alone_compress_a_repeating_text():
    """With every other source off, recycled predictions still accept several tokens."""
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[5, 9, 14, 7, 22, 31] * 4])
    kwargs = dict(max_new_tokens=60, eos_token_id=None, pad_token_id=0)
    config = lookahead.LookaheadConfig(window=0, guesses=0, copy_length=0, successors=2, method="classic")
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    assert stats.tokens_per_forward > 1.5


def test_a_restored_table_guesses_as_the_saved_one_and_other_shapes_are_refused():
    saved = SuccessorTable(8, 2, 3)
    saved.record(np.array([1, 2, 3]), np.array([[2, 5], [3, 6], [1, 7]]), np.array([[2.0, 1.0]] * 3, np.float32))
    restored = SuccessorTable(8, 2, 3)
    restored.restore(*saved.arrays())
    assert (restored.guesses(1) == saved.guesses(1)).all() and (saved.guesses(1) >= 0).any()
    with pytest.raises(ValueError, match=r"successors of shape \(8, 3\), got \(8, 2\)"):
        SuccessorTable(8, 3, 3).restore(*saved.arrays())
