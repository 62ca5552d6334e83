"""Named cost curves for the clock-free benchmarks: a forward over k tokens in one-token forwards.

``float32`` / ``bfloat16`` are the AVX-512 machine's (native bf16: its bf16 curve is flat up to
8 tokens); ``avx2-*`` the AVX2-only machine's idle calibrations, 2 threads, no native bf16.
The last argument is the seconds of a one-token forward there.
"""

from __future__ import annotations

from lookahead.step.costmodel import CostCurve

SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)

CURVES = {
    "float32": CostCurve(SIZES, (1, 1.43, 1.49, 1.64, 1.81, 1.86, 2.1, 2.45, 3.0, 3.6), 0.011),
    "bfloat16": CostCurve(SIZES, (1, 1.0, 1.0, 1.03, 1.1, 1.17, 1.3, 1.45, 1.8, 2.2), 0.009),
    # the AVX-512 machine's bf16 forwards as timed inside sampled decodes (2026-12-04, median
    # against generate's one-token forward): dearer from 4 tokens on than calibrate() times them
    "bfloat16-decode": CostCurve(SIZES, (1, 1.0, 1.04, 1.09, 1.14, 1.26, 1.4, 1.55, 1.9, 2.3), 0.009),
    "avx2-float32": CostCurve(SIZES, (1, 1.355, 1.529, 1.529, 1.529, 1.577, 1.757, 1.976, 2.387, 2.77), 0.0082),
    "avx2-bfloat16": CostCurve(SIZES, (1, 1.179, 1.71, 2.801, 3.888, 4.992, 7.132, 9.32, 13.657, 17.904), 0.0057),
}
