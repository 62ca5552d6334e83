"""The measurement loop: every variant on every prompt, interleaved, after a warm-up.

Variants run interleaved per prompt (A B C, A B C, ...) so that machine drift (thermal,
other jobs) hits all of them alike. Each prompt gets its own seed, the same for every variant.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm

from lookahead.bench import methods
from lookahead.bench.prompts import Prompt
from lookahead.checking.exactness import first_difference
from lookahead.checking.verdict import TIE_GAP, race_verdict

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
    # where this record first differs, the baseline's gap between its two best logits (greedy)
    # or between the two tokens' values in the seeded sampling race: a gap of a few float
    # rounding steps is a tie that any change of shapes may break
    tie_margin: float | None = None
    # sampling: lookahead.checking.verdict's verdict there (Verdict.as_dict): a rounding flip of the
    # race, one at a support boundary (top-k, top-p, min-p, typical-p, epsilon, eta), or a bug
    flip: dict | None = None
    checked: bool = True  # compared with the baseline (sampling: only seed-exact methods are)


def warm_up(
    model,
    input_ids: torch.Tensor,
    variants: list[Variant],
    skipped: dict[str, str],
    attention_mask: torch.Tensor | None = None,
) -> dict[str, float]:
    """Each method's real path, run short, twice: kernels, allocator and compiled code get ready
    (lookahead compiles every numba kernel its settings reach before its first prefill), and a
    kept pool or global tree already holds a request when the second run drafts from it.
    Returns each label's warm-up seconds; what a kept state learnt is forgotten afterwards.

    A method that cannot serve this model or request is noted in ``skipped`` (label -> reason).
    """
    seen: dict[tuple, str | None] = {}
    seconds: dict[str, float] = {}
    for variant in variants:
        key = (variant.method, tuple(sorted(variant.settings.config_fields.items())))
        if key not in seen:
            short = replace(
                variant.settings,
                max_new_tokens=min(WARMUP_TOKENS, variant.settings.max_new_tokens),
                attention_mask=attention_mask,
            )
            started = time.perf_counter()
            try:
                for _ in range(2):
                    methods.measure(variant.method, model, input_ids, short)
                seen[key] = None
            except methods.MethodUnavailable as err:
                seen[key] = str(err)
            seconds[variant.label] = time.perf_counter() - started
        if seen[key] is not None:
            skipped[variant.label] = seen[key]
    for variant in variants:
        variant.settings.state.clear()  # what the warm-up taught a kept pool is forgotten
    return seconds


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
    repeats: int = 1,
    batch_size: int = 1,
    warmup_s: dict[str, float] | None = None,
) -> tuple[list[Record], dict[str, str]]:
    """Measure every variant on every prompt; mark where each output first differs from the baseline's.

    With ``batch_size`` > 1 the prompts run ``batch_size`` at a time, left-padded, and a
    record covers a batch (its tokens are the rows' new tokens end to end).

    With ``repeats`` > 1 each prompt's round (A B C) runs that many times and each variant keeps
    its run of median wall time. Returns the records and the variants dropped because their
    method cannot run here (label -> reason); a dropped variant leaves no records. Each
    label's warm-up seconds go into ``warmup_s`` where given.
    """
    device = next(model.parameters()).device
    groups = batches(prompts, encoded, batch_size, variants[0].settings.pad_token_id if variants else None, device)
    skipped: dict[str, str] = {}
    if warmup and groups:
        seconds = warm_up(model, groups[0][1], variants, skipped, groups[0][2])
        if warmup_s is not None:
            warmup_s.update(seconds)
    records: list[Record] = []
    total = len(groups) * len(variants) * repeats
    with tqdm(total=total, desc="bench", unit="run", disable=not progress, file=sys.stderr) as bar:
        checked = {v.label for v in variants if not v.settings.do_sample or v.method in methods.SEED_EXACT}
        for i, (prompt_id, input_ids, mask) in enumerate(groups):
            runs = _round(model, prompt_id, input_ids, mask, variants, i, repeats, skipped, bar)
            row = [
                Record(prompt_id, label, input_ids.shape[1], _median_run(rs), checked=label in checked)
                for label, rs in runs.items()
            ]
            if check_exact and baseline is not None:
                _mark_mismatches(row, baseline, bar)
                base = next((v.settings for v in variants if v.label == baseline), None)
                _measure_ties(model, row, baseline, input_ids, mask, base, i)
            records.extend(row)
    return [r for r in records if r.label not in skipped], skipped


def batches(prompts: list[Prompt], encoded: list[list[int]], size: int, pad: int | None, device):
    """``[(id, input_ids [B, n], attention_mask or None)]``: the prompts ``size`` at a time,
    left-padded with ``pad`` (a batch of one has no mask, as before batching)."""
    groups = []
    for start in range(0, len(encoded), size):
        rows = encoded[start : start + size]
        ids = [p.id for p in prompts[start : start + size]]
        name = ids[0] if len(ids) == 1 else f"{ids[0]}+{len(ids) - 1}"
        if len(rows) == 1:
            groups.append((name, torch.tensor(rows, dtype=torch.long, device=device), None))
            continue
        width = max(len(r) for r in rows)
        fill = pad if pad is not None else 0
        input_ids = torch.tensor([[fill] * (width - len(r)) + r for r in rows], dtype=torch.long, device=device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long, device=device)
        groups.append((name, input_ids, mask))
    return groups


def _round(model, prompt_id, input_ids, mask, variants, index, repeats, skipped, bar) -> dict[str, list]:
    """Every variant on one prompt (or batch), ``repeats`` times over, interleaved."""
    runs: dict[str, list[methods.RunResult]] = {}
    for _ in range(repeats):
        for variant in variants:
            if variant.label not in skipped:
                bar.set_postfix_str(f"{prompt_id} {variant.label}", refresh=False)
                settings = replace(variant.settings, seed=variant.settings.seed + index, attention_mask=mask)
                try:
                    result = methods.measure(variant.method, model, input_ids, settings)
                    runs.setdefault(variant.label, []).append(result)
                except methods.MethodUnavailable as err:
                    skipped[variant.label] = str(err)
                    runs.pop(variant.label, None)
            bar.update(1)
    return runs


def _median_run(results: list[methods.RunResult]) -> methods.RunResult:
    """The run of median wall time (the lower middle one for an even count)."""
    ordered = sorted(results, key=lambda r: r.wall_s)
    return ordered[(len(ordered) - 1) // 2]


def _mark_mismatches(row: list[Record], baseline: str, bar) -> None:
    reference = next((r for r in row if r.label == baseline), None)
    if reference is None:
        return
    for record in row:
        if record is reference or not record.checked:
            continue
        record.first_mismatch = first_difference(record.result.tokens, reference.result.tokens)
        if record.first_mismatch is not None:
            bar.write(
                f"!! MISMATCH: {record.label} differs from {baseline} on {record.prompt_id} "
                f"at new token {record.first_mismatch}"
            )


TIE_MARGIN = TIE_GAP  # greedy logits closer than this are a rounding tie (fp32 steps are ~1e-6 here)
# (a sampled mismatch is judged by lookahead.checking.verdict's verdict, against its dtype's tolerance)


@torch.inference_mode()
def _measure_ties(
    model,
    row: list[Record],
    baseline: str,
    input_ids: torch.Tensor,
    mask,
    settings: methods.Settings | None = None,
    index: int = 0,
) -> None:
    """Set ``tie_margin`` of each mismatched record at its first differing token, from one
    forward of that row's prompt and baseline tokens: greedy's top-2 logit gap, or (sampling)
    the race gap between the two tokens under the round's seed, and ``flip``, the verdict on it
    (``lookahead.checking.verdict``)."""
    reference = next((r for r in row if r.label == baseline), None)
    for record in row:
        if record is reference or reference is None or record.first_mismatch is None:
            continue
        per_row = len(reference.result.tokens) // input_ids.shape[0]
        r, t = divmod(record.first_mismatch, per_row)
        if r >= input_ids.shape[0]:
            continue
        prompt = input_ids[r][mask[r].bool()] if mask is not None else input_ids[r]
        done = reference.result.tokens[r * per_row : r * per_row + t]
        prefix = torch.cat([prompt, prompt.new_tensor(done)])
        if settings is not None and settings.do_sample:
            at = record.first_mismatch
            if at >= min(len(record.result.tokens), len(reference.result.tokens)):
                continue  # one stopped where the other went on: no race to compare
            tokens = (reference.result.tokens[at], record.result.tokens[at])
            judged = race_verdict(
                model,
                prefix,
                tokens,
                settings.seed + index,
                t,
                rows=input_ids.shape[0],
                row=r,
                processors=settings.warpers(),
            )
            record.tie_margin, record.flip = judged.race_gap, judged.as_dict()
            continue
        top = model(input_ids=prefix[None]).logits[0, -1].float().topk(2).values
        record.tie_margin = float(top[0] - top[1])
