"""The step mask from first principles (positions and ancestry), shared by the mask tests."""

from __future__ import annotations

import numpy as np

from lookahead.classic import classic_layout


def case_layout(levels, width, tree):
    """A case's layout: the classic shape's (``tree``'s first ``width`` draft nodes the
    window's level 0, then ``levels - 1`` upper levels), or the tree's own without a window."""
    return classic_layout(tree, levels, width) if width else tree.layout()


def reference_mask(levels, width, tree, window, past_len, kv_offset, past_visible):
    """Boolean ``[q, past_len - kv_offset + q]`` straight from the definitions.

    The step is ``[root | draft | upper levels]``: node 0 the root, node ``1 + d`` draft node
    d (the first ``width`` of them the window's level 0, a chain), then ``levels - 1`` levels of
    ``width`` cells. A step token may attend a committed position (kept, not padding) or a step
    token that precedes it in its own sequence: the root and its ancestors for trie nodes, and
    for a window cell of level l >= 1 at column i the root, level 0 up to column i and the
    cells above it in column i. A sliding layer also drops every key at ``window`` or more
    positions before the query.
    """
    first_cell = 1 + tree.size
    upper = (levels - 1) * width if width else 0

    def parent(node):
        return int(tree.parents[node - 1])

    def depth(node):
        return 0 if node == 0 else depth(parent(node)) + 1

    def cell(node):
        return divmod(node - first_cell, width)  # (level - 1, column)

    def visible(node):
        if node < first_cell:
            seen = {node}
            while node:
                node = parent(node)
                seen.add(node)
            return seen
        above, col = cell(node)
        return {0} | {1 + c for c in range(col + 1)} | {first_cell + a * width + col for a in range(above + 1)}

    nodes = list(range(first_cell + upper))
    pos = {n: depth(n) if n < first_cell else 2 + sum(cell(n)) for n in nodes}
    out = np.zeros((len(nodes), past_len - kv_offset + len(nodes)), dtype=bool)
    for r, q in enumerate(nodes):
        for k in range(kv_offset, past_len):
            out[r, k - kv_offset] = past_visible[k] and (window is None or past_len + pos[q] - k < window)
        seen = visible(q)
        for c, key in enumerate(nodes):
            out[r, past_len - kv_offset + c] = key in seen and (window is None or pos[q] - pos[key] < window)
    return out
