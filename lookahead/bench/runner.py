"""The measurement loop: every variant on every prompt, interleaved, after a warm-up.

Variants run interleaved per prompt (A B C, A B C, ...) so that machine drift (thermal,
other jobs) hits all of them alike. Each prompt gets its own seed, the same for every variant.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm

from lookahead.bench import methods
from lookahead.bench.prompts import Prompt

WARMUP_TOKENS = 16


@dataclass(frozen=True)
class Variant:
    """One column of the comparison: a label, the method it runs, and its settings."""

    label: str
    method: str
    settings: methods.Settings


@dataclass
class Record:
    """One variant on one prompt."""

    prompt_id: str
    label: str
    prompt_tokens: int
    result: methods.RunResult
    first_mismatch: int | None = None


def warm_up(model, input_ids: torch.Tensor, variants: list[Variant]) -> None:
    """One short run of each method: kernels, allocator and JIT-compiled code get ready."""
    seen = set()
    for variant in variants:
        key = (variant.method, tuple(sorted(variant.settings.shape.items())))
        if key in seen:
            continue
        seen.add(key)
        short = replace(variant.settings, max_new_tokens=min(WARMUP_TOKENS, variant.settings.max_new_tokens))
        methods.measure(variant.method, model, input_ids, short)


def run(
    model,
    prompts: list[Prompt],
    encoded: list[list[int]],
    variants: list[Variant],
    *,
    baseline: str | None = methods.BASELINE,
    check_exact: bool = True,
    warmup: bool = True,
    progress: bool = True,
) -> list[Record]:
    """Measure every variant on every prompt; mark where each output first differs from the baseline's."""
    device = next(model.parameters()).device
    tensors = [torch.tensor([ids], dtype=torch.long, device=device) for ids in encoded]
    if warmup and tensors:
        warm_up(model, tensors[0], variants)
    records = []
    bar = tqdm(total=len(prompts) * len(variants), desc="bench", unit="run", disable=not progress, file=sys.stderr)
    for i, (prompt, input_ids) in enumerate(zip(prompts, tensors)):
        row = []
        for variant in variants:
            bar.set_postfix_str(f"{prompt.id} {variant.label}", refresh=False)
            settings = replace(variant.settings, seed=variant.settings.seed + i)
            result = methods.measure(variant.method, model, input_ids, settings)
            row.append(Record(prompt.id, variant.label, input_ids.shape[1], result))
            bar.update(1)
        if check_exact and baseline is not None:
            _mark_mismatches(row, baseline, bar)
        records.extend(row)
    bar.close()
    return records


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first new token where ``a`` and ``b`` differ (a length difference counts)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _mark_mismatches(row: list[Record], baseline: str, bar) -> None:
    reference = next((r for r in row if r.label == baseline), None)
    if reference is None:
        return
    for record in row:
        if record is reference:
            continue
        record.first_mismatch = first_difference(record.result.tokens, reference.result.tokens)
        if record.first_mismatch is not None:
            bar.write(
                f"!! MISMATCH: {record.label} differs from {baseline} on {record.prompt_id} "
                f"at new token {record.first_mismatch}"
            )
