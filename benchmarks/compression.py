"""Clock-free step compression: tokens per forward and accepted tokens by source.

The controller never reads a clock; priced by a fixed cost curve (the AVX-512 machine's fp32
calibration, or a flat bf16 one) a run gives the same forwards on any machine, busy or idle,
so changes to the drafts can be compared without timing. Wall-clock speed-ups: lookahead bench.

    python benchmarks/compression.py --limit 20 [--dtype bfloat16] [--sample] [--check] [--set window=0]
        [--curve avx2-bfloat16] [--price bfloat16-decode] [--prompts adversarial] [--temperature 1.5]

``modeled_speedup`` is the tokens over the steps' summed cost by that curve (a guessing
step's overhead included), read off the controller's own records: what the run would gain
were the curve exact. ``--price`` sums the steps' costs by another curve than the one the
controller decides by: what its choices give where forwards cost what that curve says.
"""

import argparse
import json
import time

import torch
from curves import CURVES  # benchmarks/curves.py, beside this script

import lookahead
from lookahead.bench import prompts as P
from lookahead.step.controller import PLAIN, ShapeController

ap = argparse.ArgumentParser()
ap.add_argument("--dtype", default="float32")
ap.add_argument("--limit", type=int, default=20)
ap.add_argument("--tokens", type=int, default=128)
ap.add_argument("--sample", action="store_true")
ap.add_argument("--temperature", type=float, default=0.7)
ap.add_argument("--top-p", type=float, default=0.95)
ap.add_argument("--top-k", type=int, default=0, help="0 (none), as lookahead bench samples")
ap.add_argument("--set", action="append", default=[])
ap.add_argument("--check", action="store_true")
ap.add_argument("--curve", default=None, help="a name in benchmarks/curves.py (default: the dtype)")
ap.add_argument("--price", default=None, help="a curve in benchmarks/curves.py for modeled_speedup (default: --curve)")
ap.add_argument("--prompts", default="humaneval")
ap.add_argument("--keep-pool", action="store_true", help="one pool kept across the prompts (lookahead_pool)")
a = ap.parse_args()
torch.set_num_threads(1)
dtype = getattr(torch, a.dtype)
model, tok = lookahead.load_default_model(dtype=dtype)
curve = CURVES[a.curve or a.dtype]
price = CURVES[a.price] if a.price else curve  # what steps really cost, where it differs from what they are priced at
paid = [0.0, 0.0]  # tokens, cost: every step the controller recorded
_record = ShapeController.record


def record(self, shape, accepted, fed):
    paid[0] += accepted
    paid[1] += price(fed) + (self.overhead if shape != PLAIN else 0.0)
    return _record(self, shape, accepted, fed)


ShapeController.record = record
fields = {}
for s in a.set:
    k, v = s.split("=")
    fields[k] = int(v) if v.lstrip("-").isdigit() else (v == "true" if v in ("true", "false") else v)
cfg = lookahead.LookaheadConfig(**fields)
pool = lookahead.NgramPool(cfg.ngram, cfg.guesses, cfg.pool_capacity, cfg.context_tokens) if a.keep_pool else None
chosen = P.load_prompts(a.prompts, tok, a.limit)
tot = lookahead.LookaheadStats()
bad = 0
t0 = time.time()
for i, p in enumerate(chosen):
    ids = torch.tensor([P.encode(p, tok, 1024 - a.tokens)])
    kw = dict(max_new_tokens=a.tokens, attention_mask=torch.ones_like(ids), pad_token_id=tok.pad_token_id)
    if a.sample:
        kw.update(do_sample=True, temperature=a.temperature, top_p=a.top_p, top_k=a.top_k)
    torch.manual_seed(i)
    with torch.no_grad():
        kept = {"lookahead_pool": pool} if pool is not None else {}
        out = lookahead.generate(
            model, ids, lookahead_config=cfg, lookahead_stats=tot, lookahead_costs=curve, **kept, **kw
        )
        if a.check:
            torch.manual_seed(i)
            ref = model.generate(ids, **kw)
            bad += int(not torch.equal(out, ref))
steps = tot.steps
print(
    json.dumps(
        {
            "set": a.set,
            "keep_pool": a.keep_pool,
            "dtype": a.dtype,
            "sample": a.sample,
            "curve": a.curve or a.dtype,
            "price": a.price or a.curve or a.dtype,
            "tpf": round(tot.tokens_per_forward, 4),
            "modeled_speedup": round(paid[0] / paid[1], 4) if paid[1] else None,
            "new": tot.new_tokens,
            "fwd": tot.forwards,
            "sources": tot.source_tokens,
            "guess_per_step": round(tot.guess_tokens / max(steps, 1), 2),
            "mismatch": bad if a.check else None,
            "secs": round(time.time() - t0, 1),
        }
    )
)
