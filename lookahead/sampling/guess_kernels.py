"""The guesses' noise race as one numba kernel over host rows (see ``sampling.guess``)."""

from __future__ import annotations

import numpy as np
from numba import njit

TOP = 64  # tokens per row the race runs over


@njit(cache=True, inline="always")
def _top(row, vals, idx):
    """Fill ``vals`` / ``idx`` (``[TOP]``) with the row's highest values and their ids, highest
    first and, among equal values, the later id first: the order ``generate``'s top-p cuts in
    (it sorts ascending, stably, and drops from the front); returns how many (``min(TOP, V)``)."""
    filled = 0
    size = vals.shape[0]
    for j in range(row.shape[0]):
        v = row[j]
        if filled == size and v < vals[size - 1]:
            continue
        p = filled if filled < size else size - 1
        while p > 0 and vals[p - 1] <= v:
            if p < size:
                vals[p], idx[p] = vals[p - 1], idx[p - 1]
            p -= 1
        vals[p], idx[p] = v, j
        if filled < size:
            filled += 1
    return filled


@njit(cache=True, fastmath={"reassoc", "contract"})
def row_lse(row, inv_temp, top):
    """log sum exp(row / T) over the whole row (float32 ``[V]``, its maximum ``top``), to
    about 1e-5: a guess's top-p mass needs no more, and the whole row's exponentials are most
    of a raced row's cost under a top-p. Each ``e^y`` (``y <= 0``, clamped at -87, where
    float32 underflows) is ``(e^(y/256))^256``: a degree-5 Taylor polynomial at
    ``|y/256| <= 0.34``, squared 8 times. That is multiplies and adds only, which run in
    vector lanes (the sum too: ``reassoc``), where numba's ``exp`` calls libm once an entry:
    2.6 us a row at V = 8192 against 24 us."""
    t = np.float32(inv_temp)
    m = np.float32(top) * t
    total = np.float32(0.0)
    for j in range(row.shape[0]):
        y = max(row[j] * t - m, np.float32(-87.0)) * np.float32(1.0 / 256.0)
        e = np.float32(1.0) + y * (
            np.float32(1.0)
            + y * (np.float32(0.5) + y * (np.float32(1 / 6) + y * (np.float32(1 / 24) + y * np.float32(1 / 120))))
        )
        for _ in range(8):
            e = e * e
        total += e
    return np.float64(m) + np.log(np.float64(total))


@njit(cache=True)
def race_top(values, nodes, noise, inv_temp, top_k, top_p, keep_p, min_p, keep_min_p, out):
    """For each i, the token seeded sampling would emit after row ``nodes[i]`` of ``values``
    (float32 logits ``[q, V]``), were it the i-th token from now: ``argmax(p / q)`` over the
    row's ``TOP`` highest tokens still in the support, ``p`` their probabilities under the
    temperature (``inv_temp`` = 1 / T), then top-k (``top_k``, 0 for none), top-p
    (``top_p``, 1.0 for none, keeping at least ``keep_p``) and min-p (``min_p``, 0.0 for none,
    keeping ``keep_min_p``), as ``generate`` applies them, and ``q`` noise row i (float32
    ``[m, V]``); past the m rows, the likeliest token. A row with noise races the tokens past
    the slice too, where the filters keep any (:func:`_tail_winner`): its pick is the exact
    race's winner, up to float rounding.

    Example: a row whose best two are token 7 (logit 2.0) and 8 (1.0), T = 1, no filters:
    7 greedily; with ``q[7] = 1`` and ``q[8] = e^-2`` the race weighs 7 at 1 and 8 at
    e^-1 / e^-2 = e, so 8.
    """
    size = min(TOP, values.shape[1])
    vals = np.empty(size, dtype=np.float32)
    idx = np.empty(size, dtype=np.int64)
    alive = np.empty(size, dtype=np.bool_)
    for i in range(nodes.shape[0]):
        row = values[nodes[i]]
        n = _top(row, vals, idx)
        for j in range(n):  # top-k keeps every token tied with its k-th (``scores < kth`` go)
            alive[j] = top_k <= 0 or j < top_k or (top_k <= n and vals[j] >= vals[top_k - 1])
        tail = n < row.shape[0] and (top_k <= 0 or top_k > n)  # tokens past the slice still in
        norm = 0.0
        if top_p < 1.0:
            if tail:
                norm = row_lse(row, inv_temp, vals[0])
            else:
                peak = vals[0] * inv_temp
                total = 0.0
                for j in range(n):
                    if alive[j]:
                        total += np.exp(vals[j] * inv_temp - peak)
                norm = peak + np.log(total)
            above = 0.0
            for j in range(n):
                p = np.exp(vals[j] * inv_temp - norm) if alive[j] else 0.0
                alive[j] = alive[j] and (above < top_p or j < keep_p)
                above += p
        if min_p > 0.0:
            for j in range(n):
                alive[j] = alive[j] and (np.exp((vals[j] - vals[0]) * inv_temp) >= min_p or j < keep_min_p)
        best, best_ratio = idx[0], -1.0
        for j in range(n):
            if alive[j]:
                ratio = np.exp((vals[j] - vals[0]) * inv_temp)
                if i < noise.shape[0]:
                    ratio /= noise[i, idx[j]]
                if ratio > best_ratio or (ratio == best_ratio and idx[j] < best):  # argmax: the first id of a tie
                    best, best_ratio = idx[j], ratio
        if tail and i < noise.shape[0] and best_ratio > 0.0:
            filters = (top_k, top_p, keep_p, min_p, keep_min_p, norm)
            best = _tail_winner(row, noise[i], vals[0], vals[n - 1], inv_temp, best, best_ratio, filters)
        out[i] = best


@njit(cache=True, inline="always")
def _tail_winner(row, q, top, last, inv_temp, best, best_ratio, filters):
    """The race's winner once the tokens past the slice run too: ``best`` (the slice's, at
    ``best_ratio``) or a token past it. Such a token's logit is at most the slice's ``last``, so
    it beats ``best_ratio`` only with noise below ``e^((last - top) / T) / best_ratio``: one
    pass over the noise row finds the few that may (at T = 1 with no top-k, a quarter of the
    embedded model's samples lie past its 64 likeliest tokens). The best of them wins if the
    filters keep it (:func:`_kept`). Each filter keeps the highest tokens, so where it does
    not, no token at or below its logit is kept either, and the pass runs again above it."""
    top_k, top_p, _, min_p, _, _ = filters
    reach = np.exp((last - top) * inv_temp)  # the most a token past the slice weighs before its noise
    floor = -np.inf
    while True:
        found, found_ratio = -1, best_ratio
        bound = np.float32(reach / found_ratio)
        for j in range(row.shape[0]):
            if q[j] < bound and floor < row[j] <= last:
                ratio = np.exp((row[j] - top) * inv_temp) / q[j]
                if ratio > found_ratio:
                    found, found_ratio = j, ratio
                    bound = np.float32(reach / found_ratio)  # a better find leaves fewer that may beat it
        if found < 0:
            return best
        if (top_k <= 0 and top_p >= 1.0 and min_p <= 0.0) or _kept(row, found, top, inv_temp, filters):
            return found
        floor = row[found]


@njit(cache=True, inline="always")
def _kept(row, j, top, inv_temp, filters):
    """Whether ``generate``'s warpers keep token ``j`` of ``row`` (logits, its maximum
    ``top``): each keeps the highest tokens, so one pass counts the tokens above ``j`` and
    their mass. ``filters``: top-k, top-p and its minimum kept, min-p and its minimum kept,
    and the row's log-normaliser (:func:`row_lse`; the whole row's, a top-k's cut included,
    where a top-p follows a top-k wider than the slice: a guess needs no more)."""
    top_k, top_p, keep_p, min_p, keep_min_p, norm = filters
    v = row[j]
    rank, above, mass = 0, 0, 0.0  # tokens higher; and those before j in top-p's order (ties: later ids)
    for m in range(row.shape[0]):
        if row[m] > v or (row[m] == v and m > j):
            above += 1
            rank += row[m] > v
            if top_p < 1.0:
                mass += np.exp(row[m] * inv_temp - norm)
    if top_k > 0 and rank >= top_k:
        return False
    if top_p < 1.0 and not (mass < top_p or above < keep_p):
        return False
    return min_p <= 0.0 or np.exp((v - top) * inv_temp) >= min_p or rank < keep_min_p
