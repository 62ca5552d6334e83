#!/usr/bin/env python
"""The draft budget's calibration: the chance it predicted for each candidate node against the
share that held, per source and depth and per band of predicted chance.

A node's predicted chance is its bin's conditional one (that it holds where its parent held,
``DraftBudget`` candidates' ``cond``), so a node counts only where its parent held and a token
reached its depth: then it held or not, fed by the step or not (the budget learns from both,
``budget_kernels.record``). A calibrated budget's bands lie on the diagonal; one above it
under-feeds, one below it feeds nodes that do not pay. Lookahead's default configuration,
greedy, on the embedded model. Run on an otherwise idle machine (only counts are read here,
so a busy one changes nothing but the time).

    python benchmarks/reliability.py --limit 20 --json runs/reliability.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np
import torch

import lookahead
from lookahead.bench.prompts import load_prompts
from lookahead.default_model import load_default_model
from lookahead.drafts.budget import DraftBudget
from lookahead.drafts.budget_kernels import COPY_BINS

BANDS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0001)


def bin_label(budget: DraftBudget, b: int) -> str:
    """A bin's source, and for a row source which of its arrays with its prior rates (the pool
    proposes two: its context pair's rows and its key's)."""
    first_row = COPY_BINS * len(budget.scored)
    if b < first_row:
        return budget._names[b]
    row = budget.row_sources[((b - first_row) % budget._shared) // budget.depth]
    return f"{row.name} ({row.first}, {row.later})"


def candidates(budget: DraftBudget, appended: np.ndarray) -> list[tuple[str, int, float, bool, bool, str]]:
    """``(source, depth, predicted, held, fed, bin)`` of every candidate of the budget's last
    plan that a step could judge: its parent held and a token reached its depth."""
    tokens, parents, bins, _, cond, keep, _ = budget._arrays[0]
    out, ok = [], {}
    for i in range(budget._count):
        par = int(parents[i])
        depth = 1 if par < 0 else ok[par][1] + 1
        reached = (par < 0 or ok[par][0]) and depth <= appended.shape[0]
        held = bool(reached and appended[depth - 1] == tokens[i])
        ok[i] = (held, depth)
        if reached:
            b = int(bins[i])
            out.append((budget._names[b], depth, float(cond[i]), held, bool(keep[i]), bin_label(budget, b)))
    return out


def collect(limit: int, max_new_tokens: int) -> list[tuple]:
    """Every judged candidate of ``limit`` HumanEval prompts' greedy decodes."""
    seen: list[tuple] = []
    real = DraftBudget.learn

    def learn(self, appended):
        if self._count:
            seen.extend(candidates(self, np.asarray(appended, dtype=np.int64)))
        return real(self, appended)

    DraftBudget.learn = learn
    try:
        model, tok = load_default_model()
        for prompt in load_prompts("humaneval", tok, limit):
            ids = tok(prompt.text, return_tensors="pt").input_ids
            with torch.no_grad():
                lookahead.generate(model, ids, max_new_tokens=max_new_tokens)
    finally:
        DraftBudget.learn = real
    return seen


def by_source(seen: list[tuple], fed_only: bool, column: int = 0) -> list[dict]:
    """Per source (``column`` 0) or per bin (5) and depth."""
    groups = defaultdict(list)
    for row in seen:
        depth, predicted, held, fed = row[1:5]
        if fed or not fed_only:
            groups[(row[column], min(depth, 4))].append((predicted, held))
    return [
        {
            "source": s,
            "depth": f"{d}" if d < 4 else "4+",
            "nodes": len(v),
            "predicted": float(np.mean([p for p, _ in v])),
            "held": float(np.mean([h for _, h in v])),
        }
        for (s, d), v in sorted(groups.items())
    ]


def by_band(seen: list[tuple], fed_only: bool) -> list[dict]:
    rows = []
    for lo, hi in zip(BANDS, BANDS[1:]):
        v = [(p, h) for _, _, p, h, f, _ in seen if lo <= p < hi and (f or not fed_only)]
        if v:
            rows.append(
                {
                    "band": f"{lo:.1f}-{min(hi, 1.0):.1f}",
                    "nodes": len(v),
                    "predicted": float(np.mean([p for p, _ in v])),
                    "held": float(np.mean([h for _, h in v])),
                }
            )
    return rows


def table(rows: list[dict], keys: list[str]) -> str:
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        cells = [f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]) for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    seen = collect(args.limit, args.max_new_tokens)
    doc = {
        which: {
            "by_source": by_source(seen, which == "fed"),
            "by_bin": by_source(seen, which == "fed", column=5),
            "by_band": by_band(seen, which == "fed"),
        }
        for which in ("fed", "all")
    }
    for which in ("fed", "all"):
        print(f"\n{which} nodes, per source and depth:")
        print(table(doc[which]["by_source"], ["source", "depth", "nodes", "predicted", "held"]))
        print(f"\n{which} nodes, per row source's array (its prior rates) and depth:")
        rows = [r for r in doc[which]["by_bin"] if "(" in r["source"]]
        print(table(rows, ["source", "depth", "nodes", "predicted", "held"]))
        print(f"\n{which} nodes, per band of predicted chance:")
        print(table(doc[which]["by_band"], ["band", "nodes", "predicted", "held"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
