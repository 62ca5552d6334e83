"""Numba kernels of the guess tree: merging guess rows into a trie, its step layout, and the
greedy walk down it. Pure functions over numpy arrays, compiled once with ``cache=True``;
``tree.py`` holds the arrays and calls these. Arrays are copied element by element, as in
``lookahead.drafts.kernels`` (why: its docstring).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def merge_trie(cands, n_cands):
    """Merge guesses (the first ``n_cands`` rows of ``cands``, int64 ``[r, m]``; a row ends at
    its first negative token) into one trie rooted at the last token. Node 0 is the root and
    node ``1 + d`` the d-th draft node, in order of creation; rows sharing a prefix share its
    nodes, so a node's children keep the order of the rows that made them.

    Returns ``(tokens, parents, depths, attend)`` for the T draft nodes: ``parents[d]`` the
    node index of its parent, ``depths[d]`` its distance from the root, and ``attend[d, e]``
    True where draft node e is d itself or one of its ancestors.
    """
    m = cands.shape[1]
    cap = n_cands * m
    tokens = np.empty(cap, dtype=np.int64)
    parents = np.empty(cap, dtype=np.int64)
    depths = np.empty(cap, dtype=np.int64)
    t = 0
    for c in range(n_cands):
        cur = 0
        for j in range(m):
            tok = cands[c, j]
            if tok < 0:
                break
            nxt = -1
            for d in range(t):
                if parents[d] == cur and tokens[d] == tok:
                    nxt = 1 + d
                    break
            if nxt < 0:
                tokens[t], parents[t] = tok, cur
                depths[t] = 1 if cur == 0 else depths[cur - 1] + 1
                t += 1
                nxt = t
            cur = nxt
    attend = np.zeros((t, t), dtype=np.bool_)
    for d in range(t):
        attend[d, d] = True
        p = parents[d]
        if p > 0:
            for e in range(d):
                attend[d, e] = attend[p - 1, e]
    return tokens[:t], parents[:t], depths[:t], attend


@njit(cache=True)
def step_layout(depths, attend):
    """Offsets from the root (int64 ``[1 + t]``) and attention (bool ``[1 + t, 1 + t]``) of a
    step ``[root | draft]``: each draft node at its depth, seeing the root and its own
    ancestry (``depths``, ``attend`` as :func:`merge_trie` returns them)."""
    t = depths.shape[0]
    offsets = np.empty(1 + t, dtype=np.int64)
    offsets[0] = 0
    allowed = np.zeros((1 + t, 1 + t), dtype=np.bool_)
    allowed[0, 0] = True
    for d in range(t):
        offsets[1 + d] = depths[d]
        allowed[1 + d, 0] = True
        for e in range(t):
            allowed[1 + d, 1 + e] = attend[d, e]
    return offsets, allowed


@njit(cache=True)
def greedy_path(tokens, parents, preds, out):
    """The walk down a guess trie (see :func:`merge_trie`) when the pick at every node is
    ``preds[node]``: the nodes it visits, root first, written to ``out`` (room for every draft
    node and the root); returns how many. A node's child carrying the pick is the first draft
    node with that parent and token, as ``GuessTree.children`` orders them."""
    node, n = 0, 0
    while True:
        out[n] = node
        n += 1
        pick = preds[node]
        child = -1
        for d in range(tokens.shape[0]):
            if parents[d] == node and tokens[d] == pick:
                child = 1 + d
                break
        if child < 0:
            return n
        node = child


@njit(cache=True)
def branches(parents, tokens, node, scores, most, depth, picks):
    """The branches below ``node`` of a guess trie (see :func:`merge_trie`), as node indices
    (int64 ``[r, w]``, w <= ``depth`` the longest, -1 padded; ``[0, 0]`` for a leaf), or,
    where ``picks`` (int64 ``[1 + T]``, by node; empty: none) is given, as its entries. Where
    ``scores`` (float ``[V]``, the step's at ``node``; empty: none) ranks ``node``'s children
    (the likeliest token first, the tree's order among equals) and it has several, up to
    ``most`` branches start at its first children, each the deepest below its child; else
    one branch, the deepest below ``node``. The deepest below a node follows, at each node,
    the child with the highest subtree, the first child on a tie."""
    t = parents.shape[0]
    height = np.zeros(t + 1, dtype=np.int64)
    below = np.full(t + 1, -1, dtype=np.int64)  # each node's child on its deepest branch
    for child in range(t, 0, -1):  # children come after their parents
        parent, h = parents[child - 1], height[child] + 1
        if h > height[parent] or (h == height[parent] and child < below[parent]):
            height[parent], below[parent] = h, child
    kids = np.empty(t, dtype=np.int64)
    n = 0
    for child in range(1, t + 1):
        if parents[child - 1] == node:
            kids[n] = child
            n += 1
    if n == 0:
        return np.full((0, 0), -1, dtype=np.int64)
    if scores.shape[0] == 0 or n == 1:
        kids[0], n = below[node], 1
    else:
        for i in range(1, n):  # insertion sort, stable: by the token's score, highest first
            kid, at = kids[i], i
            while at > 0 and scores[tokens[kids[at - 1] - 1]] < scores[tokens[kid - 1]]:
                kids[at] = kids[at - 1]
                at -= 1
            kids[at] = kid
        n = min(n, most)
    width = 0
    for i in range(n):
        width = max(width, min(height[kids[i]] + 1, depth))
    out = np.full((n, width), -1, dtype=np.int64)
    for i in range(n):
        v = kids[i]
        for j in range(width):
            if v < 0:
                break
            out[i, j] = picks[v] if picks.shape[0] else v
            v = below[v]
    return out
