"""Numba kernels of the step's host work on a CPU: the additive mask of a host-made step, and
the top-k of a step's logits read on the host.

Pure functions over numpy arrays, compiled once with ``cache=True``; ``host.py`` calls them.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def additive_mask(past_visible, allowed, blocked, out):
    """A step's additive mask on the host, as the bits of the model's dtype: ``out`` (int16
    ``[q, (p + q) * w]``, w = ``blocked``'s length: 1 for bfloat16 and float16, 2 for
    float32) holds for row i and key j the w words of 0.0 (all zero) where it may attend (a
    kept past entry, ``past_visible`` bool ``[p]``, or a step token it is ``allowed`` to see,
    bool ``[q, q]``) and ``blocked``'s words elsewhere. Words, not floats, so one kernel makes
    every dtype's mask, bfloat16's too, which numpy has not."""
    p, q, w = past_visible.shape[0], allowed.shape[0], blocked.shape[0]
    for i in range(q):
        for j in range(p + q):
            keep = past_visible[j] if j < p else allowed[i, j - p]
            for t in range(w):
                out[i, j * w + t] = 0 if keep else blocked[t]


SETS = 256  # a row's logits split into this many strided sets, of which a top-k reads a few


@njit(cache=True, inline="always")
def _better(v, j, than_v, than_j):
    return v > than_v or (v == than_v and j < than_j)


@njit(cache=True, inline="always")
def _offer(ids, best, filled, v, j):
    """Logit ``v`` of id ``j`` among a row's best so far (``filled`` of at most k, ``ids`` and
    ``best`` ``[k]``): higher logits first, the lower id first among equal ones. Returns the
    new count."""
    k = ids.shape[0]
    if filled == k and not _better(v, j, best[k - 1], ids[k - 1]):
        return filled
    at = min(filled, k - 1)
    while at > 0 and _better(v, j, best[at - 1], ids[at - 1]):
        best[at] = best[at - 1]
        ids[at] = ids[at - 1]
        at -= 1
    best[at] = v
    ids[at] = j
    return min(filled + 1, k)


@njit(cache=True)
def top_k_rows(values, k):
    """``(preds, ids, best)`` of a step's logits ``values`` (float32 ``[B, q, V]``): each row's
    argmax (int64 ``[B, q]``: the first maximum, or the first NaN where a row has one, as
    ``torch.argmax`` takes it) and its ``k >= 1`` best ids (int64 ``[B, q, k]``), best first,
    the lowest id first among equal logits, NaNs last in id order, with their logits (float32
    ``[B, q, k]``). One call makes all three: right after a forward each operation runs from
    cold caches, so a step takes as few as it can."""
    rows, queries, vocab = values.shape
    preds = np.zeros((rows, queries), dtype=np.int64)
    ids = np.zeros((rows, queries, k), dtype=np.int64)  # a k above V leaves ids 0 at -inf
    best = np.full((rows, queries, k), -np.inf, dtype=np.float32)
    maxima = np.empty(min(SETS, vocab), dtype=np.float32)
    for b in range(rows):
        for i in range(queries):
            first_nan = _top_k_row(values[b, i], ids[b, i], best[b, i], maxima)
            preds[b, i] = first_nan if first_nan >= 0 else ids[b, i, 0]
    return preds, ids, best


@njit(cache=True, inline="always")
def _top_k_row(row, ids, best, maxima):
    """One row's top-k into ``ids`` and ``best`` (``[k]``); returns its first NaN (-1: none).

    Vectorised passes, not a compare per logit in turn: the NaNs are counted, and the maxima
    of ``SETS`` strided sets (set c holds ids c, c + SETS, ...) taken, both in SIMD loops;
    every top-k logit is at least the k-th largest set maximum, so only the sets that reach
    it are read one by one. A row with a NaN is read one logit at a time."""
    vocab, n = row.shape[0], maxima.shape[0]
    s = vocab // n
    nans = 0
    for j in range(vocab):
        nans += row[j] != row[j]
    first_nan, filled = -1, 0
    if nans:
        for j in range(vocab):
            if row[j] != row[j]:
                first_nan = j if first_nan < 0 else first_nan
            else:
                filled = _offer(ids, best, filled, row[j], j)
        for j in range(first_nan, vocab):  # too few numbers: the NaNs, in id order
            if filled < ids.shape[0] and row[j] != row[j]:
                best[filled], ids[filled] = row[j], j
                filled += 1
        return first_nan
    for c in range(n):
        maxima[c] = row[c]
    for t in range(1, s):
        part = row[t * n : (t + 1) * n]
        for c in range(n):
            maxima[c] = max(maxima[c], part[c])
    for c in range(n):
        filled = _offer(ids, best, filled, maxima[c], c)
    threshold = best[filled - 1]
    filled = 0
    for c in range(n):
        if maxima[c] >= threshold:
            for j in range(c, s * n, n):
                filled = _offer(ids, best, filled, row[j], j)
    for j in range(s * n, vocab):
        filled = _offer(ids, best, filled, row[j], j)
    return first_nan
