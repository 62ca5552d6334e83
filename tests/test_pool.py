"""The n-gram pool against a dict-of-deques reference model."""

from __future__ import annotations

from collections import deque

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from lookahead.kernels import text_ngrams
from lookahead.pool import NgramPool

small_tokens = st.integers(0, 7)


class PoolMachine(RuleBasedStateMachine):
    """With room for every key, the pool is exactly a dict of LRU deques of length G."""

    @initialize(ngram=st.integers(2, 5), guesses=st.integers(1, 4))
    def setup(self, ngram, guesses):
        self.pool = NgramPool(ngram, guesses, capacity=1 << 12)
        self.ref: dict[int, deque] = {}
        self.ngram, self.guesses = ngram, guesses

    @rule(data=st.data())
    def insert(self, data):
        rows = data.draw(st.lists(st.lists(small_tokens, min_size=self.ngram, max_size=self.ngram),
                                  min_size=1, max_size=6))
        self.pool.insert(np.array(rows, dtype=np.int64))
        for row in rows:
            held = self.ref.setdefault(row[0], deque(maxlen=self.guesses))
            cont = tuple(row[1:])
            if cont in held:
                held.remove(cont)
            held.append(cont)

    @precondition(lambda self: hasattr(self, "pool"))
    @rule(key=small_tokens)
    def lookup(self, key):
        got = [tuple(r) for r in self.pool.lookup(key).tolist()]
        assert got == list(reversed(self.ref.get(key, ())))

    @precondition(lambda self: hasattr(self, "pool"))
    @invariant()
    def same_keys(self):
        assert len(self.pool) == len(self.ref)


TestPoolMachine = PoolMachine.TestCase


@given(ngram=st.integers(2, 4), guesses=st.integers(1, 3),
       rows=st.lists(st.lists(st.integers(0, 500), min_size=4, max_size=4), min_size=1, max_size=200))
def test_tiny_capacity_bounds_memory_and_returns_only_inserted(ngram, guesses, rows):
    pool = NgramPool(ngram, guesses, capacity=8)
    arr = np.array(rows, dtype=np.int64)[:, :ngram]
    pool.insert(arr)
    assert len(pool) <= pool.capacity == 8
    seen: dict[int, set] = {}
    for row in arr.tolist():
        seen.setdefault(row[0], set()).add(tuple(row[1:]))
    for key in seen:
        got = pool.lookup(key)
        assert got.shape[0] <= guesses
        assert {tuple(r) for r in got.tolist()} <= seen[key]
    # the newest n-gram always survives its own insertion
    last = arr[-1].tolist()
    assert tuple(pool.lookup(last[0])[0].tolist()) == tuple(last[1:])


@given(tokens=st.lists(st.integers(0, 50), max_size=30), start=st.integers(-3, 30), n=st.integers(2, 6))
def test_text_ngrams_are_the_windows_ending_after_start(tokens, start, n):
    arr = np.array(tokens, dtype=np.int64)
    got = text_ngrams(arr, start, n).tolist()
    first = max(start, 0)
    assert got == [tokens[i:i + n] for i in range(first, len(tokens) - n + 1)]


def test_zero_guesses_pool_is_empty():
    pool = NgramPool(3, 0)
    pool.insert(np.array([[1, 2, 3]], dtype=np.int64))
    assert pool.lookup(1).shape == (0, 2)


@given(tokens=st.lists(st.integers(0, 5), min_size=1, max_size=40), match=st.integers(1, 3),
       length=st.integers(1, 8))
def test_copy_guess_follows_the_latest_longest_match(tokens, match, length):
    from lookahead.kernels import copy_guess

    arr = np.array(tokens, dtype=np.int64)
    out = np.empty(length, dtype=np.int64)
    got = out[: copy_guess(arr, match, length, out)].tolist()
    expected = []
    for k in range(min(match, len(tokens) - 1), 0, -1):
        tail = tokens[-k:]
        starts = [s for s in range(len(tokens) - k) if tokens[s:s + k] == tail]
        if starts:
            s = max(starts)
            expected = tokens[s + k: s + k + length]
            break
    assert got == expected
