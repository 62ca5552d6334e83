"""The guess tree of one step: every source's guess rows merged into one trie."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lookahead.verify import kernels

_NO_ROWS = np.zeros((0, 1), dtype=np.int64)


@dataclass
class GuessTree:
    """Every path from the root is a guessed continuation of the accepted text.

    Node indices are the step's input indices ``[root | draft]``: 0 is the root (the last
    accepted token) and ``1 + d`` the d-th draft node (the arrays below are indexed by d)::

        rows   a b c        tree   root -> a(1) -> b(2) -> c(3)
               a d                           \\-> d(4)
               e                     root -> e(5)

    Attributes:
        tokens, parents, depths: int64 ``[T]``, see ``kernels.merge_trie`` (a parent is a
            node index: 0 for the root).
        attend: bool ``[T, T]``, draft-to-draft ancestry (self included).
    """

    tokens: np.ndarray
    parents: np.ndarray
    depths: np.ndarray
    attend: np.ndarray

    @classmethod
    def build(cls, rows: np.ndarray | None) -> GuessTree:
        """The trie of ``rows`` (int64 ``[r, m]``, -1 ends a shorter row; None or empty: the
        root alone)."""
        if rows is None or rows.shape[0] == 0:
            rows = _NO_ROWS
        return cls(*kernels.merge_trie(rows, rows.shape[0]))

    def layout(self) -> tuple[np.ndarray, np.ndarray]:
        """Offsets from the root (int64 ``[1 + T]``) and attention (bool ``[1 + T, 1 + T]``) of
        the step ``[root | draft]`` (drawn in ``lookahead.step.mask``)."""
        return kernels.step_layout(self.depths, self.attend)

    @property
    def size(self) -> int:
        """Draft nodes T (the root is not counted)."""
        return int(self.tokens.shape[0])

    def children(self) -> dict[tuple[int, int], int]:
        """``(parent node, token) -> child node`` over the draft nodes."""
        return {(p, tok): 1 + d for d, (p, tok) in enumerate(zip(self.parents.tolist(), self.tokens.tolist()))}

    def greedy_path(self, preds: np.ndarray) -> list[int]:
        """The nodes the walk visits, root first, when the pick at every node is ``preds[node]``
        (int64 ``[1 + T]``: the fetched argmaxes)."""
        out = np.empty(1 + self.size, dtype=np.int64)
        n = kernels.greedy_path(self.tokens, self.parents, preds, out)
        return out[:n].tolist()

    def branches(self, node: int, depth: int, scores=None, most: int = 1, picks=None) -> np.ndarray:
        """The branches below ``node``, as node indices (int64 ``[r, <= depth]``, -1 padded;
        ``[0, 0]`` for a leaf), or as ``picks``' entries (int64 ``[1 + T]``, by node): with
        ``scores`` (float32 ``[V]``, the step's at ``node``) up to ``most``, each the deepest
        below one of ``node``'s likeliest children; else one, the deepest below ``node``
        (``kernels.branches``)."""
        scores = _NO_SCORES if scores is None else scores
        picks = _NONE if picks is None else picks
        return kernels.branches(self.parents, self.tokens, node, scores, most, depth, picks)


_NONE = np.zeros(0, dtype=np.int64)
_NO_SCORES = np.zeros(0, dtype=np.float32)
ROOT_ONLY = GuessTree(
    _NONE, _NONE, _NONE, np.zeros((0, 0), dtype=np.bool_)
)  # a plain step's tree (no kernel at import)
