"""The draft vLLM verifies: one chain per request, the likeliest path of the copy tree.

``CopyDrafter.tree`` gives the copy/suffix draft as a scored tree, nodes best first (a node's
probability: the share of the matched occurrences that continue with its path; parents
before children, probabilities never increase along the output). vLLM verifies one chain,
so the proposer keeps the path that always takes the likeliest child.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Chain(NamedTuple):
    """A request's draft chain: ``tokens`` int64 ``[d]``, ``shares`` float ``[d]`` (node i's
    probability over its parent's: the chance its occurrences gave it once its parent held)
    and ``match``, the tokens of text the occurrences agreed with before the first node."""

    tokens: np.ndarray
    shares: np.ndarray
    match: int


EMPTY = Chain(np.zeros(0, dtype=np.int64), np.zeros(0), 0)


def best_chain(tokens: np.ndarray, parents: np.ndarray, probs: np.ndarray, match: int, limit: int) -> Chain:
    """The likeliest root-to-leaf path of a best-first tree (``tokens``, ``parents``, ``probs``,
    each ``[n]``; parent -1 is the root), at most ``limit`` nodes deep.

    Nodes come best first, so the first node whose parent is the path's last node is that
    node's likeliest child (ties keep the tree's order).
    """
    path: list[int] = []
    last = -1
    for i in range(tokens.shape[0]):
        if len(path) >= limit:
            break
        if parents[i] == last:
            path.append(i)
            last = i
    if not path:
        return EMPTY
    index = np.array(path, dtype=np.int64)
    probs_on_path = probs[index].astype(np.float64)
    above = np.concatenate([[1.0], probs_on_path[:-1]])
    return Chain(tokens[index].astype(np.int64), probs_on_path / above, int(match))
