#!/usr/bin/env python
"""Projection: tokens per forward where a forward's cost barely grows with its tokens.

On a GPU a forward over 1-64 tokens of a 1-8B model costs about the same; on this CPU it does
not, so lookahead's controller feeds less than it would there. This runs lookahead with the
flat curve ``CostCurve.linear(0.002)`` (about what such a GPU forward costs) and reports
tokens per forward, next to SuffixDecoding's (whose drafts do not depend on the cost) and
prompt lookup's. It is a projection, not a measurement of speed: tokens per forward only,
no timing. Outputs are checked against greedy.

    python benchmarks/projection.py --prompts humaneval --limit 20
    python benchmarks/projection.py --prompts multiturn --keep-pool
"""

from __future__ import annotations

import argparse
import json

FLAT = 0.002


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", default="humaneval")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--keep-pool", action="store_true", help="lookahead's pool and suffix's tree kept across prompts")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch

    import lookahead
    from lookahead.bench import methods, prompts
    from lookahead.checking import loading
    from lookahead.cli.options import prepare_torch

    prepare_torch(args.threads)
    model, tokenizer = loading.load(None, "float32", "cpu")
    chosen = prompts.load_prompts(args.prompts, tokenizer, args.limit or None)
    max_len = loading.max_prompt_len(model, args.max_new_tokens)
    settings = methods.Settings(max_new_tokens=args.max_new_tokens, pad_token_id=loading.pad_token_id(model, tokenizer))
    pool = lookahead.KeptState()
    peers = [m for m in ("prompt-lookup", "suffix-global" if args.keep_pool else "suffix") if methods.available(m)]
    tokens = dict.fromkeys(["lookahead", *peers], 0)
    forwards = dict.fromkeys(tokens, 0)
    exact = True
    for prompt in chosen:
        ids = torch.tensor([prompts.encode(prompt, tokenizer, max_len)])
        want = methods.measure("greedy", model, ids, settings).tokens
        stats = lookahead.LookaheadStats()
        with torch.inference_mode():
            out = lookahead.generate(
                model,
                ids,
                lookahead_costs=lookahead.CostCurve.linear(FLAT),
                lookahead_stats=stats,
                **({"lookahead_pool": pool} if args.keep_pool else {}),
                **settings.generate_kwargs(ids),
            )
        exact &= out[0, ids.shape[1] :].tolist() == want
        tokens["lookahead"] += stats.new_tokens
        forwards["lookahead"] += stats.forwards
        for peer in peers:
            run = methods.measure(peer, model, ids, settings)
            exact &= run.tokens == want
            tokens[peer] += run.new_tokens
            forwards[peer] += run.forwards
    doc = {
        "projection": f"tokens per forward with lookahead_costs=CostCurve.linear({FLAT})",
        "prompts": args.prompts,
        "n_prompts": len(chosen),
        "keep_pool": args.keep_pool,
        "tokens_per_forward": {m: round(tokens[m] / forwards[m], 3) for m in tokens},
        "exact": exact,
    }
    print(json.dumps(doc, indent=1))
    return 0 if exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
