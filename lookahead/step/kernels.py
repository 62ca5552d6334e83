"""Numba kernels of the step's host work on a CPU: the additive mask of a host-made step, and
the in-place hiding that reading the logits' top-k on the host needs.

Pure functions over numpy arrays, compiled once with ``cache=True``; ``decode.py`` and
``host.py`` call them.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True)
def additive_mask(past_visible, allowed, blocked, out):
    """A step's additive mask on the host, ``out`` (float ``[q, p + q]``): row i is 0 where
    it may attend (a kept past entry, ``past_visible`` bool ``[p]``, or a step token it is
    ``allowed`` to see, bool ``[q, q]``) and ``blocked`` elsewhere."""
    p, q = past_visible.shape[0], allowed.shape[0]
    for i in range(q):
        for j in range(p):
            out[i, j] = 0.0 if past_visible[j] else blocked
        for j in range(q):
            out[i, p + j] = 0.0 if allowed[i, j] else blocked


@njit(cache=True)
def hide_at(values, ids, saved, fill):
    """Save ``values[r, ids[r]]`` in ``saved[r]`` and write ``fill`` there, for every row r
    (float ``[rows, V]``, int64 ``[rows]``); :func:`put_back` undoes it. One kernel call costs
    less than numpy's fancy indexing, whose code runs cold right after a forward."""
    for r in range(ids.shape[0]):
        saved[r] = values[r, ids[r]]
        values[r, ids[r]] = fill


@njit(cache=True)
def put_back(values, ids, saved):
    """``values[r, ids[r]] = saved[r]`` for every row r: what :func:`hide_at` hid."""
    for r in range(ids.shape[0]):
        values[r, ids[r]] = saved[r]
