"""``lookahead sweep``: lookahead over a window x ngram x guesses grid, against greedy on the same prompts."""

from __future__ import annotations

import itertools
from dataclasses import replace

from lookahead.bench import methods
from lookahead.bench.runner import Variant

DEFAULT_WINDOWS = (1, 2, 4, 8)
DEFAULT_NGRAMS = (3, 4, 5)
DEFAULT_GUESSES = (2, 4, 8)


def parse_grid(text: str | None, default: tuple[int, ...], name: str) -> tuple[int, ...]:
    """``"2,4,8"`` -> ``(2, 4, 8)``; also accepts ranges ``"2-5"``."""
    if text is None:
        return default
    values = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            values.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
        except ValueError:
            raise ValueError(f"--{name} takes comma-separated integers or ranges, got {text!r}") from None
    if not values:
        raise ValueError(f"--{name} is empty")
    return tuple(dict.fromkeys(values))


def label(window: int, ngram: int, guesses: int) -> str:
    return f"w{window}-n{ngram}-g{guesses}"


def grid_variants(base: methods.Settings, windows, ngrams, guesses, method: str = "lookahead") -> list[Variant]:
    """Greedy (the baseline) first, then one lookahead variant per valid grid point."""
    variants = [Variant(methods.BASELINE, methods.BASELINE, base)]
    for w, n, g in itertools.product(windows, ngrams, guesses):
        fields = {**base.config_fields, "window": w, "ngram": n, "guesses": g}
        settings = replace(base, config_fields=fields, state={})
        try:
            settings.lookahead_config(method)
        except (TypeError, ValueError):
            continue  # e.g. a shape the engine's config refuses
        variants.append(Variant(label(w, n, g), method, settings))
    return variants


def cells(doc: dict, variants: list[Variant]) -> list[dict]:
    """One row per grid point: its shape and its summary numbers."""
    out = []
    for variant in variants:
        if variant.label == methods.BASELINE:
            continue
        summary = doc["methods"][variant.label]
        shape = {k: variant.settings.config_fields[k] for k in ("window", "ngram", "guesses")}
        out.append({**shape, "label": variant.label, **summary})
    return out


def best(grid: list[dict]) -> dict | None:
    """The fastest exact grid point (any point, if none is exact)."""
    exact = [c for c in grid if not c.get("mismatches")]
    pool = [c for c in (exact or grid) if c.get("speedup") is not None]
    return max(pool, key=lambda c: c["speedup"], default=None)


def ranking(grid: list[dict], top: int = 10) -> str:
    rows = sorted(grid, key=lambda c: c.get("speedup") or 0.0, reverse=True)[:top]
    lines = [f"{'shape':<14} {'speedup':>8} {'median':>7} {'tok/fwd':>8} {'overhead':>9} {'exact':>6}"]
    for c in rows:
        exact = "n/a" if c["mismatches"] is None else ("yes" if c["mismatches"] == 0 else f"NO {c['mismatches']}")
        lines.append(
            f"{c['label']:<14} {_num(c['speedup'], '.2f'):>8} {_num(c['median_speedup'], '.2f'):>7} "
            f"{_num(c['tokens_per_forward'], '.2f'):>8} {_num(c['overhead_share'], '.0%'):>9} {exact:>6}"
        )
    return "\n".join(lines)


def _num(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)
