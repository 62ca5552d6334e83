#!/usr/bin/env python
"""How often seeded lookahead sampling differs from seeded ``model.generate`` on the embedded model.

For each of the first N HumanEval prompts, with seed = the prompt's index, run
``torch.manual_seed(seed); model.generate(do_sample=True, ...)`` and the same with
``lookahead.generate``, compare token for token, and at a first difference judge it
(``lookahead.checking.verdict.race_verdict``): a rounding flip of the race, one at the top-p boundary,
or a bug (each record also keeps the race gap, ``inf`` when a token lies outside the nucleus).

    python benchmarks/sampling_flips.py --limit 100 --max-new-tokens 128 --temperature 1.0 --top-p 0.95
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import lookahead
from lookahead.bench.prompts import humaneval_prompts
from lookahead.checking.verdict import race_verdict, warpers


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--fixed", action="store_true", help="the full shape every step (method='classic'): many-token forwards"
    )
    ap.add_argument("--json", default=None, help="write the per-prompt records here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tok = lookahead.load_default_model()
    processors = warpers(args.temperature, args.top_p)
    kwargs = dict(
        do_sample=True,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=0,
        pad_token_id=tok.pad_token_id,
    )
    records, tokens, tokens_per_forward = [], 0, []
    for seed, prompt in enumerate(humaneval_prompts(args.limit)):
        ids = tok(prompt.text, return_tensors="pt").input_ids
        kwargs["attention_mask"] = torch.ones_like(ids)
        torch.manual_seed(seed)
        expected = model.generate(ids, **kwargs)[0, ids.shape[1] :].tolist()
        stats = lookahead.LookaheadStats()
        torch.manual_seed(seed)
        config = lookahead.LookaheadConfig(method="classic" if args.fixed else "lookahead")
        got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
        got = got[0, ids.shape[1] :].tolist()
        tokens += len(expected)
        tokens_per_forward.append(stats.tokens_per_forward)
        first = next((t for t, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), None)
        if first is None and len(expected) != len(got):
            first = min(len(expected), len(got))
        record = {"prompt": prompt.id, "seed": seed, "equal": first is None, "first_difference": first}
        if first is not None and first < min(len(expected), len(got)):
            prefix = torch.cat([ids[0], torch.tensor(expected[:first])])
            judged = race_verdict(model, prefix, (expected[first], got[first]), seed, first, processors=processors)
            record.update(race_gap=judged.race_gap, flip=judged.flip, verdict=judged.as_dict())
        records.append(record)
        print(json.dumps(record), file=sys.stderr)
    differ = [r for r in records if not r["equal"]]
    flips = [r for r in differ if r.get("flip")]
    summary = {
        "method": "classic" if args.fixed else "lookahead",
        "prompts": len(records),
        "tokens": tokens,
        "equal": len(records) - len(differ),
        "differ": len(differ),
        "rounding_flips": len(flips),
        "bugs": len(differ) - len(flips),
        "tokens_per_forward": sum(tokens_per_forward) / len(tokens_per_forward),
        "settings": {k: v for k, v in kwargs.items() if k != "attention_mask"},
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "records": records}, f, indent=1)
    return 1 if summary["bugs"] else 0


if __name__ == "__main__":
    sys.exit(main())
