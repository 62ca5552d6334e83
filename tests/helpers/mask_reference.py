"""The step mask from first principles (positions and ancestry), shared by the mask tests."""

from __future__ import annotations

import numpy as np


def reference_mask(levels, width, tree, window, past_len, kv_offset, past_visible):
    """Boolean ``[q, past_len - kv_offset + q]`` straight from the definitions.

    A step token may attend a committed position (kept, not padding) or a step token that
    precedes it in its own sequence: the root and its ancestors for trie nodes (the chain is
    window level 0), and for a window cell of level l at column i the root, level 0 up to
    column i and the cells above it in column i. A sliding layer also drops every key at
    ``window`` or more positions before the query.
    """
    base = 1 + levels * width

    def parent(node):
        if node <= width:
            return node - 1  # chain node i + 1 follows chain node i (0 is the root)
        return int(tree.parents[node - base])

    def is_trie(node):
        return node <= width or node >= base

    def depth(node):
        return 0 if node == 0 else depth(parent(node)) + 1

    def visible(node):
        if is_trie(node):
            seen = {node}
            while node:
                node = parent(node)
                seen.add(node)
            return seen
        level, col = divmod(node - 1, width)
        return {0} | {1 + c for c in range(col + 1)} | {1 + a * width + col for a in range(1, level + 1)}

    nodes = list(range(1 + levels * width)) + [base + d for d in range(tree.size)]
    pos = {n: (depth(n) if is_trie(n) else 1 + sum(divmod(n - 1, width))) for n in nodes}
    out = np.zeros((len(nodes), past_len - kv_offset + len(nodes)), dtype=bool)
    for r, q in enumerate(nodes):
        for k in range(kv_offset, past_len):
            out[r, k - kv_offset] = past_visible[k] and (window is None or past_len + pos[q] - k < window)
        seen = visible(q)
        for c, key in enumerate(nodes):
            out[r, past_len - kv_offset + c] = key in seen and (window is None or pos[q] - pos[key] < window)
    return out
