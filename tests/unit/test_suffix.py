"""The copy guess's drafts (``lookahead.drafts.suffix_kernels``, ``suffix``, ``drafts``) against plain
Python: the suffix array's order and counts, each draft tree's nodes and probabilities, the best
match length and scope, and index files that are crafted or corrupt. What a step feeds of a
draft is the budget's (tests/unit/test_budget.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead.drafts import suffix_kernels
from lookahead.drafts.copy_drafter import CopyDrafter
from lookahead.drafts.suffix import SuffixIndex, join_texts, suffix_array

from strategies import copy_texts, history_cases

CAP = 16


def continuation(text: list[int], start: int, depth: int, wrap: bool) -> int:
    """The depth-th token after ``start``, as the kernels define it (-1: ended)."""
    n, i = len(text), start + depth
    if i >= n:
        if not wrap or start >= n:
            return -1
        i = start + depth % (n - start)
    return text[i]


def reference_nodes(text, occ, max_depth, min_prob, wrap) -> dict[tuple, float]:
    """Every path of continuation tokens followed by at least ``min_prob`` of ``occ``."""
    nodes, frontier = {}, [()]
    while frontier:
        path = frontier.pop()
        if len(path) == max_depth:
            continue
        nexts = {}
        for o in occ:
            if all(continuation(text, o, d, wrap) == t for d, t in enumerate(path)):
                tok = continuation(text, o, len(path), wrap)
                if tok >= 0:
                    nexts[tok] = nexts.get(tok, 0) + 1
        for tok, count in nexts.items():
            share = count / len(occ)
            if share >= min_prob:
                nodes[path + (tok,)] = share
                frontier.append(path + (tok,))
    return nodes


def kernel_paths(tokens, parents, probs, count) -> dict[tuple, float]:
    paths = {}
    for i in range(count):
        path, node = [], i
        while node >= 0:
            path.append(int(tokens[node]))
            node = parents[node]
        paths[tuple(reversed(path))] = float(probs[i])
    return paths


def outputs(cap=CAP):
    return np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64), np.empty(cap)


def check_top(got: dict, want: dict, cap: int) -> float:
    """``got`` is a best-first top ``cap`` of ``want`` (exact shares); returns its sum."""
    assert len(got) == min(cap, len(want))
    for path, prob in got.items():
        assert path in want and prob == pytest.approx(want[path])
        assert path[:-1] in got or len(path) == 1  # a tree: parents are in it
    left = [p for path, p in want.items() if path not in got]
    assert not left or min(got.values()) >= max(left) - 1e-12
    return sum(got.values())


@settings(max_examples=200)
@given(
    text=copy_texts(),
    data=st.data(),
    max_depth=st.integers(1, 8),
    min_prob=st.sampled_from([0.1, 0.25, 0.5]),
    cap=st.integers(1, 12),
    wrap=st.booleans(),
)
def test_grow_tree_is_the_best_first_top_of_the_continuations(text, data, max_depth, min_prob, cap, wrap):
    occ = data.draw(st.lists(st.integers(0, len(text)), min_size=1, max_size=8))
    arr = np.array(text, dtype=np.int32)
    out = outputs(cap)
    count, expected = suffix_kernels.grow_tree(
        arr, arr.shape[0], wrap, np.array(occ, dtype=np.int64), cap, max_depth, min_prob, *out
    )
    want = reference_nodes(text, occ, max_depth, min_prob, wrap)
    got = kernel_paths(*out, count)
    assert expected == pytest.approx(check_top(got, want, cap))
    probs = out[2][:count]
    assert all(probs[:-1] >= probs[1:] - 1e-12)  # best first: every prefix is the best tree of its size


def reference_text_draft(text, max_match, max_occ, max_depth, min_prob):
    """The best expectation over every match length, as ``text_draft`` defines its trees."""
    n, best = len(text), 0.0
    for m in range(1, max_match + 1):
        occ = [p for p in range(n - 1, 0, -1) if p >= m and text[p - m : p] == text[n - m :] and n - m >= 0][:max_occ]
        if not occ:
            continue
        depth = min(max_depth, max(1, int(m * 2.0 + 2.0)))
        nodes = sorted(reference_nodes(text, occ, depth, min_prob, True).values(), reverse=True)
        best = max(best, sum(nodes[:CAP]))
    return best


@settings(max_examples=200)
@given(text=copy_texts(), max_match=st.integers(1, 6), max_occ=st.integers(1, 6))
def test_text_draft_keeps_the_match_length_that_expects_most(text, max_match, max_occ):
    arr = np.array(text, dtype=np.int32)  # the current text as the copy drafter passes it
    out = outputs()
    count, expected, m = suffix_kernels.text_draft(arr, 1, max_match, max_occ, CAP, CAP, 2.0, 2.0, 0.1, *out)
    assert expected == pytest.approx(reference_text_draft(text, max_match, max_occ, CAP, 0.1))
    assert (count > 0) == (expected > 0) and m <= max_match


def test_text_draft_continues_a_loop():
    """A text that repeats a period drafts the period on, one chain of probability 1."""
    text = np.array([5, 6, 7, 8] * 3 + [5, 6], dtype=np.int32)
    out = outputs()
    count, expected, _ = suffix_kernels.text_draft(text, 1, 16, 64, CAP, CAP, 2.0, 2.0, 0.1, *out)
    assert out[0][:count].tolist() == ([7, 8, 5, 6] * 4)[:count] and count == CAP
    assert out[1][:count].tolist() == list(range(-1, count - 1)) and expected == CAP


def sort_key(text: list[int], i: int) -> tuple:
    return tuple(text[i : i + 64])  # a prefix sorts first: ended < separator (-1) < tokens


@settings(max_examples=200)
@given(texts=st.lists(st.lists(st.integers(0, 3), max_size=30), min_size=1, max_size=4))
def test_suffix_array_sorts_suffixes_and_counts_patterns(texts):
    text = join_texts(np.array(t, dtype=np.int64) for t in texts).tolist()
    sa = suffix_array(np.array(text, dtype=np.int32))
    assert sa.tolist() == sorted(range(len(text)), key=lambda i: sort_key(text, i))
    index = SuffixIndex(np.array(text, dtype=np.int32), sa)
    for pattern in ([0], [1, 2], [0, 0, 1], [3, 3, 3, 3]):
        want = sum(text[i : i + len(pattern)] == pattern for i in range(len(text)))
        assert index.count(pattern) == want


@settings(max_examples=200)
@given(case=history_cases(), max_match=st.integers(1, 6))
def test_index_draft_expects_what_the_reference_does(case, max_match):
    earlier, text = case
    if not any(earlier):
        return
    index = SuffixIndex.from_texts(np.array(t, dtype=np.int64) for t in earlier)
    joined = index.text.tolist()
    query = np.array(text, dtype=np.int32)
    out = outputs()
    count, expected, m = suffix_kernels.index_draft(
        index.text, index.sa, query, 1, max_match, 1 << 12, CAP, CAP, 2.0, 2.0, 0.1, *out
    )
    best = 0.0
    for k in range(1, min(max_match, len(text)) + 1):
        occ = [i + k for i in range(len(joined)) if joined[i : i + k] == text[len(text) - k :]]
        if occ:
            depth = min(CAP, max(1, int(k * 2.0 + 2.0)))
            nodes = sorted(reference_nodes(joined, occ, depth, 0.1, False).values(), reverse=True)
            best = max(best, sum(nodes[:CAP]))
    assert expected == pytest.approx(best)
    for path in kernel_paths(*out, count):
        assert -1 not in path  # no draft runs past the end of an earlier text


def test_the_best_scope_wins():
    """An earlier text that continues the current one further than the text itself wins, and
    the tree names the match it grew from (``1 2 3``, three tokens)."""
    history = SuffixIndex.from_texts([np.array([1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=np.int64)])
    drafter = CopyDrafter(CAP, 16, 0.1, history=lambda: (history,))
    rows = drafter.rows(np.array([9, 9, 1, 2, 3], dtype=np.int64))
    assert drafter.scope == "history" and rows[0].tolist()[:6] == [4, 5, 6, 7, 8, 9]
    assert drafter.tree(np.array([9, 9, 1, 2, 3], dtype=np.int64))[3] == 3
    assert drafter.tree(np.array([7, 7, 7], dtype=np.int64))[3] == 2  # the text's own: 7 7 then 7


def _saved(tmp_path, **arrays):
    path = tmp_path / "index.npz"
    np.savez(path, **arrays)
    return path


def test_index_round_trips(tmp_path):
    index = SuffixIndex.from_texts([np.array([3, 4, 5, 3, 4], dtype=np.int64), np.array([4, 5], dtype=np.int64)])
    index.save(tmp_path / "i.npz")
    back = SuffixIndex.load(tmp_path / "i.npz", vocab_size=6)
    assert back.text.tolist() == index.text.tolist() and back.sa.tolist() == index.sa.tolist()
    assert back.count([4, 5]) == 2 and back.nbytes == 8 * len(back)


@pytest.mark.parametrize(
    "arrays,message",
    [
        (dict(text=np.array([1, 2], dtype=np.int32)), "no array 'sa'"),
        (dict(text=np.array([1, 2], dtype=np.int64), sa=np.array([0, 1], dtype=np.int32)), "must be int32"),
        (dict(text=np.array([1, 2, 3], dtype=np.int32), sa=np.array([0, 1], dtype=np.int32)), "has 2 rows"),
        (dict(text=np.array([1, -5], dtype=np.int32), sa=np.array([0, 1], dtype=np.int32)), "'text' holds values"),
        (dict(text=np.array([1, 99], dtype=np.int32), sa=np.array([0, 1], dtype=np.int32)), "token ids in \\[0, 9\\]"),
        (dict(text=np.array([1, 2], dtype=np.int32), sa=np.array([0, 100000], dtype=np.int32)), "outside"),
        (dict(text=np.array([1, 2], dtype=np.int32), sa=np.array([1, 1], dtype=np.int32)), "not a permutation"),
    ],
)
def test_a_crafted_index_file_is_refused(tmp_path, arrays, message):
    with pytest.raises(ValueError, match=message):
        SuffixIndex.load(_saved(tmp_path, **arrays), vocab_size=10)
