"""Numba kernels of the guess tree: merging guess rows into a trie, its step layout, and the
greedy walk down it. Pure functions over numpy arrays, compiled once with ``cache=True``;
``tree.py`` holds the arrays and calls these. Arrays are copied element by element, as in
``lookahead.drafts.kernels`` (why: its docstring).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def merge_trie(chain, cands, n_cands, base):
    """Merge guesses into one trie rooted at the last token.

    Global indices: 0 is the root (last accepted token), ``1 + i`` is the chain's i-th token
    (the window's level 0, a path from the root), ``base + d`` the d-th new (draft) node.
    Guesses sharing a prefix with the chain or with each other share its nodes. A guess
    ends at its first negative token (rows of ``cands`` may differ in length).

    Returns ``(tokens, parents, depths, anchors, attend)`` for the T draft nodes:
    ``parents[d]`` global index of its parent, ``depths[d]`` distance from the root,
    ``anchors[d]`` the nearest ancestor outside the draft (root or a chain node), and
    ``attend[d, e]`` True where draft node e is d itself or one of its ancestors.
    """
    width = chain.shape[0]
    m = cands.shape[1]
    cap = n_cands * m
    tokens = np.empty(cap, dtype=np.int64)
    parents = np.empty(cap, dtype=np.int64)
    depths = np.empty(cap, dtype=np.int64)
    anchors = np.empty(cap, dtype=np.int64)
    t = 0
    for c in range(n_cands):
        cur = 0
        for j in range(m):
            tok = cands[c, j]
            if tok < 0:
                break
            nxt = -1
            if cur < base:
                i = cur
                if i < width and chain[i] == tok:
                    nxt = i + 1
            if nxt < 0:
                for d in range(t):
                    if parents[d] == cur and tokens[d] == tok:
                        nxt = base + d
                        break
            if nxt < 0:
                tokens[t] = tok
                parents[t] = cur
                if cur < base:
                    depths[t] = cur + 1
                    anchors[t] = cur
                else:
                    depths[t] = depths[cur - base] + 1
                    anchors[t] = anchors[cur - base]
                nxt = base + t
                t += 1
            cur = nxt
    attend = np.zeros((t, t), dtype=np.bool_)
    for d in range(t):
        attend[d, d] = True
        p = parents[d]
        if p >= base:
            for e in range(d):
                attend[d, e] = attend[p - base, e]
    return tokens[:t], parents[:t], depths[:t], anchors[:t], attend


@njit(cache=True)
def step_layout(head_offsets, head_allowed, depths, anchors, attend):
    """Offsets from the root (int64 ``[n + t]``) and attention (bool ``[n + t, n + t]``) of
    a step ``[head | draft]``: the head's own layout (root + window, ``n`` tokens), then the
    ``t`` draft nodes, each at its depth, seeing its anchor's view of the head and its own
    ancestry (``anchors``, ``attend`` as :func:`merge_trie` returns them)."""
    n, t = head_offsets.shape[0], depths.shape[0]
    offsets = np.empty(n + t, dtype=np.int64)
    for i in range(n):
        offsets[i] = head_offsets[i]
    for d in range(t):
        offsets[n + d] = depths[d]
    allowed = np.zeros((n + t, n + t), dtype=np.bool_)
    for i in range(n):
        for j in range(n):
            allowed[i, j] = head_allowed[i, j]
    for d in range(t):
        for j in range(n):
            allowed[n + d, j] = head_allowed[anchors[d], j]
        for e in range(t):
            allowed[n + d, n + e] = attend[d, e]
    return offsets, allowed


@njit(cache=True)
def greedy_path(chain, base, tokens, parents, preds, out):
    """The walk down a guess trie (see :func:`merge_trie`) when the pick at every node is
    ``preds[node]``: the nodes it visits, root first, written to ``out`` (room for the chain
    and every draft node, plus the root); returns how many. A node's child carrying the pick
    is the chain's next node, else the first draft node with that parent and token, as
    ``GuessTree.children`` orders them."""
    width = chain.shape[0]
    node, n = 0, 0
    while True:
        out[n] = node
        n += 1
        pick = preds[node]
        child = -1
        if node < width and chain[node] == pick:
            child = node + 1
        else:
            for d in range(tokens.shape[0]):
                if parents[d] == node and tokens[d] == pick:
                    child = base + d
                    break
        if child < 0:
            return n
        node = child
