"""The guess tree of one step: the window's level 0 plus pool guesses merged into a trie."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lookahead.verify import kernels

_NO_CANDS = np.zeros((0, 1), dtype=np.int64)


def root_layout() -> tuple[np.ndarray, np.ndarray]:
    """Offsets from the root (int64 ``[1]``) and attention (bool ``[1, 1]``) of a step's head
    that is the root alone (the classic shape's head adds the window: ``step/classic.py``)."""
    return np.zeros(1, dtype=np.int64), np.ones((1, 1), dtype=np.bool_)


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
        ``[head | draft]``, ``head`` the layout of the root and what precedes the draft
        (:func:`root_layout`; see ``lookahead.step.mask``)."""
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
