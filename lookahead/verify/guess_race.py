"""A cheap race for guesses: which token seeded sampling will emit at a future position.

A guess only has to be likely: the step that feeds it verifies it with the exact race
(``SamplingRule.__call__``), so what is guessed never changes the output. The exact race runs
``generate``'s processors over the whole vocabulary, and top-p's sort of it costs half a
millisecond a row on a CPU; a step's free Jacobi iteration races several rows. This race
runs on each row's ``TOP`` highest scores instead, with the warpers ``generate`` builds for
sampling re-stated over that slice:

    scores / temperature           the whole row (cheap), then its TOP highest, sorted
    top-k (k <= TOP)               the slice's first k; the rest of the row is out
    top-p                          a token stays while the mass above it is < top_p
    min-p                          a token stays while p >= min_p * p_top

The winner is ``argmax(p / q)`` over what stays in the slice, ``q`` being the position's
noise. It is the exact race's winner whenever the support lies within the slice, as it does
under a top-k of at most ``TOP`` (``generate``'s default top_k is 50); where top-p or
min-p leave tokens beyond it, those few are not raced. Any other processor (a repetition
penalty, a bias, a custom one) is not re-stated: :func:`race_guesses` answers None and the
caller runs the exact race.
"""

from __future__ import annotations

import torch

TOP = 64  # tokens per row the guess's race runs over
_SUPPORTED = ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper")


def supported(processors) -> bool:
    """Whether every one of ``processors`` is a warper this race re-states."""
    return all(type(p).__name__ in _SUPPORTED for p in processors or ())


def temperature(processors) -> float:
    """The temperature ``processors`` divide the scores by (1 without a temperature warper)."""
    t = 1.0
    for p in processors or ():
        if type(p).__name__ == "TemperatureLogitsWarper":
            t *= p.temperature
    return t


def race_guesses(raw: torch.Tensor, processors, noise: list[torch.Tensor | None]) -> list[int] | None:
    """The token each row's race would emit, or None where ``processors`` are not all
    re-stated here (see the module docstring).

    Args:
        raw: logits ``[k, V]`` (any float dtype), one row per guessed position.
        processors: ``generate``'s logits processors for sampling, in order.
        noise: per row its position's ``Exp(1)`` noise ``[1, V]``, or None (then the row's
            likeliest token is the guess, as beyond the noise stream's lead).
    """
    if not supported(processors):
        return None
    t = temperature(processors)
    top = min(TOP, raw.shape[-1])
    # dividing by the temperature keeps the order: slice first, then scale the slice alone
    values, index = raw.topk(top, dim=-1)  # sorted, highest first
    values = values.float() / t
    alive = torch.ones_like(values, dtype=torch.bool)
    tail = top < raw.shape[-1]  # whether tokens beyond the slice are still in the support
    for p in processors or ():
        name = type(p).__name__
        if name == "TopKLogitsWarper":
            alive[:, p.top_k :] = False
            tail = tail and p.top_k > top
        elif name == "TopPLogitsWarper":
            # the row's normalizer while its tail is in, else the slice's
            norm = torch.logsumexp(raw.float() / t, dim=-1, keepdim=True) if tail else _masked_lse(values, alive)
            probs = torch.where(alive, (values - norm).exp(), 0.0)
            above = probs.cumsum(-1) - probs
            keep = above < p.top_p
            keep[:, : p.min_tokens_to_keep] = True
            alive &= keep
            tail = tail and bool((probs.sum(-1) < p.top_p).any())
        elif name == "MinPLogitsWarper":
            keep = (values - values[:, :1]).exp() >= p.min_p
            keep[:, : p.min_tokens_to_keep] = True
            alive &= keep
            tail = tail and bool(keep[:, -1].any())
    ratio = torch.where(alive, (values - values[:, :1]).exp(), -1.0)
    if any(q is not None for q in noise):
        ones = torch.ones((1, raw.shape[-1]), dtype=torch.float32, device=raw.device)
        q = torch.cat([ones if q is None else q for q in noise])
        ratio = ratio / q.gather(1, index)  # a None row races against no noise: its argmax
    return index.gather(1, ratio.argmax(-1, keepdim=True))[:, 0].tolist()


def _masked_lse(values: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
    """The logsumexp of each row's ``values`` where ``alive`` (``[k, 1]``)."""
    return torch.logsumexp(torch.where(alive, values, -torch.inf), dim=-1, keepdim=True)
