"""Numba kernels of the drafts: the n-gram pool's hash table and the recycled successors (the
copy guess's are in ``suffix_kernels.py``, the guess tree's in ``lookahead/verify/kernels.py``).

Pure functions over numpy arrays, compiled once with ``cache=True``. No torch here; the
classes in ``pool.py`` and ``successors.py`` hold the arrays and call these.

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
