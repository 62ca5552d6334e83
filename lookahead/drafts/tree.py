"""The guess tree of one step: the window's level 0 plus pool guesses merged into a trie."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lookahead.drafts import kernels

_NO_CANDS = np.zeros((0, 1), dtype=np.int64)


def window_layout(levels: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets from the root (int64 ``[n]``) and attention (bool ``[n, n]``) of the step's
    head, root + window (``n = 1 + levels * width``; drawn in ``lookahead.step.mask``)."""
    n = 1 + levels * width
    offsets = np.zeros(n, dtype=np.int64)
    allowed = np.zeros((n, n), dtype=np.bool_)
    allowed[:, 0] = True
    for level in range(levels):
        for col in range(width):
            row = 1 + level * width + col
            offsets[row] = 1 + col + level
            allowed[row, 1 : 2 + col] = True
            for above in range(1, level + 1):
                allowed[row, 1 + above * width + col] = True
    return offsets, allowed


@dataclass
class GuessTree:
    """Every path from the root is a guessed continuation of the accepted text.

    Node indices are the step's input indices: 0 is the root (the last accepted token),
    ``1..len(chain)`` the window's level 0 (a chain from the root), and ``base + d`` the d-th
    draft node built from pool guesses (arrays below are indexed by d).

    Attributes:
        chain: int64 ``[W]`` level-0 tokens (W may be 0).
        base: input index of the first draft node (1 + window size).
        tokens, parents, depths, anchors: int64 ``[T]``, see ``kernels.merge_trie``.
        attend: bool ``[T, T]``, draft-to-draft ancestry (self included).
    """

    chain: np.ndarray
    base: int
    tokens: np.ndarray
    parents: np.ndarray
    depths: np.ndarray
    anchors: np.ndarray
    attend: np.ndarray

    @classmethod
    def build(cls, chain: np.ndarray, base: int, cands: np.ndarray | None) -> GuessTree:
        if cands is None or cands.shape[0] == 0:
            cands = _NO_CANDS
        parts = kernels.merge_trie(chain, cands, cands.shape[0], base)
        return cls(chain, base, *parts)

    def layout(self, head: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Offsets from the root (int64 ``[q]``) and attention (bool ``[q, q]``) of the step
        ``[head | draft]``, ``head`` being :func:`window_layout`'s (see ``lookahead.step.mask``)."""
        return kernels.step_layout(head[0], head[1], self.depths, self.anchors, self.attend)

    @property
    def size(self) -> int:
        """Draft nodes T (the chain is counted in the window, not here)."""
        return int(self.tokens.shape[0])

    def children(self) -> dict[tuple[int, int], int]:
        """``(parent input index, token) -> child input index`` over chain and draft nodes."""
        kids = {(i, int(tok)): i + 1 for i, tok in enumerate(self.chain.tolist())}
        for d, (p, tok) in enumerate(zip(self.parents.tolist(), self.tokens.tolist())):
            kids.setdefault((p, tok), self.base + d)
        return kids
