"""Candidates the verify pass already paid for: every token's most likely successors.

Each step computes logits at every node it fed. Their top-k are the model's own guesses of
what follows that node's token, which is what the Jacobi window buys with extra tokens. The
table keeps, per vocabulary entry, the top-k and their logits from the last time that token
was fed (as in Token Recycling); a lookup grows guesses from the last accepted token by
following successors: the first ones under greedy decoding, and under seeded sampling the one
that wins each future position's race with its known noise (``sampling.noise``), the token the
seeded sample there is if the model's distribution is what it was. Memory is fixed:
``vocab x k`` int32 and float32.
"""

from __future__ import annotations

import numpy as np

from lookahead.drafts import kernels
from lookahead.drafts.source import Bin

_NO_NOISE = np.zeros((0, 1), dtype=np.float32)


class SuccessorTable:
    """``vocab x k`` table of recycled predictions.

    Args:
        vocab: vocabulary size (token ids outside ``[0, vocab)`` are ignored).
        k: successors kept per token, and rows a lookup proposes.
        length: tokens per proposed row.
    """

    def __init__(self, vocab: int, k: int, length: int):
        self.k = k
        self.length = length
        self._table = np.full((vocab, k), -1, dtype=np.int32)
        self._scores = np.zeros((vocab, k), dtype=np.float32)
        self._out = np.full((k, length), -1, dtype=np.int64)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(vocab, k, length)``."""
        return self._table.shape[0], self.k, self.length

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(table, scores)``: int32 and float32 ``[vocab, k]``, the table's own arrays (a pool
        file saves them; read them, do not write them)."""
        return self._table, self._scores

    def restore(self, table: np.ndarray, scores: np.ndarray) -> None:
        """Take the successors a pool file held: ``table`` and ``scores`` shaped as
        :meth:`arrays` gives them (their values are the caller's to check)."""
        if table.shape != self._table.shape or scores.shape != self._scores.shape:
            raise ValueError(f"successors of shape {self._table.shape}, got {table.shape} and {scores.shape}")
        self._table[...], self._scores[...] = table, scores

    def record(self, fed: np.ndarray, top: np.ndarray, scores: np.ndarray) -> None:
        """Keep ``top`` (int64 ``[q, >= k]``, best first) and their logits ``scores`` (float32,
        alike) as the successors of ``fed`` ``[q]``."""
        kernels.successors_update(self._table, self._scores, fed, top, scores)

    def guesses(self, root: int, noise: np.ndarray | None = None, temperature: float = 1.0) -> np.ndarray:
        """int64 ``[r, length]`` rows following ``root`` (-1 pads); a view, valid until the
        next call. Under seeded sampling ``noise`` (float32 ``[m, V]``) is the known noise of
        the next m tokens and ``temperature`` the one the race divides the logits by: row 0
        then follows the stored successors that win those races (see
        ``kernels.successor_rows``)."""
        noise = _NO_NOISE if noise is None else noise
        n = kernels.successor_rows(
            self._table, self._scores, root, self.k, self.length, noise, 1.0 / temperature, self._out
        )
        return self._out[:n]


class SuccessorSource:
    """The successor table as a guess source: its first row (the likeliest chain, or under
    seeded sampling the stored successors that win each position's race with its known noise)
    and the other rows learn in two bins. The table learns every fed token's top-k, which the
    step fetches with its logits (``top_k``)."""

    name = "successors"
    scored = False
    # alone, the first row held 0.49 (greedy) / 0.45 (sampled) and the others 0.04 / 0.57
    # (docs/benchmarks.md, "The constants and what set them")
    bins = (Bin("successors", 0.5, 0.6), Bin("successors", 0.1, 0.5))
    reads_noise = True  # under seeded sampling its first row races the known noise

    def __init__(self, table: SuccessorTable):
        self.table = table
        self.top_k = table.k

    def propose(self, context) -> list[np.ndarray]:
        rows = self.table.guesses(int(context.text[-1]), context.noise, context.temperature)
        return [rows[:1], rows[1:]]

    def learn(self, outcome) -> None:
        if outcome.top is not None:
            self.table.record(outcome.fed, outcome.top, outcome.scores)
