"""Numba kernels of the drafts: the n-gram pool's hash table, recycled successors, the merging
of guesses into a trie, its step layout and the greedy walk down it (the copy guess's are in
``suffix_kernels.py``, the step's host-side mask and top-k hiding in ``step/kernels.py``).

Pure functions over numpy arrays, compiled once with ``cache=True``. No torch here; the
classes in ``pool.py``, ``successors.py`` and ``tree.py`` hold the arrays and call these.

Pool table layout (``capacity`` slots, a power of two; ``M = ngram - 1``):

    keys    int64[capacity]          key token of the slot, -1 = empty
    stamps  int64[capacity]          clock value of the slot's last insert or lookup hit
    counts  int32[capacity]          continuations held, <= guesses
    conts   int32[capacity, G, M]    continuations, oldest first, newest at counts-1
    clock   int64[1]                 ticks once per insert / lookup

A key probes at most ``PROBE`` consecutive slots. When all of them hold other keys, the
least recently touched of them is evicted: memory is fixed, and old keys go first.

Kernels copy arrays element by element, never by slice or row assignment: numba compiles a
shape check with a formatted error message for each of those, seconds of compile time on a
fresh install for nothing the loops need (lookahead.warmup).
"""

from __future__ import annotations

import numpy as np
from numba import njit

PROBE = 8
_EMPTY = -1


@njit(cache=True, inline="always")
def _home(key, mask):
    h = (key * np.int64(-7046029254386353131)) ^ (key >> np.int64(29))
    return h & mask


@njit(cache=True, inline="always")  # inlined: each caller types it alike, no second signature
def _find_slot(keys, stamps, key, create):
    """Slot holding ``key``; with ``create``, a free or evicted slot for it; else -1."""
    mask = keys.shape[0] - 1
    home = _home(key, mask)
    free = -1
    oldest = home
    for i in range(PROBE):
        s = (home + i) & mask
        if keys[s] == key:
            return s
        if keys[s] == _EMPTY:
            if free < 0:
                free = s
        elif stamps[s] < stamps[oldest]:
            oldest = s
    if not create:
        return -1
    return free if free >= 0 else oldest


@njit(cache=True, inline="always")
def _same(a, b):
    for j in range(a.shape[0]):
        if a[j] != b[j]:
            return False
    return True


@njit(cache=True)
def pool_insert(keys, stamps, counts, conts, clock, row_keys, row_conts):
    """File continuation ``row_conts[r]`` (int64[R, M]) under key ``row_keys[r]``, in order.

    A continuation already held under its key moves to the newest place; a new one is
    appended, dropping the key's oldest when ``G`` are held. Negative keys are skipped.
    """
    guesses = conts.shape[1]
    if guesses == 0:
        return
    for r in range(row_keys.shape[0]):
        key = row_keys[r]
        if key < 0:
            continue
        cont = row_conts[r]
        clock[0] += 1
        s = _find_slot(keys, stamps, key, True)
        if keys[s] != key:
            keys[s] = key
            counts[s] = 0
        stamps[s] = clock[0]
        n = counts[s]
        found = n
        for g in range(n):
            if _same(conts[s, g], cont):
                found = g
                break
        if found == n and n == guesses:
            found = 0
        elif found == n:
            counts[s] = n + 1
            for j in range(cont.shape[0]):
                conts[s, n, j] = cont[j]
            continue
        last = counts[s] - 1
        for g in range(found, last):
            for j in range(cont.shape[0]):  # element loops, not row copies (see the module's note)
                conts[s, g, j] = conts[s, g + 1, j]
        for j in range(cont.shape[0]):
            conts[s, last, j] = cont[j]


@njit(cache=True)
def pool_lookup(keys, stamps, counts, conts, clock, key, out, filled):
    """Append ``key``'s continuations, newest first, to ``out[filled:]``, skipping any
    already in ``out[:filled]``, until ``out`` is full; return the new fill."""
    s = _find_slot(keys, stamps, key, False)
    if s < 0:
        return filled
    clock[0] += 1
    stamps[s] = clock[0]
    held = filled
    for g in range(counts[s] - 1, -1, -1):
        if filled == out.shape[0]:
            break
        dup = False
        for h in range(held):
            if _same(conts[s, g], out[h]):
                dup = True
                break
        if not dup:
            for j in range(out.shape[1]):
                out[filled, j] = conts[s, g, j]
            filled += 1
    return filled


@njit(cache=True)
def text_ngrams(tokens, start, n):
    """The n-grams of ``tokens`` starting at index >= start, and the token before each
    (-1 at the text's start): ``(int64[R, n], int64[R])``."""
    first = max(start, 0)
    rows = max(tokens.shape[0] - n + 1 - first, 0)
    out = np.empty((rows, n), dtype=np.int64)
    before = np.empty(rows, dtype=np.int64)
    for r in range(rows):
        before[r] = tokens[first + r - 1] if first + r > 0 else -1
        for j in range(n):
            out[r, j] = tokens[first + r + j]
    return out, before


@njit(cache=True)
def pair_key(before, key):
    """The key of the two-token context ``(before, key)``. Single-token keys are the token ids
    themselves (< 2**31); a pair's starts at 2**32, so both live in one table."""
    return ((before + 1) << 32) | key


@njit(cache=True)
def pool_insert_ngrams(keys, stamps, counts, conts, clock, grams, before, pairs):
    """File the n-grams ``grams`` (int64 ``[R, n]``; their continuations are ``grams[:, 1:]``):
    with ``pairs``, first each under the two-token key of its first token and the token
    before it (``before[r]``, skipped where -1), then each under its first token alone."""
    rows = grams.shape[0]
    if rows == 0 or conts.shape[1] == 0:
        return
    tails = np.empty((rows, grams.shape[1] - 1), dtype=np.int64)
    firsts = np.empty(rows, dtype=np.int64)
    for r in range(rows):
        firsts[r] = grams[r, 0]
        for j in range(tails.shape[1]):
            tails[r, j] = grams[r, j + 1]
    if pairs:
        paired = np.empty(rows, dtype=np.int64)
        for r in range(rows):
            paired[r] = pair_key(before[r], firsts[r]) if before[r] >= 0 else -1
        pool_insert(keys, stamps, counts, conts, clock, paired, tails)
    pool_insert(keys, stamps, counts, conts, clock, firsts, tails)


@njit(cache=True)
def pool_insert_text(keys, stamps, counts, conts, clock, tokens, start, n, pairs):
    """:func:`pool_insert_ngrams` of the n-grams of ``tokens`` starting at index >= start
    (:func:`text_ngrams`, with the token before each)."""
    grams, before = text_ngrams(tokens, start, n)
    pool_insert_ngrams(keys, stamps, counts, conts, clock, grams, before, pairs)


@njit(cache=True)
def successors_update(table, scores, tokens, top, top_scores):
    """Recycle a forward's predictions: ``table[tokens[i]] = top[i]`` and
    ``scores[tokens[i]] = top_scores[i]`` for each row i.

    ``table`` int32 ``[V, K]`` holds, per token, the K most likely next tokens the model
    predicted the last time that token was fed, and ``scores`` float32 ``[V, K]`` their
    logits; ``top`` int64 and ``top_scores`` float32 ``[q, K]``."""
    for i in range(tokens.shape[0]):
        t = tokens[i]
        if 0 <= t < table.shape[0]:
            for j in range(table.shape[1]):
                table[t, j] = top[i, j]
                scores[t, j] = top_scores[i, j]


@njit(cache=True, inline="always")
def _successor(table, scores, token, noise, depth, inv_temp):
    """The stored successor of ``token`` a guess at ``depth`` follows: the first, or where
    ``noise`` has a row for that depth, the winner of the race ``argmax(score / T - log q)``
    over the stored ones (-1 where ``token`` has none)."""
    if token < 0 or token >= table.shape[0]:
        return -1
    if depth >= noise.shape[0]:
        return table[token, 0]
    best, best_score = -1, -np.inf
    for j in range(table.shape[1]):
        t = table[token, j]
        if t >= 0:
            s = scores[token, j] * inv_temp - np.log(noise[depth, t])
            if best < 0 or s > best_score:
                best, best_score = t, s
    return best


@njit(cache=True)
def successor_margin(table, scores, root, noise, inv_temp):
    """How far row 0's first token wins its pick among ``root``'s stored successors: the gap
    between the best and the second-best score (``score / T``, less ``log q`` where ``noise``
    has a row for the first token, as in :func:`_successor`); ``inf`` where ``root`` has one
    successor, -1.0 where it has none. A guess the stored logits pick by a wide margin still
    wins where the model's distribution has moved since they were stored.

    Example: ``table[5] = [7, 8]`` with scores ``[2.0, 0.5]``, greedy: 1.5. Sampling at T = 0.5
    where ``q[7] = 1`` and ``q[8] = e^-2``: 7 scores 4.0, 8 scores 1.0 + 2.0 = 3.0, gap 1.0.
    """
    if root < 0 or root >= table.shape[0]:
        return -1.0
    best, second = -np.inf, -np.inf
    found = 0
    for j in range(table.shape[1]):
        t = table[root, j]
        if t >= 0:
            s = scores[root, j] * inv_temp
            if noise.shape[0] > 0:
                s -= np.log(noise[0, t])
            found += 1
            if s > best:
                best, second = s, best
            elif s > second:
                second = s
    if found == 0:
        return -1.0
    return best - second


@njit(cache=True)
def successor_rows(table, scores, root, rows, length, noise, inv_temp, out):
    """Guesses from the successor table, ``length`` tokens at most per row (-1 pads a row that
    ran into an unknown token). Row 0 follows the successor each position picks (see
    :func:`_successor`): the first ones under greedy decoding (``noise`` ``[0, V]``), and under
    seeded sampling the stored successor that wins the race with the known noise of that
    position (float32 ``[m, V]``, row d for the d-th token from now; past its m rows, the first
    ones). Rows 1.. start with the root's other stored successors, best first, and go on as
    row 0 does. Returns the rows filled.

    Worked example (K = 2, length 3, greedy; ``table[5] = [7, 8]``, ``table[7] = [9, 4]``,
    ``table[8] = [3, 1]``, 9 and 3 never fed)::

        row 0   7 9 -1      (7 is 5's first successor, 9 is 7's)
        row 1   8 3 -1      (5's second, then first successors)

    Sampling, where the known noise makes 8 win among 5's pair at depth 0, 4 among 7's at
    depth 1 and 3 among 8's::

        row 0   8 3 -1
        row 1   7 4 -1
    """
    first = _successor(table, scores, root, noise, 0, inv_temp)
    if first < 0:
        return 0
    filled = 0
    for r in range(-1, table.shape[1]):
        if filled >= rows:
            break
        cur = first if r < 0 else table[root, r]
        if r >= 0 and (cur < 0 or cur == first):
            continue
        for j in range(length):
            out[filled, j] = -1
        for j in range(length):
            out[filled, j] = cur
            cur = _successor(table, scores, cur, noise, j + 1, inv_temp)
            if cur < 0:
                break
        filled += 1
    return filled


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
