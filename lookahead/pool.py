"""The n-gram pool: recent continuations of each token, to be verified as guesses."""

from __future__ import annotations

import numpy as np

from lookahead import kernels


def _power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 1).bit_length()


class NgramPool:
    """Fixed-size hash table from a key token to its ``guesses`` newest continuations.

    An n-gram ``(k, c1, ..., cM)`` (``M = ngram - 1``) files the continuation ``c1..cM``
    under key ``k``. Re-inserting a held continuation makes it the newest; a key holds at
    most ``guesses`` (the oldest goes), and the table at most ``capacity`` keys (a key
    whose probe neighbourhood is full evicts that neighbourhood's least recently used key).
    """

    def __init__(self, ngram: int, guesses: int, capacity: int = 1 << 14):
        if ngram < 2:
            raise ValueError(f"ngram must be >= 2, got {ngram}")
        self.ngram = ngram
        self.guesses = guesses
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

    def __len__(self) -> int:
        """Number of keys held."""
        return int(np.count_nonzero(self._keys >= 0))

    def insert(self, ngrams: np.ndarray) -> None:
        """File each row of ``ngrams`` (int64 ``[R, ngram]``), in order."""
        if ngrams.shape[0]:
            kernels.pool_insert(self._keys, self._stamps, self._counts, self._conts, self._clock,
                                np.ascontiguousarray(ngrams, dtype=np.int64))

    def insert_text(self, tokens: np.ndarray, start: int = 0) -> None:
        """File the n-grams of ``tokens`` (int64 ``[L]``) whose last token is at index >= start + ngram - 1."""
        self.insert(kernels.text_ngrams(tokens, start, self.ngram))

    def lookup(self, key: int) -> np.ndarray:
        """Continuations of ``key``, newest first: int64 ``[n, ngram - 1]``, n <= guesses.

        The returned array is a view into a reused buffer: valid until the next lookup.
        """
        n = kernels.pool_lookup(self._keys, self._stamps, self._counts, self._conts, self._clock,
                                np.int64(key), self._out)
        return self._out[:n]
