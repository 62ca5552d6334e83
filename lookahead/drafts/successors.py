"""Candidates the verify pass already paid for: every token's most likely successors.

Each step computes logits at every node it fed. Their top-k are the model's own guesses of
what follows that node's token, which is what the Jacobi window buys with extra tokens. The
table keeps, per vocabulary entry, the top-k from the last time that token was fed (as in
Token Recycling); a lookup grows guesses from the last accepted token by following first
successors. Memory is fixed: ``vocab x k`` int32.
"""

from __future__ import annotations

import numpy as np
import torch

from lookahead.drafts import kernels


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
        self._out = np.full((k, length), -1, dtype=np.int64)

    def update(self, fed: torch.Tensor, logits: torch.Tensor) -> None:
        """Recycle one forward: ``fed`` long ``[q]`` tokens, ``logits`` ``[q, V]`` after them."""
        top = logits.topk(self.k, dim=-1).indices
        self.record(fed.cpu().numpy(), top.cpu().numpy())

    def record(self, fed: np.ndarray, top: np.ndarray) -> None:
        """Keep ``top`` (int64 ``[q, >= k]``, best first) as the successors of ``fed`` ``[q]``."""
        kernels.successors_update(self._table, fed, top)

    def guesses(self, root: int) -> np.ndarray:
        """int64 ``[r, length]`` rows following ``root`` (-1 pads); a view, valid until the
        next call."""
        n = kernels.successor_rows(self._table, root, self.k, self.length, self._out)
        return self._out[:n]
