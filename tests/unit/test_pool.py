"""The n-gram pool (``lookahead.drafts.pool.NgramPool``) against a dict-of-deques reference
model, bounded in memory, saved and loaded; and what a ``KeptState`` keeps with it across
requests (its history, copied from by later requests; its file, whose every array is checked).
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import lookahead
from lookahead.drafts.history import History
from lookahead.drafts.kept import KeptState
from lookahead.drafts.pool import NgramPool
from lookahead.drafts.successors import SuccessorTable

from tiny_models import VOCAB, recycle, tiny_model

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
        rows = data.draw(
            st.lists(st.lists(small_tokens, min_size=self.ngram, max_size=self.ngram), min_size=1, max_size=6)
        )
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


@given(
    ngram=st.integers(2, 4),
    guesses=st.integers(1, 3),
    rows=st.lists(st.lists(st.integers(0, 500), min_size=4, max_size=4), min_size=1, max_size=200),
)
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


def test_zero_guesses_pool_is_empty():
    pool = NgramPool(3, 0)
    pool.insert(np.array([[1, 2, 3]], dtype=np.int64))
    assert pool.lookup(1).shape == (0, 2)


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


@pytest.mark.parametrize(
    "name,value,bound",
    [
        ("counts", 100000, "counts"),
        ("counts", -1, "counts"),
        ("stamps", -5, "stamps"),
        ("conts", -7, "conts"),
        ("history", -3, "history"),
        ("history_capacity", -1, "history_capacity"),
    ],
)
def test_a_crafted_file_is_refused_with_the_array_and_its_bound(tmp_path, name, value, bound):
    """Files are input: a value a kernel would index with out of bounds (a count of 100000 once
    crashed the process inside numba) is a ValueError naming the array, before any kernel runs."""
    pool = KeptState(NgramPool(4, 3, capacity=64))
    pool.pool.insert_text(np.arange(3, 40, dtype=np.int64) % 11)
    pool.remember(np.arange(3, 9))
    pool.save(tmp_path / "a.npz")
    data = dict(np.load(tmp_path / "a.npz"))
    data[name] = np.array(value, dtype=data[name].dtype) if data[name].shape == () else data[name].copy()
    if data[name].shape != ():
        data[name].flat[0] = value
    np.savez(tmp_path / "b.npz", **data)
    with pytest.raises(ValueError, match=bound):
        KeptState.load(tmp_path / "b.npz")


def test_a_pool_for_another_vocabulary_is_refused_by_generate():
    model = tiny_model("llama", "sdpa")
    pool = NgramPool(5, 2, context_tokens=2)
    pool.insert_text(np.array([3, 4, 5, VOCAB + 10, 6, 7], dtype=np.int64))
    with pytest.raises(ValueError, match=f"token id {VOCAB + 10}.*{VOCAB} ids"):
        lookahead.generate(model, torch.tensor([[3, 4, 5]]), lookahead_pool=KeptState(pool), max_new_tokens=4)


def test_vocab_bound_ignores_out_of_range_tokens():
    table = SuccessorTable(VOCAB, 2, 3)
    recycle(table, torch.tensor([VOCAB + 5, -1]), torch.randn(2, VOCAB))
    assert table.guesses(0).shape == (0, 3)


def test_history_is_bounded_and_saved(tmp_path):
    pool = KeptState(history=10)
    pool.remember(np.arange(3, 9))
    pool.remember(np.array([20, 21, 22]))
    assert pool.history.tokens.tolist() == [4, 5, 6, 7, 8, -1, 20, 21, 22, -1]
    pool.save(tmp_path / "p.npz")
    loaded = KeptState.load(tmp_path / "p.npz")
    assert loaded.history.tokens.tolist() == pool.history.tokens.tolist() and loaded.history.capacity == 10
    nothing = KeptState(history=0)
    nothing.remember(np.arange(3, 9))
    assert nothing.history.tokens.shape == (0,)


def learnt_pool(path):
    """A pool that decoded twice on a tiny model (successors and budget counts learnt), saved."""
    model = tiny_model("llama", "sdpa")
    pool = KeptState()
    for prompt in ([3, 4, 5, 6, 3, 4, 5], [7, 8, 9, 7, 8]):
        lookahead.generate(model, torch.tensor([prompt]), lookahead_pool=pool, max_new_tokens=24)
    pool.save(path)
    return model, pool


def test_a_saved_pool_keeps_its_successors_and_budget_counts(tmp_path):
    """A server restarted from its pool file starts where it stopped: the recycled successors
    and what the draft budget learnt come back as they were, and decoding stays greedy."""
    model, pool = learnt_pool(tmp_path / "p.npz")
    loaded = KeptState.load(tmp_path / "p.npz")
    assert loaded.successors.shape == pool.successors.shape
    for got, saved in zip(loaded.successors.arrays(), pool.successors.arrays()):
        assert (got == saved).all()
    assert list(loaded.budgets) == list(pool.budgets) and pool.budgets
    for key, budget in pool.budgets.items():
        assert (loaded.budgets[key].fed == budget.fed).all() and (loaded.budgets[key].held == budget.held).all()
    ids = torch.tensor([[3, 4, 5, 6, 3]])
    expected = model.generate(ids, do_sample=False, max_new_tokens=24)
    assert lookahead.generate(model, ids, lookahead_pool=loaded, max_new_tokens=24).tolist() == expected.tolist()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"budget_keys": np.array(["__import__('os').getcwd()"])}, "budget key 0 is not a tuple of literals"),
        ({"budget_0_fed": np.array([-1.0, 2.0])}, "budget 0's counts"),
        ({"successor_shape": np.array([0, 3])}, "successor_shape"),
        ({"successor_table": np.full((VOCAB, 4), VOCAB, dtype=np.int32)}, "successor_table"),
    ],
    ids=["code-in-a-key", "negative-count", "bad-shape", "id-out-of-range"],
)
def test_a_crafted_learnt_part_is_refused_and_runs_nothing(tmp_path, change, message):
    learnt_pool(tmp_path / "a.npz")
    data = {**dict(np.load(tmp_path / "a.npz")), **change}
    np.savez(tmp_path / "b.npz", **data)
    with pytest.raises(ValueError, match=message):
        KeptState.load(tmp_path / "b.npz")


def test_a_kept_pool_copies_from_the_previous_request():
    """The second request repeats the first one's text: with the pool kept, its copy guesses
    come from the history (more tokens per forward), and the output stays greedy's."""
    model = tiny_model("llama", "sdpa")
    first = torch.tensor([[5, 9, 14, 7, 22, 31, 40, 11, 3, 17, 29, 8]])
    kwargs = dict(max_new_tokens=24, eos_token_id=None, pad_token_id=0)
    greedy_first = model.generate(first, do_sample=False, **kwargs)
    second = greedy_first[:, 4 : 12 + 6]  # starts inside the first text, so only history can copy on
    config = lookahead.LookaheadConfig(window=0, successors=0, prompt_ngrams=False, method="classic")
    pool = KeptState()
    lookahead.generate(model, first, lookahead_config=config, lookahead_pool=pool, **kwargs)
    assert len(pool.history) == greedy_first.shape[1] + 1
    cold, warm = lookahead.LookaheadStats(), lookahead.LookaheadStats()
    expected = model.generate(second, do_sample=False, **kwargs)
    got = lookahead.generate(model, second, lookahead_config=config, lookahead_stats=cold, **kwargs)
    assert got.tolist() == expected.tolist()
    got = lookahead.generate(
        model, second, lookahead_config=config, lookahead_pool=pool, lookahead_stats=warm, **kwargs
    )
    assert got.tolist() == expected.tolist()
    assert warm.source_tokens.get("copy", 0) > cold.source_tokens.get("copy", 0)
    assert warm.tokens_per_forward > cold.tokens_per_forward


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(ngram=1, guesses=2), ValueError, "ngram must be >= 2, got 1"),
        (dict(ngram=5, guesses=-1), ValueError, "guesses must be >= 0, got -1"),
        (dict(ngram="5", guesses=2), TypeError, "ngram must be an int, got str"),
        (dict(ngram=5, guesses=2, capacity=0), ValueError, "capacity must be >= 1, got 0"),
        (dict(ngram=5, guesses=2, context_tokens=3), ValueError, "context_tokens must be 1 or 2"),
    ],
)
def test_bad_pool_arguments_are_clear_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        NgramPool(**kwargs)


@settings(max_examples=100)
@given(
    tokens=st.lists(st.integers(0, 6), max_size=40),
    start=st.integers(0, 40),
    ngram=st.integers(2, 5),
    context_tokens=st.sampled_from([1, 2]),
)
def test_insert_text_files_what_insert_of_the_text_ngrams_files(tokens, start, ngram, context_tokens):
    """The fused kernel behind ``insert_text`` leaves the pool exactly as ``insert`` of the
    text's n-grams (and the tokens before them) does: same keys, order, stamps and clock."""
    from lookahead.drafts import kernels

    fused, plain = (NgramPool(ngram, 3, 16, context_tokens) for _ in range(2))
    text = np.array(tokens, dtype=np.int64)
    fused.insert_text(text[: start // 2])  # something already held, so eviction and order matter
    plain.insert_text(text[: start // 2])
    fused.insert_text(text, start)
    plain.insert(*kernels.text_ngrams(text, start, ngram))
    for name in ("_keys", "_stamps", "_counts", "_conts", "_clock"):
        assert np.array_equal(getattr(fused, name), getattr(plain, name)), name


@settings(max_examples=100)
@given(
    texts=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=30), max_size=40),
    capacity=st.integers(8, 300),
)
def test_history_indexes_find_every_kept_occurrence(texts, capacity):
    """After any run of remembered texts, the history's indexes (the bulk and the texts since)
    find every occurrence the history holds (texts evicted since the bulk was built may still
    be found), and hold at most twice the capacity."""
    from lookahead.drafts import history as history_module

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(history_module, "RECENT_TOKENS", 16)  # small texts reach the bulk's rebuild
        _remember_and_check(History(capacity), texts, capacity)


def _remember_and_check(history: History, texts, capacity: int) -> None:
    for text in texts:
        history.remember(np.array(text, dtype=np.int64))
        indexes = history.indexes()
        kept = history.tokens.tolist()
        for pattern in ([0], [1, 2], [3, 3, 0]):
            want = sum(kept[i : i + len(pattern)] == pattern for i in range(len(kept)))
            assert sum(index.count(pattern) for index in indexes) >= want
        assert len(indexes) <= 2 and sum(len(index) for index in indexes) <= 2 * capacity


def test_a_pool_file_of_lookahead_0_1_loads_and_a_newer_format_is_named(tmp_path):
    """Pool files written before the format mark (lookahead 0.1's ``NgramPool.save``: the same
    arrays, no ``format``) load whole; a file of a format this version does not know is refused
    with a message naming that format."""
    model, pool = learnt_pool(tmp_path / "new.npz")
    data = dict(np.load(tmp_path / "new.npz"))
    assert int(data.pop("format")) == 2
    np.savez(tmp_path / "old.npz", **data)
    old = KeptState.load(tmp_path / "old.npz")
    assert old.history.tokens.tolist() == pool.history.tokens.tolist() and list(old.budgets) == list(pool.budgets)
    assert old.pool.lookup(3).tolist() == pool.pool.lookup(3).tolist()
    np.savez(tmp_path / "future.npz", **data, format=np.array(3))
    with pytest.raises(ValueError, match="format 3, from a newer lookahead"):
        KeptState.load(tmp_path / "future.npz")
