#!/usr/bin/env python
"""Ablation: each guess source of lookahead on and off, side by side in one interleaved run.

Every variant runs on the same prompts, interleaved per prompt after a warm-up, next to plain
greedy (the baseline) and HF prompt lookup; greedy-mode outputs are checked against greedy's.
Variants (``LookaheadConfig`` fields changed from the default):

    lookahead            the default configuration
    -window              window=0 (no Jacobi window: pool and copy guess only)
    -pool                guesses=0 (no n-gram pool)
    -copy                copy_length=0 (no suffix-drafted copy guess, hence no draft budget)
    -successors          successors=0 (no recycled predictions)
    classic              method="classic" (every step the full shape, whole guesses)
    copy-only            window=0, guesses=0, successors=0 (the draft tree alone, as
                         SuffixDecoding drafts, fed as far as the budget says it pays)
    kept-pool            one pool (and its history) kept across the prompts
    +index               the corpus index given with --index (the copy guess drafts from it too)
    suffix               SuffixDecoding's own tree per request, for scale (when installed)

Modes (``--modes``, one table each, every variant in each): ``greedy-fp32`` (the default),
``greedy-bf16``, ``sampled-fp32``, ``sampled-bf16``; sampled modes draw seeded samples at
``--temperature`` / ``--top-p`` (default 0.7 / 0.95), checked token for token against seeded
``model.generate``, and prompt lookup, which does not sample as ``generate`` does, is left out.

Example (the numbers in docs/benchmarks.md)::

    python benchmarks/ablation.py --threads 2 --limit 20 --json runs/ablation.json
    python benchmarks/ablation.py --modes greedy-bf16,sampled-fp32,sampled-bf16 --variants lookahead,-window
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

VARIANTS = {
    "lookahead": {},
    "-window": {"window": 0},
    "-pool": {"guesses": 0},
    "-copy": {"copy_length": 0},
    "-successors": {"successors": 0},
    "classic": {},
    "copy-only": {"window": 0, "guesses": 0, "successors": 0},
}

EXTRA = {"kept-pool": {"keep_pool": True}, "+index": {"index": "--index"}, "suffix": {"method": "suffix"}}
MODES = {  # name: (dtype, sampled)
    "greedy-fp32": ("float32", False),
    "greedy-bf16": ("bfloat16", False),
    "sampled-fp32": ("float32", True),
    "sampled-bf16": ("bfloat16", True),
}


def build_variants(settings, names: list[str], index=None):
    from lookahead.bench.runner import Variant

    variants = [Variant("greedy", "greedy", replace(settings, state={}))]
    if not settings.do_sample:
        variants.append(Variant("prompt-lookup", "prompt-lookup", replace(settings, state={})))
    for name in names:
        if name == "kept-pool":
            variants.append(Variant(name, "lookahead", replace(settings, state={}, keep_pool=True)))
        elif name == "+index":
            variants.append(Variant(name, "lookahead", replace(settings, state={}, index=index)))
        elif name in ("suffix", "classic"):
            variants.append(Variant(name, name, replace(settings, state={})))
        else:
            variants.append(Variant(name, "lookahead", replace(settings, state={}, config_fields=dict(VARIANTS[name]))))
    return variants


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", default="humaneval")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default: cpu)")
    ap.add_argument(
        "--variants",
        default=",".join([*VARIANTS, "kept-pool"]),
        help="comma-separated subset of: " + ", ".join([*VARIANTS, *EXTRA]),
    )
    ap.add_argument("--modes", default="greedy-fp32", help="comma-separated subset of: " + ", ".join(MODES))
    ap.add_argument("--temperature", type=float, default=0.7, help="sampled modes (default: 0.7)")
    ap.add_argument("--top-p", type=float, default=0.95, help="sampled modes (default: 0.95)")
    ap.add_argument("--seed", type=int, default=0, help="sampled modes: prompt i is seeded seed+i")
    ap.add_argument("--index", default=None, help="a corpus index (lookahead index build) for the +index variant")
    ap.add_argument("--json", default=None, help="one document per mode, keyed by mode")
    args = ap.parse_args(argv)

    from lookahead.cli.options import prepare_torch

    prepare_torch(args.threads)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS and n not in EXTRA]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes {args.modes!r}: expected a comma-separated subset of {', '.join(MODES)}")
    if "+index" in names and not args.index:
        ap.error("the +index variant needs --index PATH.npz")
    docs, status = {}, 0
    for mode in modes:
        docs[mode] = run_mode(args, mode, names)
        status |= _print(mode, docs[mode])
    if args.json:
        from lookahead.bench import report

        report.write_json(docs if len(docs) > 1 else docs[modes[0]], args.json)
    return status


def run_mode(args, mode: str, names: list[str]) -> dict:
    """Every variant next to plain ``generate`` in one mode: the bench document."""
    import torch

    from lookahead.bench import methods, prompts, report, runner
    from lookahead.checking import loading
    from lookahead.cli.options import load_index

    dtype, sampled = MODES[mode]
    model, tokenizer = loading.load(None, dtype, args.device)
    chosen = prompts.load_prompts(args.prompts, tokenizer, args.limit or None)
    encoded = [prompts.encode(p, tokenizer, loading.max_prompt_len(model, args.max_new_tokens)) for p in chosen]
    sample = dict(do_sample=True, temperature=args.temperature, top_p=args.top_p, seed=args.seed) if sampled else {}
    settings = methods.Settings(
        max_new_tokens=args.max_new_tokens, pad_token_id=loading.pad_token_id(model, tokenizer), **sample
    )
    variants = build_variants(settings, names, load_index(args.index, model))
    records, skipped = runner.run(model, chosen, encoded, variants, progress=True)
    labels = [v.label for v in variants if v.label not in skipped]
    config = {
        "command": "ablation",
        "mode": mode,
        "model_name": loading.model_name(None),
        "dtype": dtype,
        "device": str(next(model.parameters()).device),
        "threads": torch.get_num_threads(),
        "prompts": args.prompts,
        "n_prompts": len(chosen),
        "max_new_tokens": args.max_new_tokens,
        "methods": labels,
        "baseline": "greedy",
        "variants": {n: VARIANTS.get(n, EXTRA.get(n)) for n in names},
        "sample": {"do_sample": sampled, **sample},
    }
    return report.document(config, records, labels, "greedy", exactness=True)


def _print(mode: str, doc: dict) -> int:
    """The mode's table and sources on stdout, its mismatches on stderr; 1 where fp32 differs."""
    from lookahead.bench import report

    print(f"\n== {mode} ==")
    print(report.table(doc))
    for line in report.source_lines(doc):
        print(line)
    lines = report.mismatch_lines(doc)
    for line in lines:
        print(line, file=sys.stderr)
    return 1 if lines and doc["config"]["dtype"] == "float32" else 0


if __name__ == "__main__":
    sys.exit(main())
