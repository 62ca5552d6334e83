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
    -adaptive            adaptive=False (every step the full shape, whole guesses)
    copy-only            window=0, guesses=0, successors=0 (the draft tree alone, as
                         SuffixDecoding drafts, fed as far as the budget says it pays)
    kept-pool            one pool (and its history) kept across the prompts
    +index               the corpus index given with --index (the copy guess drafts from it too)
    suffix               SuffixDecoding's own tree per request, for scale (when installed)

Example (the numbers in docs/benchmarks.md)::

    python benchmarks/ablation.py --threads 2 --limit 20 --json runs/ablation.json
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
    "-adaptive": {"adaptive": False},
    "copy-only": {"window": 0, "guesses": 0, "successors": 0},
}

EXTRA = {"kept-pool": {"keep_pool": True}, "+index": {"index": "--index"}, "suffix": {"method": "suffix"}}


def build_variants(settings, names: list[str], index=None):
    from lookahead.bench.runner import Variant

    variants = [
        Variant("greedy", "greedy", replace(settings, state={})),
        Variant("prompt-lookup", "prompt-lookup", replace(settings, state={})),
    ]
    for name in names:
        if name == "kept-pool":
            variants.append(Variant(name, "lookahead", replace(settings, state={}, keep_pool=True)))
        elif name == "+index":
            variants.append(Variant(name, "lookahead", replace(settings, state={}, index=index)))
        elif name == "suffix":
            variants.append(Variant(name, "suffix", replace(settings, state={})))
        else:
            variants.append(Variant(name, "lookahead", replace(settings, state={}, config_fields=dict(VARIANTS[name]))))
    return variants


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", default="humaneval")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--variants",
        default=",".join([*VARIANTS, "kept-pool"]),
        help="comma-separated subset of: " + ", ".join([*VARIANTS, *EXTRA]),
    )
    ap.add_argument("--index", default=None, help="a corpus index (lookahead index build) for the +index variant")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch

    from lookahead.bench import methods, prompts, report, runner
    from lookahead.checking import loading
    from lookahead.cli.options import prepare_torch

    prepare_torch(args.threads)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS and n not in EXTRA]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}")
    if "+index" in names and not args.index:
        ap.error("the +index variant needs --index PATH.npz")
    model, tokenizer = loading.load(None, "float32", "cpu")
    chosen = prompts.load_prompts(args.prompts, tokenizer, args.limit or None)
    encoded = [prompts.encode(p, tokenizer, loading.max_prompt_len(model, args.max_new_tokens)) for p in chosen]
    settings = methods.Settings(max_new_tokens=args.max_new_tokens, pad_token_id=loading.pad_token_id(model, tokenizer))
    from lookahead.cli.options import load_index

    variants = build_variants(settings, names, load_index(args.index, model))
    records, skipped = runner.run(model, chosen, encoded, variants, progress=True)
    labels = [v.label for v in variants if v.label not in skipped]
    config = {
        "command": "ablation",
        "model_name": loading.model_name(None),
        "dtype": "float32",
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "prompts": args.prompts,
        "n_prompts": len(chosen),
        "max_new_tokens": args.max_new_tokens,
        "methods": labels,
        "baseline": "greedy",
        "variants": {n: VARIANTS.get(n, EXTRA.get(n)) for n in names},
        "sample": {"do_sample": False},
    }
    doc = report.document(config, records, labels, "greedy", exactness=True)
    print(report.table(doc))
    if args.json:
        report.write_json(doc, args.json)
    lines = report.mismatch_lines(doc)
    for line in lines:
        print(line, file=sys.stderr)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
