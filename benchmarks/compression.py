"""Clock-free step compression: tokens per forward and accepted tokens by source.

The controller never reads a clock; priced by a fixed cost curve (the AVX-512 machine's fp32
calibration, or a flat bf16 one) a run gives the same forwards on any machine, busy or idle,
so changes to the drafts can be compared without timing. Wall-clock speed-ups: lookahead bench.

    python benchmarks/compression.py --limit 20 [--dtype bfloat16] [--sample] [--check] [--set window=0]
"""

import argparse
import json
import time

import torch

import lookahead
from lookahead.bench import prompts as P
from lookahead.step.costmodel import CostCurve

ap = argparse.ArgumentParser()
ap.add_argument("--dtype", default="float32")
ap.add_argument("--limit", type=int, default=20)
ap.add_argument("--tokens", type=int, default=128)
ap.add_argument("--sample", action="store_true")
ap.add_argument("--temperature", type=float, default=0.7)
ap.add_argument("--set", action="append", default=[])
ap.add_argument("--check", action="store_true")
a = ap.parse_args()
torch.set_num_threads(1)
dtype = getattr(torch, a.dtype)
model, tok = lookahead.load_default_model(dtype=dtype)
sizes = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
curves = {
    "float32": CostCurve(sizes, (1, 1.43, 1.49, 1.64, 1.81, 1.86, 2.1, 2.45, 3.0, 3.6), 0.011),
    "bfloat16": CostCurve(sizes, (1, 1.0, 1.0, 1.03, 1.1, 1.17, 1.3, 1.45, 1.8, 2.2), 0.009),
}
curve = curves[a.dtype]
fields = {}
for s in a.set:
    k, v = s.split("=")
    fields[k] = int(v) if v.lstrip("-").isdigit() else (v == "true" if v in ("true", "false") else v)
cfg = lookahead.LookaheadConfig(**fields)
chosen = P.load_prompts("humaneval", tok, a.limit)
tot = lookahead.LookaheadStats()
bad = 0
t0 = time.time()
for i, p in enumerate(chosen):
    ids = torch.tensor([P.encode(p, tok, 1024 - a.tokens)])
    kw = dict(max_new_tokens=a.tokens, attention_mask=torch.ones_like(ids), pad_token_id=tok.pad_token_id)
    if a.sample:
        kw.update(do_sample=True, temperature=a.temperature, top_p=0.95)
    torch.manual_seed(i)
    with torch.no_grad():
        out = lookahead.generate(model, ids, lookahead_config=cfg, lookahead_stats=tot, lookahead_costs=curve, **kw)
        if a.check:
            torch.manual_seed(i)
            ref = model.generate(ids, **kw)
            bad += int(not torch.equal(out, ref))
steps = tot.steps
print(
    json.dumps(
        {
            "set": a.set,
            "dtype": a.dtype,
            "sample": a.sample,
            "tpf": round(tot.tokens_per_forward, 4),
            "new": tot.new_tokens,
            "fwd": tot.forwards,
            "sources": tot.source_tokens,
            "guess_per_step": round(tot.guess_tokens / max(steps, 1), 2),
            "mismatch": bad if a.check else None,
            "secs": round(time.time() - t0, 1),
        }
    )
)
