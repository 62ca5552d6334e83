#!/usr/bin/env python
"""What PyTorch's sdpa costs per call by query count: the reason a one-token bf16 forward can
cost more than a two-token one on a CPU (``CostCurve.from_times``).

Times ``scaled_dot_product_attention`` over ``--keys`` keys for 1, 2, 4, 8 and 16 queries, with
an additive mask as lookahead's steps carry and without one, in each dtype (median of
``--calls`` calls after a warm-up). The default shape is the embedded model's layer: 6 heads of 64.

    python benchmarks/sdpa_queries.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time


def median_us(calls: int, fn, *args, **kwargs) -> float:
    """The median microseconds of ``fn(*args, **kwargs)`` over ``calls`` calls, after 20."""
    for _ in range(20):
        fn(*args, **kwargs)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--keys", type=int, default=300)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--dtypes", default="bfloat16,float32")
    args = ap.parse_args(argv)

    import torch
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    if args.threads:
        torch.set_num_threads(args.threads)
    shape = f"{args.heads} heads of {args.head_dim}, {args.keys} keys"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {shape}")
    print("dtype     queries  masked µs  unmasked µs")
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        keys = torch.randn(1, args.heads, args.keys, args.head_dim, dtype=dtype)
        values = torch.randn_like(keys)
        for q in (1, 2, 4, 8, 16):
            query = torch.randn(1, args.heads, q, args.head_dim, dtype=dtype)
            mask = torch.zeros(1, 1, q, args.keys, dtype=dtype)
            masked = median_us(args.calls, sdpa, query, keys, values, attn_mask=mask)
            bare = median_us(args.calls, sdpa, query, keys, values)
            print(f"{name:9} {q:7}  {masked:9.1f}  {bare:11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
