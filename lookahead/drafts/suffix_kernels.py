"""Numba kernels of the suffix drafts: where the text's end occurred before, and the tree of
what followed it there, each node scored by how often its continuation followed.

Pure functions over numpy arrays, compiled once with ``cache=True``; ``suffix.py`` holds
the arrays and calls these.

An occurrence is a position ``p`` of a text where a continuation starts: the text before
``p`` ends like the current text does. Over the occurrences of one match, the draft tree
holds the continuations' common prefixes; a node's probability is the share of the
occurrences that continue with its path (``count(node) / count(occurrences)``).

Worked example (request scope, the text wraps: see ``_token``)::

    text   a b c a b d a b          ids 0 1 2 0 1 3 0 1, n = 8
    match  the text ends in "a b"; "a b" also ends before positions 2 and 5
    occ    [2, 5] -> continuations "c a b d a b ...", "d a b ..."
    tree   c (0.5) -> a (0.5) -> b (0.5) ...
           d (0.5) -> a (0.5) -> b (0.5) ...

Best first, the tree grows by the most probable open node while its probability is at
least ``min_prob``; nodes come out in that order, so every prefix of the output is a tree
(parents before children) and probabilities never increase along it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_ENDED = -1  # no token: the text (or one of the texts, separated by -1) ended there


@njit(cache=True, inline="always")
def _token(text, n, start, depth, wrap):
    """The ``depth``-th token of the continuation at ``start``. Past the end, a wrapping text
    repeats its last ``n - start`` tokens (a match p tokens back predicts a loop of period
    p); any other text has ended there."""
    i = start + depth
    if i >= n:
        if not wrap or start >= n:
            return _ENDED
        i = start + depth % (n - start)
    return text[i]


@njit(cache=True)
def _partition(text, n, wrap, occ, keys, lo, hi, depth):
    """Sort ``occ[lo:hi]`` by their ``depth``-th continuation token (``keys[lo:hi]`` holds it
    after), so each token's occurrences are one run."""
    for i in range(lo, hi):
        keys[i] = _token(text, n, occ[i], depth, wrap)
    # a stable insertion sort: a match has at most MAX_OCCURRENCES (64) occurrences, and
    # numba's argsort costs seconds of compile time
    for i in range(lo + 1, hi):
        key, pos = keys[i], occ[i]
        j = i - 1
        while j >= lo and keys[j] > key:
            keys[j + 1], occ[j + 1] = keys[j], occ[j]
            j -= 1
        keys[j + 1], occ[j + 1] = key, pos


@njit(cache=True)
def grow_tree(text, n, wrap, occ, max_nodes, max_depth, min_prob, tokens_out, parents_out, probs_out):
    """The draft tree of the continuations at ``occ`` (int64 ``[R]``, permuted in place).

    Writes up to ``max_nodes`` nodes best first: ``tokens_out[i]``, ``parents_out[i]`` (the
    index of an earlier node, -1 for a child of the text's last token) and ``probs_out[i]``
    (the share of the occurrences that continue with node i's path, >= ``min_prob``); no node
    is deeper than ``max_depth``. Returns ``(nodes, expected)``, expected = the sum of the
    probabilities: the tokens the draft would add were the occurrences a sample of what follows.
    """
    r = occ.shape[0]
    cap = min(max_nodes, tokens_out.shape[0])
    if r == 0 or cap == 0 or max_depth <= 0:
        return 0, 0.0
    keys = np.empty(r, dtype=np.int64)
    room = cap * 16 + 16  # open nodes: each emitted node opens at most 1 / min_prob children
    f_lo = np.empty(room, dtype=np.int64)
    f_hi = np.empty(room, dtype=np.int64)
    f_depth = np.empty(room, dtype=np.int64)
    f_parent = np.empty(room, dtype=np.int64)
    f_token = np.empty(room, dtype=np.int64)
    f_prob = np.empty(room, dtype=np.float64)
    # the root: every occurrence, about to be split by its first token
    f_lo[0], f_hi[0], f_depth[0], f_parent[0], f_token[0], f_prob[0] = 0, r, 0, -1, -1, 1.0
    open_nodes = 1
    emitted, expected = 0, 0.0
    while open_nodes:
        best = 0
        for i in range(1, open_nodes):
            if f_prob[i] > f_prob[best]:
                best = i
        lo, hi, depth, parent, token, prob = (
            f_lo[best],
            f_hi[best],
            f_depth[best],
            f_parent[best],
            f_token[best],
            f_prob[best],
        )
        open_nodes -= 1
        f_lo[best], f_hi[best], f_depth[best] = f_lo[open_nodes], f_hi[open_nodes], f_depth[open_nodes]
        f_parent[best], f_token[best], f_prob[best] = f_parent[open_nodes], f_token[open_nodes], f_prob[open_nodes]
        me = parent
        if token >= 0:  # not the root: emit
            tokens_out[emitted], parents_out[emitted], probs_out[emitted] = token, parent, prob
            expected += prob
            me = emitted
            emitted += 1
            if emitted == cap:
                break
        if depth >= max_depth:
            continue
        _partition(text, n, wrap, occ, keys, lo, hi, depth)
        start = lo
        while start < hi:
            end = start + 1
            while end < hi and keys[end] == keys[start]:
                end += 1
            child_prob = (end - start) / r  # the share of every occurrence, not a product
            if keys[start] >= 0 and child_prob >= min_prob and open_nodes < room:
                f_lo[open_nodes], f_hi[open_nodes], f_depth[open_nodes] = start, end, depth + 1
                f_parent[open_nodes], f_token[open_nodes], f_prob[open_nodes] = me, keys[start], child_prob
                open_nodes += 1
            start = end
    return emitted, expected


@njit(cache=True)
def match_lengths(tokens, max_match, out):
    """``out[p]`` = how many tokens before position p equal the text's last ones (at most
    ``max_match``), for p in [1, n - 1]; ``out[0] = 0``. Returns the longest."""
    n = tokens.shape[0]
    out[0] = 0
    longest = 0
    for p in range(1, n):
        m = 0
        while m < max_match and m < p and tokens[p - 1 - m] == tokens[n - 1 - m]:
            m += 1
        out[p] = m
        if m > longest:
            longest = m
    return longest


@njit(cache=True)
def _scratch(cap):
    """Buffers for one tree of at most ``cap`` nodes: tokens, parents, probabilities."""
    return np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.float64)


@njit(cache=True)
def _grow_keep(text, n, wrap, occ, m, max_nodes, max_depth, spec_factor, spec_offset, min_prob, scratch, out, best):
    """Grow the tree of one match length m's occurrences ``occ`` into ``scratch`` (at most
    ``m * spec_factor + spec_offset`` deep); where it expects more tokens than ``best``
    ``(nodes, expected, m)``, copy it to ``out`` and return it as the new best."""
    depth = min(max_depth, max(1, int(m * spec_factor + spec_offset)))
    t, p, q = scratch
    count, expected = grow_tree(text, n, wrap, occ, max_nodes, depth, min_prob, t, p, q)
    if expected <= best[1]:
        return best
    out_t, out_p, out_q = out
    for i in range(count):  # a loop, not slices: their shape checks cost seconds of compile time
        out_t[i], out_p[i], out_q[i] = t[i], p[i], q[i]
    return count, expected, m


@njit(cache=True)
def text_draft(
    tokens, min_match, max_match, max_occ, max_nodes, max_depth, spec_factor, spec_offset, min_prob, out_t, out_p, out_q
):
    """The best draft from the text itself (``tokens``, int32: the prompt and output so far,
    typed as the indexes are, so the kernels below compile once), over every match
    length from the longest down to ``min_match``: for length m the occurrences are the
    latest ``max_occ`` positions preceded by the text's last m tokens, and the tree is at most
    ``m * spec_factor + spec_offset`` deep. Keeps the tree that expects the most tokens.
    Writes it to ``out_*`` as :func:`grow_tree` does; returns ``(nodes, expected, m)``."""
    n = tokens.shape[0]
    if n < 2:
        return 0, 0.0, 0
    lengths = np.empty(n, dtype=np.int64)
    longest = match_lengths(tokens, max_match, lengths)
    scratch, out = _scratch(out_t.shape[0]), (out_t, out_p, out_q)
    occ = np.empty(max_occ, dtype=np.int64)
    best, last_r = (0, 0.0, 0), -1
    for m in range(longest, min_match - 1, -1):
        r = 0
        for pos in range(n - 1, 0, -1):  # newest first
            if lengths[pos] >= m:
                occ[r] = pos
                r += 1
                if r == max_occ:
                    break
        if r == last_r and r < max_occ:
            continue  # the same occurrences as the longer match, which may grow deeper
        last_r = r
        args = (max_nodes, max_depth, spec_factor, spec_offset, min_prob)
        best = _grow_keep(tokens, n, True, occ[:r], m, *args, scratch, out, best)
    return best


@njit(cache=True, inline="always")
def _compare(text, n, pos, query, start, m):
    """Sign of text[pos : pos + m] against query[start : start + m] (past the end < any token)."""
    for k in range(m):
        a = text[pos + k] if pos + k < n else -2
        b = query[start + k]
        if a != b:
            return -1 if a < b else 1
    return 0


@njit(cache=True)
def suffix_range(text, sa, query, m):
    """``(lo, hi)``: the suffix-array rows whose suffixes start with the query's last m tokens."""
    n = text.shape[0]
    start = query.shape[0] - m
    lo, hi = 0, sa.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if _compare(text, n, sa[mid], query, start, m) < 0:
            lo = mid + 1
        else:
            hi = mid
    first = lo
    hi = sa.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if _compare(text, n, sa[mid], query, start, m) <= 0:
            lo = mid + 1
        else:
            hi = mid
    return first, lo


@njit(cache=True)
def index_draft(
    text,
    sa,
    query,
    min_match,
    max_match,
    max_occ,
    max_nodes,
    max_depth,
    spec_factor,
    spec_offset,
    min_prob,
    out_t,
    out_p,
    out_q,
):
    """:func:`text_draft` over an indexed text (``text`` int32 ``[N]``, texts separated by -1;
    ``sa`` its suffix array) for the end of ``query`` (int32, the current text). A match
    with more than ``max_occ`` occurrences uses an even stride of them (the rows of a
    suffix-array range are sorted by what follows, so a stride keeps each continuation's
    share to within one row in ``max_occ``). Returns ``(nodes, expected, m)``."""
    n = text.shape[0]
    top = min(max_match, query.shape[0])
    scratch, out = _scratch(out_t.shape[0]), (out_t, out_p, out_q)
    occ = np.empty(max_occ, dtype=np.int64)
    best, last_r = (0, 0.0, 0), -1
    for m in range(top, min_match - 1, -1):
        lo, hi = suffix_range(text, sa, query, m)
        if hi == lo:
            continue
        total = hi - lo
        r = min(total, max_occ)
        if r == last_r and total <= max_occ:
            continue
        last_r = r
        for i in range(r):
            occ[i] = sa[lo + (i * total) // r] + m
        args = (max_nodes, max_depth, spec_factor, spec_offset, min_prob)
        best = _grow_keep(text, n, False, occ[:r], m, *args, scratch, out, best)
    return best


@njit(cache=True)
def tree_rows(tokens, parents, count, depths_out, leaves_out):
    """The draft's first ``count`` nodes as root-to-leaf rows (int64 ``[leaves, depth]``,
    shorter rows end in -1), for the guess trie; ``depths_out[i]`` gets node i's depth and
    ``leaves_out[r]`` row r's leaf."""
    is_parent = np.zeros(count, dtype=np.bool_)
    deepest = 0
    for i in range(count):
        par = parents[i]
        depths_out[i] = 1 if par < 0 else depths_out[par] + 1
        if par >= 0:
            is_parent[par] = True
        deepest = max(deepest, depths_out[i])
    leaves = 0
    for i in range(count):
        if not is_parent[i]:
            leaves += 1
    rows = np.full((leaves, deepest), -1, dtype=np.int64)
    r = 0
    for i in range(count):
        if is_parent[i]:
            continue
        leaves_out[r] = i
        node = i
        while node >= 0:
            rows[r, depths_out[node] - 1] = tokens[node]
            node = parents[node]
        r += 1
    return rows
