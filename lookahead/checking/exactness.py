"""What "the same tokens" means where outputs are compared (the commands and the benchmark).

Greedy lookahead decoding must reproduce plain decoding token for token. In float32/float64 any
difference is a bug; in bfloat16/float16 a forward over many tokens rounds differently from one
over a single token, so a near-tie between the two best scores may flip.
"""

from __future__ import annotations

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE = 0, 1, 2  # the commands' exit status: ok, a mismatch, a usage error
FULL_PRECISION = ("float32", "float64")  # where any mismatch is a bug, not a rounding near-tie


def dtype_name(dtype) -> str:
    """``torch.float32`` or ``"float32"`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


def full_precision(dtype) -> bool:
    """Whether ``dtype`` (a ``torch.dtype`` or its name) is one where greedy must match exactly."""
    return dtype_name(dtype) in FULL_PRECISION


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where ``a`` and ``b`` differ (a length difference counts), or ``None``."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
