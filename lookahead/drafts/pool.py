"""The n-gram pool: recent continuations of each token, to be verified as guesses."""

from __future__ import annotations

import numpy as np

from lookahead import files
from lookahead.drafts import kernels
from lookahead.drafts.learnt import learnt_arrays, read_learnt
from lookahead.drafts.suffix import SuffixIndex

RECENT_TOKENS = 4096  # the recent texts' index may grow this far before the bulk is rebuilt


def _power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 1).bit_length()


class NgramPool:
    """Fixed-size hash table from a context to its ``guesses`` newest continuations.

    An n-gram ``(k, c1, ..., cM)`` (``M = ngram - 1``) files the continuation ``c1..cM``
    under key ``k`` and, with ``context_tokens=2``, also under the pair ``(b, k)`` of ``k``
    and the token ``b`` before it. A lookup takes the pair's continuations first, then the
    single token's. Re-inserting a held continuation makes it the newest; a key holds at
    most ``guesses`` (the oldest goes), and the table at most ``capacity`` keys (a key
    whose probe neighbourhood is full evicts that neighbourhood's least recently used key).
    """

    def __init__(
        self, ngram: int, guesses: int, capacity: int = 1 << 14, context_tokens: int = 1, history: int = 1 << 16
    ):
        for name, value, low in (("ngram", ngram, 2), ("guesses", guesses, 0), ("capacity", capacity, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        if context_tokens not in (1, 2):
            raise ValueError(f"context_tokens must be 1 or 2, got {context_tokens}")
        self.ngram = ngram
        self.guesses = guesses
        self.context_tokens = context_tokens
        capacity = _power_of_two(capacity)
        self._keys = np.full(capacity, -1, dtype=np.int64)
        self._stamps = np.zeros(capacity, dtype=np.int64)
        self._counts = np.zeros(capacity, dtype=np.int32)
        self._conts = np.zeros((capacity, guesses, ngram - 1), dtype=np.int32)
        self._clock = np.zeros(1, dtype=np.int64)
        self._out = np.zeros((guesses, ngram - 1), dtype=np.int64)
        if isinstance(history, bool) or not isinstance(history, int) or history < 0:
            raise ValueError(f"history must be an int >= 0 (tokens kept), got {history!r}")
        self.history_capacity = history
        self._history = np.zeros(0, dtype=np.int64)
        # the history's suffix indexes: the settled bulk, and the texts remembered since (so a
        # request rebuilds only the small one; the bulk is rebuilt when the recent part has
        # grown past an eighth of it, or a quarter of the capacity was evicted meanwhile)
        self._settled: SuffixIndex | None = None
        self._settled_end = 0  # where the settled part ends in the history (after eviction)
        self._evicted = 0  # tokens evicted since the bulk was built
        self._recent: SuffixIndex | None = None
        # kept with the pool for later requests (and in its file, ``drafts.learnt``): the
        # recycled successors (``drafts.successors.SuccessorTable``) and what the draft budget
        # learnt, by rule and bins (``drafts.budget.DraftBudget.carry``)
        self.successors = None
        self.budgets: dict = {}
        # the fingerprint of the tokenizer its ids come from ("" while unknown): read from a
        # loaded file, else taken from the first lookahead.generate(..., tokenizer=) that uses it
        self.vocabulary = ""

    @property
    def history(self) -> np.ndarray:
        """int64 ``[<= history]``: the newest texts :meth:`remember` was given, each followed
        by -1; the copy guess of a later request also copies from them."""
        return self._history

    @property
    def history_indexes(self) -> tuple[SuffixIndex, ...]:
        """Suffix indexes over :attr:`history` (none while it is empty), built when first
        needed after a text was remembered: the copy guess drafts from them in ``O(log N)``.
        Two of them, the settled bulk and the texts since, so that remembering a text costs a
        small rebuild; texts evicted from the history leave the bulk when it is next rebuilt."""
        if self._settled is None and self._history.shape[0]:
            self._settled = SuffixIndex(self._history)
            self._settled_end, self._evicted, self._recent = self._history.shape[0], 0, None
        if self._recent is None and self._history.shape[0] > self._settled_end:
            self._recent = SuffixIndex(self._history[self._settled_end :])
        return tuple(index for index in (self._settled, self._recent) if index is not None)

    def remember(self, tokens: np.ndarray) -> None:
        """Keep a finished text (prompt and output) for later requests' copy guesses; the
        oldest tokens go once ``history`` tokens are held."""
        if not self.history_capacity:
            return
        text = np.append(np.asarray(tokens, dtype=np.int64), -1)
        joined = np.concatenate([self._history, text])
        evicted = max(joined.shape[0] - self.history_capacity, 0)
        self._history = joined[evicted:]
        self._settled_end -= evicted
        self._evicted += evicted
        self._recent = None
        recent = self._history.shape[0] - self._settled_end
        if self._settled is not None and (
            self._settled_end < 0
            or self._evicted > self.history_capacity // 4
            or recent > max(len(self._settled) // 8, RECENT_TOKENS)
        ):
            self._settled = None

    @property
    def capacity(self) -> int:
        return self._keys.shape[0]

    def __len__(self) -> int:
        """Number of keys held."""
        return int(np.count_nonzero(self._keys >= 0))

    def insert(self, ngrams: np.ndarray, before: np.ndarray | None = None) -> None:
        """File each row of ``ngrams`` (int64 ``[R, ngram]``), in order.

        ``before`` (int64 ``[R]``, -1 = unknown) is the token preceding each n-gram, used
        for two-token context keys.
        """
        if not ngrams.shape[0] or not self.guesses:
            return
        pairs = self.context_tokens == 2 and before is not None
        kernels.pool_insert_ngrams(
            self._keys,
            self._stamps,
            self._counts,
            self._conts,
            self._clock,
            np.ascontiguousarray(ngrams, dtype=np.int64),
            np.asarray(before, dtype=np.int64) if pairs else np.full(ngrams.shape[0], -1, dtype=np.int64),
            pairs,
        )

    def insert_text(self, tokens: np.ndarray, start: int = 0) -> None:
        """File the n-grams of ``tokens`` (int64 ``[L]``) that start at index >= start, as
        :meth:`insert` would (in one kernel: this runs every step)."""
        kernels.pool_insert_text(
            self._keys,
            self._stamps,
            self._counts,
            self._conts,
            self._clock,
            np.ascontiguousarray(tokens, dtype=np.int64),
            int(start),
            self.ngram,
            self.context_tokens == 2,
        )

    def lookup(self, key: int, before: int = -1) -> np.ndarray:
        """Continuations after ``key`` (preceded by ``before``, -1 = unknown): int64
        ``[n, ngram - 1]``, n <= guesses, the context pair's newest first, then the key's.

        The returned array is a view into a reused buffer: valid until the next lookup.
        """
        return self.lookup_split(key, before)[0]

    def lookup_split(self, key: int, before: int = -1) -> tuple[np.ndarray, int]:
        """:meth:`lookup`'s rows and how many of the first came from the context pair."""
        paired = 0
        args = (self._keys, self._stamps, self._counts, self._conts, self._clock)
        if self.context_tokens == 2 and before >= 0:
            paired = kernels.pool_lookup(*args, kernels.pair_key(np.int64(before), np.int64(key)), self._out, 0)
        n = kernels.pool_lookup(*args, np.int64(key), self._out, paired)
        return self._out[:n], paired

    def save(self, path, tokenizer=None) -> None:
        """Write the pool to ``path`` as a numpy ``.npz`` archive (plain arrays, no pickle):
        its n-grams, history, successors and the budget's counts, marked with ``tokenizer``'s
        fingerprint where given, so that a load with another tokenizer is refused."""
        np.savez(
            path,
            keys=self._keys,
            stamps=self._stamps,
            counts=self._counts,
            conts=self._conts,
            clock=self._clock,
            shape=np.array([self.ngram, self.guesses, self.context_tokens]),
            history=self._history,
            history_capacity=np.array(self.history_capacity),
            **learnt_arrays(self.successors, self.budgets),
            **files.marks("pool", tokenizer, self.vocabulary),
        )

    @classmethod
    def load(cls, path, tokenizer=None) -> NgramPool:
        """Read a pool written by :meth:`save` (arrays only, never a pickle). A file is input:
        anything but such a pool (made for ``tokenizer``, where both name one) raises
        ``ValueError`` naming what it is not."""
        data = files.read(path, "pool", ("keys", "stamps", "counts", "conts", "clock", "shape"), tokenizer)
        ngram, guesses, context_tokens = files.read_ints(
            path, "shape", data["shape"], 3, None, "ngram, guesses, context tokens"
        )
        pool = cls(ngram, guesses, data["keys"].shape[0], context_tokens)
        for name in ("keys", "stamps", "counts", "conts", "clock"):
            files.check_like(path, name, data[name], getattr(pool, f"_{name}"))
            getattr(pool, f"_{name}")[...] = data[name]
        if "history" in data:  # files written before the history was kept have none
            pool.history_capacity = files.read_ints(path, "history_capacity", data.get("history_capacity"), None, 0)
            history = np.asarray(data["history"], dtype=np.int64)
            pool._history = history[max(history.shape[0] - pool.history_capacity, 0) :]
        pool._check_values(path)
        pool.successors, pool.budgets = read_learnt(path, data)
        pool.vocabulary = files.stored_fingerprint(data)
        return pool

    def _check_values(self, path) -> None:
        """A file is input: values the kernels index with must lie in their bounds (a crafted
        ``counts`` would make them write past the continuation table)."""
        files.check_bounds(path, "counts", self._counts, 0, self.guesses)
        files.check_bounds(path, "clock", self._clock, 0)
        files.check_bounds(path, "stamps", self._stamps, 0, int(self._clock[0]))
        files.check_bounds(path, "conts", self._conts, 0)
        files.check_bounds(path, "history", self._history, -1)

    def check_vocabulary(self, vocab_size: int) -> None:
        """Raise ``ValueError`` when a continuation or history token is not an id of a model
        with ``vocab_size`` ids (a pool filled, or a file written, for another vocabulary)."""
        table = self.successors.arrays()[0] if self.successors is not None else np.zeros(0, dtype=np.int32)
        for name, array in (("continuations", self._conts), ("history", self._history), ("successors", table)):
            if array.size and int(array.max()) >= vocab_size:
                raise ValueError(
                    f"lookahead_pool holds {name} token id {int(array.max())}, but the model has "
                    f"{vocab_size} ids: a pool made for another vocabulary"
                )


class PoolSource:
    """The pool as a guess source: the continuations of the text's last two tokens (where the
    pool keys pairs), then of its last token, each learning in its own bin; it files the
    n-grams that end in each step's new tokens (``prompt_ngrams``)."""

    name = "pool"
    scored = False
    # a little above what such rows held alone, so a fresh request still tries them
    # (docs/benchmarks.md, "The constants and what set them")
    bins = (("pool", 0.6, 0.9), ("pool", 0.3, 0.6))

    def __init__(self, pool: NgramPool, stats, file_text: bool):
        self.pool, self.stats, self.file_text = pool, stats, file_text

    def propose(self, context) -> list[np.ndarray]:
        text = context.text
        rows, paired = self.pool.lookup_split(int(text[-1]), int(text[-2]))
        self.stats.pool_lookups += 1
        self.stats.pool_hits += int(rows.shape[0] > 0)
        return [rows[:paired], rows[paired:]]

    def learn(self, outcome) -> None:
        if self.file_text:
            file_new(self.pool, outcome.text, outcome.accepted)


def file_new(pool: NgramPool, text: np.ndarray, accepted: int) -> None:
    """File the n-grams of ``text`` (int64 ``[n]``) that end in its ``accepted`` newest tokens."""
    pool.insert_text(text, text.shape[0] - accepted - pool.ngram + 1)
