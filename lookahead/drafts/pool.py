"""The n-gram pool: recent continuations of each token, to be verified as guesses."""

from __future__ import annotations

import numpy as np

from lookahead import files
from lookahead.drafts import kernels
from lookahead.drafts.source import Bin

POOL_ARRAYS = ("keys", "stamps", "counts", "conts", "clock", "shape")  # what a pool file holds of the n-grams


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
    What else is kept across requests (earlier texts, successors, the budget's counts) is a
    ``drafts.kept.KeptState``'s, which holds one of these.
    """

    def __init__(self, ngram: int, guesses: int, capacity: int = 1 << 14, context_tokens: int = 1):
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

    @property
    def capacity(self) -> int:
        return self._keys.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes of its table: fixed by its shape and capacity."""
        return sum(a.nbytes for a in (self._keys, self._stamps, self._counts, self._conts, self._clock))

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

    def arrays(self) -> dict[str, np.ndarray]:
        """Its arrays as a pool file holds them (``KeptState.save`` writes them with the rest)."""
        return dict(
            keys=self._keys,
            stamps=self._stamps,
            counts=self._counts,
            conts=self._conts,
            clock=self._clock,
            shape=np.array([self.ngram, self.guesses, self.context_tokens]),
        )

    @classmethod
    def from_arrays(cls, path, data: dict) -> NgramPool:
        """The pool a file's arrays hold (read by ``files.read``); ``ValueError`` naming the
        array for anything out of shape or bounds: a file is input, and the kernels index with
        its values (a crafted ``counts`` would make them write past the continuation table)."""
        ngram, guesses, context_tokens = files.read_ints(
            path, "shape", data["shape"], 3, None, "ngram, guesses, context tokens"
        )
        pool = cls(ngram, guesses, data["keys"].shape[0], context_tokens)
        for name in POOL_ARRAYS[:-1]:
            files.check_like(path, name, data[name], getattr(pool, f"_{name}"))
            getattr(pool, f"_{name}")[...] = data[name]
        files.check_bounds(path, "counts", pool._counts, 0, pool.guesses)
        files.check_bounds(path, "clock", pool._clock, 0)
        files.check_bounds(path, "stamps", pool._stamps, 0, int(pool._clock[0]))
        files.check_bounds(path, "conts", pool._conts, 0)
        return pool

    def save(self, path, tokenizer=None) -> None:
        """Write its n-grams to ``path`` as a pool file (a ``KeptState`` holding this pool
        alone: ``KeptState.load`` and :meth:`load` both read it)."""
        np.savez(path, **self.arrays(), **files.marks("pool", tokenizer))

    @classmethod
    def load(cls, path, tokenizer=None) -> NgramPool:
        """The n-grams of a pool file (``KeptState.save``'s or :meth:`save`'s; arrays only, never
        a pickle); ``ValueError`` naming what it is not for anything else."""
        return cls.from_arrays(path, files.read(path, "pool", POOL_ARRAYS, tokenizer))

    def check_vocabulary(self, vocab_size: int) -> None:
        """Raise ``ValueError`` when a continuation is not an id of a model with ``vocab_size``
        ids (a pool filled, or a file written, for another vocabulary)."""
        if self._conts.size and int(self._conts.max()) >= vocab_size:
            raise ValueError(
                f"lookahead_pool holds continuations token id {int(self._conts.max())}, but the model has "
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
    bins = (Bin("pool", 0.6, 0.9), Bin("pool", 0.3, 0.6))
    top_k = 0
    reads_noise = False

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
