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
    """With room for every key, the pool is exactly a dict of LRU deques of length G,
    keyed by the token and, with two-token contexts, by the (before, token) pair too."""

    @initialize(ngram=st.integers(2, 5), guesses=st.integers(1, 4), context=st.sampled_from([1, 2]))
    def setup(self, ngram, guesses, context):
        self.pool = NgramPool(ngram, guesses, capacity=1 << 12, context_tokens=context)
        self.ref: dict = {}
        self.ngram, self.guesses, self.context = ngram, guesses, context

    def _file(self, key, cont):
        held = self.ref.setdefault(key, deque(maxlen=self.guesses))
        if cont in held:
            held.remove(cont)
        held.append(cont)

    @rule(data=st.data())
    def insert(self, data):
        rows = data.draw(st.lists(st.lists(small_tokens, min_size=self.ngram, max_size=self.ngram),
                                  min_size=1, max_size=6))
        before = data.draw(st.lists(st.integers(-1, 7), min_size=len(rows), max_size=len(rows)))
        self.pool.insert(np.array(rows, dtype=np.int64), np.array(before, dtype=np.int64))
        if self.context == 2:
            for row, b in zip(rows, before):
                if b >= 0:
                    self._file((b, row[0]), tuple(row[1:]))
        for row in rows:
            self._file(row[0], tuple(row[1:]))

    @precondition(lambda self: hasattr(self, "pool"))
    @rule(key=small_tokens, before=st.integers(-1, 7))
    def lookup(self, key, before):
        got = [tuple(r) for r in self.pool.lookup(key, before).tolist()]
        expected = []
        pair = list(reversed(self.ref.get((before, key), ()))) if self.context == 2 and before >= 0 else []
        for cont in pair + list(reversed(self.ref.get(key, ()))):
            if cont not in expected and len(expected) < self.guesses:
                expected.append(cont)
        assert got == expected

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
def test_text_ngrams_start_after_start_with_the_token_before(tokens, start, n):
    arr = np.array(tokens, dtype=np.int64)
    got, before = text_ngrams(arr, start, n)
    first = max(start, 0)
    assert got.tolist() == [tokens[i:i + n] for i in range(first, len(tokens) - n + 1)]
    assert before.tolist() == [tokens[i - 1] if i > 0 else -1 for i in range(first, len(tokens) - n + 1)]


def test_zero_guesses_pool_is_empty():
    pool = NgramPool(3, 0)
    pool.insert(np.array([[1, 2, 3]], dtype=np.int64))
    assert pool.lookup(1).shape == (0, 2)


@given(tokens=st.lists(st.integers(0, 5), min_size=1, max_size=40), match=st.integers(1, 3),
       length=st.integers(1, 8))
def test_copy_guess_follows_the_latest_longest_match_and_loops_on(tokens, match, length):
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
            text = list(tokens)
            while len(expected) < length:  # the text as it would go on if it repeated
                text.append(text[s + k + len(expected)])
                expected.append(text[-1])
            break
    assert got == expected

