#!/usr/bin/env python
"""Where a lookahead step's forward time goes, by dtype and with the window on and off.

For each dtype and variant, decodes the same prompts (after a warm-up) and prints the mean
forward per step, in milliseconds and against plain greedy's one-token forward in the same
dtype (every method on the same sdpa kernels, cuDNN's attention off unless ``--cudnn-attention``),
alternated ``--rounds`` times; then profiles one decode per dtype with
``torch.profiler`` and prints its heaviest operators by device time and by host time. Written
for a lent GPU (tools/gpu_check.sh runs it as the ``profile`` part); it runs on the CPU too.

    python benchmarks/step_profile.py --device cuda --limit 4
"""

from __future__ import annotations

import argparse
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rows", type=int, default=12, help="operators listed per profile table")
    ap.add_argument("--cudnn-attention", action="store_true", help="let sdpa pick cuDNN's attention, every method")
    args = ap.parse_args(argv)

    import torch

    import lookahead
    from lookahead.bench import prompts
    from lookahead.checking import loading
    from lookahead.runtime.sdpa import without_cudnn

    for dtype in args.dtypes.split(","):
        model, tokenizer = loading.load(None, dtype, args.device)
        chosen = prompts.load_prompts("humaneval", tokenizer, args.limit)
        ids = [torch.tensor([prompts.encode(p, tokenizer, 768)], device=model.device) for p in chosen]
        kwargs = dict(max_new_tokens=args.max_new_tokens, pad_token_id=loading.pad_token_id(model, tokenizer))
        allow = args.cudnn_attention
        variants = {
            "greedy": None,
            "lookahead": lookahead.LookaheadConfig(cudnn_attention=allow),
            "-window": lookahead.LookaheadConfig(window=0, cudnn_attention=allow),
        }
        totals = {name: [0.0, 0, 0, 0.0] for name in variants}  # forward s, forwards, tokens, wall s
        with torch.inference_mode(), without_cudnn(model, allow):  # greedy on lookahead's kernels
            for config in variants.values():  # warm-up: calibration, kernels, first calls
                _decode(model, ids[0], config, kwargs)
            for _ in range(args.rounds):
                for prompt in ids:
                    for name, config in variants.items():
                        run = _decode(model, prompt, config, kwargs)
                        totals[name] = [total + part for total, part in zip(totals[name], run)]
        unit = totals["greedy"][0] / totals["greedy"][1]
        print(f"\n== {dtype} on {model.device}: mean forward per step (ms), against greedy's")
        for name, (forward_s, forwards, tokens, wall_s) in totals.items():
            per = forward_s / forwards
            print(
                f"{name:10s} {per * 1e3:7.2f} ms  cost {per / unit:5.2f}  tok/fwd {tokens / forwards:5.2f}  "
                f"tok/s {tokens / wall_s:7.1f}"
            )
        _profile(model, ids[0], variants["lookahead"], kwargs, args.rows, dtype)
    return 0


def _decode(model, ids, config, kwargs) -> tuple[float, int, int, float]:
    """One decode: (forward seconds, forwards, new tokens, wall seconds)."""
    import lookahead
    from lookahead.bench.probes import synchronize

    synchronize(model)
    started = time.perf_counter()
    if config is None:
        out = model.generate(ids, do_sample=False, **kwargs)
        synchronize(model)
        wall = time.perf_counter() - started
        new = out.shape[1] - ids.shape[1]
        return wall, new, new, wall  # greedy's forwards, timed whole: its per-step host work is small
    stats = lookahead.LookaheadStats()
    out = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    synchronize(model)
    wall = time.perf_counter() - started
    return stats.forward_s, stats.forwards, out.shape[1] - ids.shape[1], wall


def _profile(model, ids, config, kwargs, rows: int, dtype: str) -> None:
    """One lookahead decode under torch.profiler: the heaviest operators by device and host time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import lookahead

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
    with torch.inference_mode(), profile(activities=activities) as prof:  # lookahead sets its own kernels
        lookahead.generate(model, ids, lookahead_config=config, **kwargs)
    averages = prof.key_averages()
    if model.device.type == "cuda":
        print(f"\n-- {dtype} lookahead: by device time")
        print(averages.table(sort_by="self_cuda_time_total", row_limit=rows, max_name_column_width=60))
    print(f"\n-- {dtype} lookahead: by host time")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=60))


if __name__ == "__main__":
    raise SystemExit(main())
