"""Aggregates, the summary table and the JSON document (schema in docs/bench.md)."""

from __future__ import annotations

import json
import statistics
from collections import Counter

from lookahead.bench.runner import TIE_MARGIN, Record
from lookahead.checking.verdict import is_flip
from lookahead.stats import STAGES

SCHEMA_VERSION = 1
# The stable keys other tools read; docs/bench.md documents them. Extra keys may follow them.
METHOD_KEYS = (
    "new_tokens",
    "forwards",
    "tokens_per_forward",
    "wall_s",
    "tokens_per_s",
    "speedup",
    "median_speedup",
    "acceptance_rate",
    "overhead_share",
    "mismatches",
)
PROMPT_KEYS = ("id", "method", "new_tokens", "forwards", "wall_s", "first_mismatch")


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _speedup(new: int, wall: float, base_new: int, base_wall: float) -> float | None:
    """This method's tokens per second over the baseline's: its wall time over ours where
    both made as many tokens, as every exact method does; per token where a rounding flip
    (bf16 sampling) changed an output's length, so a longer output does not count as slower."""
    if not (wall and base_wall and new and base_new):
        return None
    return (new / wall) / (base_new / base_wall)


def per_prompt_speedups(records: list[Record], label: str, baseline: str) -> dict[str, float]:
    """The baseline's speed over this label's, per prompt id (:func:`_speedup`)."""
    base = {r.prompt_id: r.result for r in records if r.label == baseline}
    out = {}
    for r in records:
        if r.label == label and r.prompt_id in base:
            ratio = _speedup(
                r.result.new_tokens, r.result.wall_s, base[r.prompt_id].new_tokens, base[r.prompt_id].wall_s
            )
            if ratio is not None:
                out[r.prompt_id] = ratio
    return out


def _decode_s(result) -> float | None:
    """A run's seconds after its prefill (the prompt's forward), None where not known."""
    return result.wall_s - result.prefill_s if result.prefill_s is not None else None


def decode_speedup(records: list[Record], label: str, baseline: str) -> float | None:
    """:func:`_speedup` of the decode alone: each run's wall time less its prefill, which every
    method pays alike and which a long prompt makes most of the wall time."""
    base = {r.prompt_id: r.result for r in records if r.label == baseline}
    rows = [(r.result, base.get(r.prompt_id)) for r in records if r.label == label]
    if not rows or any(b is None or _decode_s(r) is None or _decode_s(b) is None for r, b in rows):
        return None
    new, spent = sum(r.new_tokens for r, _ in rows), sum(_decode_s(r) for r, _ in rows)
    base_new, base_spent = sum(b.new_tokens for _, b in rows), sum(_decode_s(b) for _, b in rows)
    return _speedup(new, spent, base_new, base_spent)


def profile(rows) -> dict | None:
    """Where a method's time went: per stage of its decode (``lookahead.stats.STAGES``) the mean
    microseconds per step and the share of its wall time, and its set-up (the wall time outside
    the stages); for a method that times no stages, its forwards and everything else."""
    wall = sum(r.wall_s for r in rows)
    steps = sum(r.steps or 0 for r in rows) or sum(max(r.forwards - 1, 0) for r in rows)
    if not wall or not steps:
        return None
    staged = [r.extra["stages"] for r in rows if r.extra.get("stages")]
    if len(staged) == len(rows):
        spent = {name: sum(s.get(name, 0.0) for s in staged) for name in STAGES}
        spent["setup"] = max(wall - sum(spent.values()), 0.0)
    else:
        forward = sum(r.forward_s for r in rows)
        spent = {"forward": forward, "other": max(wall - forward, 0.0)}
    return {name: {"us_per_step": s / steps * 1e6, "share": s / wall} for name, s in spent.items()}


def _mean_step_forward_s(records: list[Record], label: str | None) -> float | None:
    """Mean seconds of a forward after the prefill (the prefill's long prompt would skew it)."""
    rows = [r.result for r in records if r.label == label]
    rows = [r for r in rows if r.prefill_s is not None and r.forwards > 1]
    return _ratio(sum(r.forward_s - r.prefill_s for r in rows), sum(r.forwards - 1 for r in rows))


def _engine_extras(rows) -> dict:
    """Pool hit rate, tokens fed per step and the accepted-length histogram, for engine methods."""
    extras = [r.extra for r in rows if "accepted_hist" in r.extra]
    if not extras:
        return {}
    hist: list[int] = []
    for e in extras:
        hist.extend([0] * (len(e["accepted_hist"]) - len(hist)))
        for k, n in enumerate(e["accepted_hist"]):
            hist[k] += n
    steps = sum(r.steps or 0 for r in rows)
    return {
        "pool_hit_rate": _ratio(sum(e["pool_hits"] for e in extras), sum(e["pool_lookups"] for e in extras)),
        "guess_tokens_per_step": _ratio(sum(e["guess_tokens"] for e in extras), steps),
        "window_share": _ratio(sum(e.get("window_steps", 0) for e in extras), steps),
        "source_tokens": dict(sum((Counter(e.get("source_tokens", {})) for e in extras), Counter()).most_common()),
        "accepted_hist": hist,
        "fallbacks": sum(1 for e in extras if e["fallback"]),
    }


def source_lines(doc: dict) -> list[str]:
    """Where each engine method's accepted guessed tokens came from, and how often it fed the window."""
    lines = []
    for label, s in doc["methods"].items():
        tokens = s.get("source_tokens")
        if not tokens:
            continue
        total = sum(tokens.values())
        shares = ", ".join(f"{name} {n} ({n / total:.0%})" for name, n in tokens.items())
        window = s.get("window_share")
        lines.append(
            f"{label}: accepted guessed tokens by source: {shares}; window fed in {_fmt(window, '.0%')} of steps"
        )
    return lines


def summarize(records: list[Record], label: str, baseline: str | None, exactness: bool) -> dict:
    """The per-method block of the JSON document."""
    rows = [r.result for r in records if r.label == label]
    new = sum(r.new_tokens for r in rows)
    forwards = sum(r.forwards for r in rows)
    wall = sum(r.wall_s for r in rows)
    forward_s = sum(r.forward_s for r in rows)
    base_rows = [r.result for r in records if r.label == baseline] if baseline else []
    base_wall, base_new = sum(r.wall_s for r in base_rows), sum(r.new_tokens for r in base_rows)
    speedups = list(per_prompt_speedups(records, label, baseline).values()) if baseline else []
    known = [r for r in rows if r.steps is not None and r.accepted_steps is not None]
    steps = sum(r.steps for r in known)
    mismatched = [r for r in records if r.label == label and r.first_mismatch is not None]
    checked = exactness and all(r.checked for r in records if r.label == label)
    ties = [r for r in mismatched if _is_tie(r)]
    return {
        "new_tokens": new,
        "forwards": forwards,
        "tokens_per_forward": _ratio(new, forwards),
        "wall_s": wall,
        "tokens_per_s": _ratio(new, wall),
        "speedup": _speedup(new, wall, base_new, base_wall) if baseline else None,
        "median_speedup": statistics.median(speedups) if speedups else None,
        "acceptance_rate": _ratio(sum(r.accepted_steps for r in known), steps) if known and steps else None,
        "overhead_share": max(1.0 - forward_s / wall, 0.0) if wall else None,
        "mismatches": len(mismatched) if checked else None,
        "ties": len(ties) if checked else None,  # of the mismatches, rounding ties (sampling: flips)
        # extra: of the sampled flips, those at a support boundary (top-k, top-p, min-p, typical-p, epsilon, eta)
        "boundary_flips": sum((r.flip or {}).get("kind") == "boundary" for r in ties) if checked else None,
        # extra keys (documented, not part of the stable set)
        "decode_speedup": decode_speedup(records, label, baseline) if baseline else None,
        "prompts": len(rows),
        "forward_s": forward_s,
        "peak_mem_mb": max((r.peak_mem_mb for r in rows), default=None),
        "forward_cost": _ratio(
            _mean_step_forward_s(records, label) or 0.0, _mean_step_forward_s(records, baseline) or 0.0
        ),
        "compile_s": sum(r.warmup_s for r in rows),  # inside timed runs: 0 after a warm-up
        "slow_prompts": slow_prompts(records, label),
        "profile": profile(rows),
        **_engine_extras(rows),
    }


SLOW = 5.0  # a prompt this many times its method's median seconds per token is flagged (a stall)


def slow_prompts(records: list[Record], label: str) -> list[str]:
    """The prompts whose seconds per new token exceed ``SLOW`` x the method's median: a compile
    or another stall inside a timed run (per token, so a prompt that ran longer is not one)."""
    rows = [r for r in records if r.label == label and r.result.new_tokens]
    per_token = {r.prompt_id: r.result.wall_s / r.result.new_tokens for r in rows}
    if len(per_token) < 3:
        return []
    median = statistics.median(per_token.values())
    return [pid for pid, s in per_token.items() if s > SLOW * median]


def prompt_entry(record: Record, base: dict) -> dict:
    """One prompt's JSON entry; ``base`` holds the baseline's result per prompt id."""
    result = record.result
    theirs = base.get(record.prompt_id)
    return {
        "id": record.prompt_id,
        "method": record.label,
        "new_tokens": result.new_tokens,
        "forwards": result.forwards,
        "wall_s": result.wall_s,
        "first_mismatch": record.first_mismatch,
        # extra keys
        "tie_margin": record.tie_margin,
        "flip": record.flip,  # sampling: lookahead.checking.verdict's verdict at first_mismatch
        "prompt_tokens": record.prompt_tokens,
        "tokens_per_forward": _ratio(result.new_tokens, result.forwards),
        "speedup": _speedup(result.new_tokens, result.wall_s, theirs.new_tokens, theirs.wall_s) if theirs else None,
        "forward_s": result.forward_s,
        "prefill_s": result.prefill_s,
        "steps": result.steps,
        "accepted_steps": result.accepted_steps,
        "peak_mem_mb": result.peak_mem_mb,
        **result.extra,
    }


def document(config: dict, records: list[Record], labels: list[str], baseline: str | None, exactness: bool) -> dict:
    """The whole JSON document: ``{"config", "methods", "prompts"}``."""
    base = {r.prompt_id: r.result for r in records if r.label == baseline}
    return {
        "config": {"schema_version": SCHEMA_VERSION, **config},
        "methods": {label: summarize(records, label, baseline, exactness) for label in labels},
        "prompts": [prompt_entry(r, base) for r in records],
    }


def write_json(doc: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


TABLE_COLUMNS = (
    ("method", "method", "s"),
    ("tokens", "new_tokens", "d"),
    ("fwd", "forwards", "d"),
    ("tok/fwd", "tokens_per_forward", ".2f"),
    ("wall s", "wall_s", ".2f"),
    ("tok/s", "tokens_per_s", ".1f"),
    ("speedup", "speedup", ".2f"),
    ("median", "median_speedup", ".2f"),
    ("accept", "acceptance_rate", ".2f"),
    ("fwd cost", "forward_cost", ".2f"),
    ("overhead", "overhead_share", ".0%"),
    ("peak MiB", "peak_mem_mb", ".0f"),
    ("slow", "slow_prompts", ""),
    ("exact", "mismatches", ""),
)


def _cell(label: str, summary: dict, key: str, spec: str, n_prompts: int) -> str:
    if key == "method":
        return label
    if key == "slow_prompts":
        return str(len(summary[key])) if summary[key] else "-"
    if key == "mismatches":
        m, ties = summary["mismatches"], summary.get("ties") or 0
        if m is None:
            return "n/a"
        if m == 0:
            return "yes"
        return f"tie {m}/{n_prompts}" if ties == m else f"NO {m}/{n_prompts}"
    return _fmt(summary[key], spec)


def headline(config: dict) -> str:
    """One line saying what was measured."""
    sample = config.get("sample") or {}
    mode = (
        f"sampling (temperature {sample['temperature']}, top-p {sample['top_p']}; 'greedy' = plain model.generate)"
        if sample.get("do_sample")
        else "greedy"
    )
    params = config.get("model_params")
    size = f" ({params / 1e6:.1f}M params)" if params else ""
    tp = f" · tensor parallel x{config['tp_size']}" if (config.get("tp_size") or 1) > 1 else ""
    tp += f" · batches of {config['batch_size']}" if (config.get("batch_size") or 1) > 1 else ""
    tp += " · static cache, compiled" if config.get("compile") else ""
    return (
        f"{config.get('model_name') or config.get('model')}{size} · {config.get('dtype')} · "
        f"{config.get('device')}{tp} · "
        f"{config.get('threads')} threads · {config.get('n_prompts')} x {config.get('prompts')} prompts · "
        f"{config.get('max_new_tokens')} new tokens · {mode}"
    )


def curve_lines(config: dict) -> list[str]:
    """What the lookahead steps were priced by: its decisions follow the cost curve, and a
    curve kept from an earlier calibration may differ from one measured now."""
    curve = config.get("cost_curve")
    if not curve:
        return []
    shown = ", ".join(f"{k}: {c:.2f}" for k, c in zip(curve["sizes"], curve["costs"]) if k in (2, 4, 8, 12, 16, 32))
    return [
        f"lookahead priced its steps by this cost curve (tokens: cost in one-token forwards) {shown}; "
        f"kept in {curve['file']} (delete it to measure again)"
    ]


def table(doc: dict) -> str:
    """A fixed-width summary table, one line per method."""
    head = [name for name, _, _ in TABLE_COLUMNS]
    rows = [
        [_cell(label, s, key, spec, s["prompts"]) for _, key, spec in TABLE_COLUMNS]
        for label, s in doc["methods"].items()
    ]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def profile_table(doc: dict) -> str:
    """Each method's mean microseconds per step by stage (and its share of the wall time), one
    line per method: where the time outside the forward goes."""
    names = [
        n for n in (*STAGES, "setup", "other") if any(n in (s.get("profile") or {}) for s in doc["methods"].values())
    ]
    head = ["us per step", *names, "outside forward"]
    rows = []
    for label, s in doc["methods"].items():
        prof = s.get("profile") or {}
        cells = [f"{prof[n]['us_per_step']:.0f} {prof[n]['share']:.0%}" if n in prof else "-" for n in names]
        outside = sum(v["share"] for n, v in prof.items() if n not in ("forward", "prefill"))
        rows.append([label, *cells, f"{outside:.1%}" if prof else "-"])
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def warmup_lines(doc: dict) -> list[str]:
    """What each method spent before its timed runs (compiles, first calls), apart from the
    decoding the table times, and the prompts flagged as stalls."""
    warm = doc["config"].get("warmup_s") or {}
    lines = []
    if warm:
        spent = ", ".join(f"{label} {s:.2f} s" for label, s in warm.items())
        lines.append(f"warm-up before the timed runs (compiles, first calls; not in the table): {spent}")
    for label, s in doc["methods"].items():
        if s.get("compile_s"):
            lines.append(f"{label}: {s['compile_s']:.2f} s of its timed runs went to compiling before a prefill")
        for pid in s.get("slow_prompts") or ():
            lines.append(f"!! slow: {label} on {pid}: over {SLOW:g}x its median seconds per token (a stall?)")
    return lines


def explain(doc: dict) -> list[str]:
    """Where each method's speed-up comes from: tokens per forward over the cost of a forward."""
    base = doc["methods"].get(doc["config"].get("baseline"))
    lines = []
    for label, s in doc["methods"].items():
        if base is None or s is base or None in (s["tokens_per_forward"], s["forward_cost"], s["speedup"]):
            continue
        ideal = s["tokens_per_forward"] / s["forward_cost"] if s["forward_cost"] else None
        lines.append(
            f"{label}: {s['tokens_per_forward']:.2f} tokens/forward / {s['forward_cost']:.2f} forward cost"
            f" = {_fmt(ideal, '.2f')}x from forwards; measured {s['speedup']:.2f}x"
            f" ({_fmt(s.get('decode_speedup'), '.2f')}x without the prefill)"
            f" (overhead {_fmt(s['overhead_share'], '.0%')} vs greedy {_fmt(base['overhead_share'], '.0%')})"
        )
    return lines


def mismatch_lines(doc: dict) -> list[str]:
    """One loud line per method whose output differs from the baseline's (sampling: then the
    verdict on each listed prompt, a rounding flip or likely a bug)."""
    lines = []
    for label, s in doc["methods"].items():
        if s["mismatches"]:
            firsts = [p for p in doc["prompts"] if p["method"] == label and p["first_mismatch"] is not None]
            where = ", ".join(f"{p['id']}@{p['first_mismatch']}{_gap(p)}" for p in firsts[:5])
            more = f" (+{len(firsts) - 5} more)" if len(firsts) > 5 else ""
            lines.append(
                f"MISMATCH: {label} differs from greedy on {s['mismatches']}/{s['prompts']} prompts: {where}{more}"
            )
            if s.get("ties") == s["mismatches"] and (doc["config"].get("sample") or {}).get("do_sample"):
                edge = s.get("boundary_flips") or 0
                lines.append(
                    f"  every one a rounding flip ({s['mismatches'] - edge} of the seeded race, {edge} at a "
                    "support boundary (top-k, top-p, min-p, typical-p, epsilon, eta)): within what "
                    f"{doc['config'].get('dtype', 'its dtype')} rounding "
                    "reaches, which any change of forward shapes may break"
                )
            elif s.get("ties") == s["mismatches"]:
                lines.append(
                    f"  every one at a rounding tie: greedy's two best logits there were less than "
                    f"{TIE_MARGIN:g} apart, which any change of forward shapes may break"
                )
            lines += [f"  {p['id']}@{p['first_mismatch']}: {p['flip']['reason']}" for p in firsts[:5] if p.get("flip")]
    return lines


def only_ties(doc: dict) -> bool:
    """Whether every mismatch in the document is a rounding tie (sampling: a rounding flip)."""
    return all(s.get("ties") == s["mismatches"] for s in doc["methods"].values() if s["mismatches"])


def _is_tie(record: Record) -> bool:
    """A mismatch that rounding explains: sampled, by the verdict; greedy, by the logit gap."""
    if record.flip is not None:
        return is_flip(record.flip)
    return record.tie_margin is not None and record.tie_margin < TIE_MARGIN


def _gap(prompt: dict) -> str:
    flip = prompt.get("flip")
    if flip is not None:
        return f" ({_flip_note(flip)})"
    margin = prompt.get("tie_margin")
    return "" if margin is None else f" (logit gap {margin:.1e})"


def _flip_note(flip: dict) -> str:
    """A few words for the MISMATCH line: which flip, or why it is likely a bug."""
    tol = f"{flip['tolerance']:.1e}"
    if flip["kind"] == "race":
        return f"race flip: gap {flip['race_gap']:.1e} <= {tol}"
    if flip["kind"] == "boundary":
        return f"{flip['edge']} boundary flip: token {flip['token']} {flip['edge_gap']:.1e} from its edge <= {tol}"
    if flip.get("shortfall") is None and flip.get("edge_gap") is None:
        return f"likely a bug: token {flip['token']} outside the support, where no rounding reaches"
    if flip.get("shortfall") is None:
        return f"likely a bug: token {flip['token']} {flip['edge_gap']:.1e} outside {flip['edge']} > {tol}"
    return f"likely a bug: token {flip['token']}'s race value {flip['shortfall']:.1e} short > {tol}"
