"""Where a seeded sample differs from ``model.generate``'s: a rounding flip of the race, or a bug.

Under one seed, lookahead's sampled tokens are ``generate``'s (``lookahead.verify.noise``), except
where fp32 rounding of a many-token forward moves a token across a near-tie of the exponential
race: at the first differing token, ``generate`` and lookahead both ran the race
``log p(x) - log q_x`` with the same ``q`` (block t of the seeded stream), so their two winners'
race values must be within rounding of each other. Anything wider is a bug.

``race_gap`` recomputes that position the plain way (one forward over the row's prompt and the
common prefix, the processors, the replayed noise) and returns the gap between the two tokens'
race values; ``TIE_GAP`` is where a gap stops being rounding.
"""

from __future__ import annotations

import torch

# fp32 logits of a many-token forward differ from a one-token forward's by ~1e-6 (REFERENCE.md);
# a race gap under 1e-4 (nats) is within that rounding, as the greedy benchmarks' logit ties are
TIE_GAP = 1e-4


def warpers(temperature: float = 1.0, top_p: float = 1.0):
    """The processors ``generate`` builds for ``temperature`` and ``top_p`` (none at 1.0):
    the distribution a sampled token is drawn from."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    processors = LogitsProcessorList()
    if temperature != 1.0:
        processors.append(TemperatureLogitsWarper(temperature))
    if top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    return processors


def replay_noise(seed: int, step: int, rows: int, row: int, vocab: int, device="cpu") -> torch.Tensor:
    """Row ``row`` of block ``step`` of ``generate``'s noise after ``torch.manual_seed(seed)``,
    for a batch of ``rows`` (``[V]`` float32): the ``q`` its step ``step`` divided by."""
    generator = torch.Generator(device=device).manual_seed(seed)
    block = torch.empty((rows, vocab), dtype=torch.float32, device=device)
    for _ in range(step + 1):
        block.exponential_(generator=generator)
    return block[row]


def race(scores: torch.Tensor, seed: int, step: int, rows: int = 1, row: int = 0) -> torch.Tensor:
    """The race values ``log p(x) - log q_x`` (``[V]``) of processed ``scores`` (``[V]``) at the
    new token ``step`` of row ``row`` of a batch of ``rows`` under ``torch.manual_seed(seed)``:
    the token sampled there is their argmax."""
    logp = torch.log_softmax(scores.float(), dim=-1)
    return logp - replay_noise(seed, step, rows, row, logp.shape[-1], logp.device).log()


def gap(values: torch.Tensor, tokens: tuple[int, int]) -> float:
    """``|values[a] - values[b]|``; ``inf`` when either is outside the support (no rounding reaches it)."""
    a, b = (values[t] for t in tokens)
    if not (torch.isfinite(a) and torch.isfinite(b)):
        return float("inf")
    return float((a - b).abs())


@torch.inference_mode()
def race_gap(
    model,
    prefix: torch.Tensor,
    tokens: tuple[int, int],
    seed: int,
    step: int,
    rows: int = 1,
    row: int = 0,
    processors=None,
) -> float:
    """``|race(a) - race(b)|`` at the position after ``prefix`` for ``tokens = (a, b)``, recomputed
    the plain way (one forward over ``prefix``).

    Args:
        prefix: the row's real tokens (no padding) and the tokens both outputs share, ``[n]``.
        seed, step, rows, row: the seed both ran under, the new token's index, the batch size
            and the row's slot in it (what fixes its noise).
        processors: the processed distribution's ``LogitsProcessorList`` (temperature, top-p,
            ...), or ``None`` for the raw softmax.
    """
    ids = prefix[None].to(model.device)
    scores = model(input_ids=ids).logits[:, -1].float()
    if processors:
        scores = processors(ids, scores)
    return gap(race(scores[0], seed, step, rows, row), tokens)
