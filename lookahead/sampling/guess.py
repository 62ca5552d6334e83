"""Guesses of the seeded sample: which token each future position's race will emit.

Under seeded sampling the noise of every future position is known before the model sees it
(``sampling.noise.NoiseStream.peek``), so wherever a step computed logits for a position, the
token the race will emit there can be guessed: the race run now, on those logits. A guess
only has to be likely: the step that feeds it verifies it with the exact race
(``SamplingRule.__call__``, ``generate``'s processors over the whole vocabulary), so what is
guessed never changes the output.

The exact race runs ``generate``'s processors over the whole vocabulary, a dozen torch
operations a row (0.1-0.4 ms on a CPU, more right after a forward), and a step's free Jacobi
iteration races several rows. :class:`NoiseRace` races each row's ``TOP`` highest tokens
instead, in one kernel over host rows, with the warpers ``generate`` builds for sampling
re-stated over that slice::

    scores / temperature    the slice (dividing keeps the order)
    top-k (k <= TOP)        the slice's first k; the rest of the row is out
    top-p                   a token stays while the mass above it is < top_p
    min-p                   a token stays while p >= min_p * p_top

Where the support reaches past the slice (no top-k, or one above ``TOP``), a token past it
wins only with noise small enough to beat the slice's best, so one pass over the noise row
finds the few that may, and each is checked against the filters
(``guess_kernels._tail_winner``): the pick is the exact race's winner up to float rounding.
That matters: at T=1 with no top-k a quarter of the embedded model's samples lie past its
64 likeliest tokens. Other processors (a repetition penalty, a bias, a custom one) are not
re-stated: :meth:`NoiseRace.of` gives None and the rule races the exact scores
(``SamplingRule.guesses``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lookahead.sampling import guess_kernels
from lookahead.sampling.warpers import temperature

_ORDER = ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper")
_NO_NOISE = np.zeros((0, 1), dtype=np.float32)


@dataclass(frozen=True)
class NoiseRace:
    """The warpers' settings the race re-states (see the module docstring)."""

    inv_temp: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    keep_p: int = 1
    min_p: float = 0.0
    keep_min_p: int = 1

    @staticmethod
    def of(processors) -> NoiseRace | None:
        """The race for ``processors`` (``generate``'s sampling warpers, each at most once, in
        the order ``generate`` builds them), or None for any other list."""
        names = [type(p).__name__ for p in processors or ()]
        if any(name not in _ORDER for name in names) or names != sorted(set(names), key=_ORDER.index):
            return None  # another processor, one out of order, or one twice
        found = {type(p).__name__: p for p in processors or ()}
        top_k, top_p, min_p = (found.get(name) for name in _ORDER[1:])
        return NoiseRace(
            inv_temp=1.0 / temperature(processors),
            top_k=top_k.top_k if top_k is not None else 0,
            top_p=top_p.top_p if top_p is not None else 1.0,
            keep_p=top_p.min_tokens_to_keep if top_p is not None else 1,
            min_p=min_p.min_p if min_p is not None else 0.0,
            keep_min_p=min_p.min_tokens_to_keep if min_p is not None else 1,
        )

    def picks(self, logits: torch.Tensor, nodes: list[int], noise: torch.Tensor | None) -> np.ndarray:
        """int64 ``[len(nodes)]``: the race's winner after each of ``nodes`` (rows of a step's
        ``logits`` ``[q, V]``), the i-th raced with ``noise`` row i (float32 ``[m, V]`` on the
        host, or None: the likeliest tokens)."""
        if logits.device.type == "cpu" and logits.dtype == torch.float32:
            values, rows = logits.detach().numpy(), np.asarray(nodes, dtype=np.int64)  # a view: no copy
        else:  # numpy has no bfloat16; float32 holds every half value exactly
            values, rows = logits[nodes].detach().float().cpu().numpy(), np.arange(len(nodes), dtype=np.int64)
        out = np.empty(len(nodes), dtype=np.int64)
        guess_kernels.race_top(
            values,
            rows,
            _NO_NOISE if noise is None else noise.numpy(),
            self.inv_temp,
            self.top_k,
            self.top_p,
            self.keep_p,
            self.min_p,
            self.keep_min_p,
            out,
        )
        return out
