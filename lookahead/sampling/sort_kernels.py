"""A float32 row sort for ``sampling.warpers``' top-p: the values ``torch.sort`` gives, in an
eighth of its time.

A top-p needs a row's values in ascending order (its softmax and cumsum run over them), not
their ids: a value's side of the boundary follows from the value. ``torch.sort`` over
V = 8192 float32 costs about 0.3 ms on a CPU; a least-significant-digit radix sort over the
values' bits, three passes of 11 bits, about 0.04 ms.

The bits are made to order as unsigned integers the way the floats order: a non-negative
float's bits get the sign bit set (above every negative), a negative float's bits are all
flipped (a larger magnitude is a smaller value)::

    value     bits        key
    -2.0      0xC0000000  0x3FFFFFFF
    -1.0      0xBF800000  0x407FFFFF
    -0.0      0x80000000  0x7FFFFFFF
     0.0      0x00000000  0x80000000
     1.0      0x3F800000  0xBF800000
     inf      0x7F800000  0xFF800000

So -inf sorts first and +inf last, as torch sorts them. Unlike ``torch.sort``, -0.0 sorts
before 0.0 (torch leaves equal values in either order) and a NaN with its sign bit set sorts
first (torch puts every NaN last): the caller declines rows with a NaN.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_SIGN = np.uint32(0x80000000)
_ALL = np.uint32(0xFFFFFFFF)
_DIGIT = 11  # bits per pass: three passes cover 32 bits
_BUCKETS = 1 << _DIGIT


@njit(cache=True)
def sort_rows(rows, out):
    """Each row of ``rows`` (float32 ``[n, V]``, V >= 1) in ascending order, into ``out``
    (the same shape, float32): bit for bit the values ``torch.sort(rows).values`` holds, but
    for the order of -0.0 and 0.0 and of NaNs (see the module's docstring). Returns whether
    every row is free of NaNs and has a finite maximum (a row whose softmax is a number)."""
    n, size = rows.shape
    keys = np.empty(size, dtype=np.uint32)
    spare = np.empty(size, dtype=np.uint32)
    counts = np.empty(_BUCKETS, dtype=np.int64)
    for r in range(n):
        bits = rows[r].view(np.uint32)
        for j in range(size):
            b = bits[j]
            keys[j] = b ^ _ALL if b & _SIGN else b | _SIGN
        src, dst = keys, spare
        for shift in range(0, 32, _DIGIT):
            counts[:] = 0
            for j in range(size):
                counts[(src[j] >> shift) & (_BUCKETS - 1)] += 1
            start = 0
            for d in range(_BUCKETS):
                c = counts[d]
                counts[d] = start
                start += c
            for j in range(size):
                d = (src[j] >> shift) & (_BUCKETS - 1)
                dst[counts[d]] = src[j]
                counts[d] += 1
            src, dst = dst, src
        sorted_bits = out[r].view(np.uint32)
        for j in range(size):
            k = src[j]
            sorted_bits[j] = k ^ _SIGN if k & _SIGN else k ^ _ALL
    clean = True
    for r in range(n):
        low, high = out[r, 0], out[r, size - 1]
        clean = clean and low == low and -np.inf < high < np.inf  # a NaN sorts first or last
    return clean


@njit(cache=True)
def cut_values(ascending, removed, out):
    """Per row of ``ascending`` (float32 ``[n, V]``, sorted), the lowest value kept when its
    ``removed[r]`` (int64 ``[n]``, < V) lowest entries go: ``ascending[r, removed[r]]``, or
    -inf where none go, into ``out`` (float32 ``[n]``); the entries below it are exactly those.
    Returns False where a row's last removed entry equals its first kept one: a tie the cut
    splits, whose sides only the sorting order decides. Say a row sorts to
    ``[-1.0, 0.5, 0.5, 2.0]``: removing 1 cuts at 0.5 (the entries below 0.5 go), removing 2
    splits the two 0.5s (False)."""
    for r in range(ascending.shape[0]):
        m = removed[r]
        if m == 0:
            out[r] = -np.inf
        elif ascending[r, m - 1] == ascending[r, m]:
            return False
        else:
            out[r] = ascending[r, m]
    return True
