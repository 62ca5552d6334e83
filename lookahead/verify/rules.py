"""Verification: which guessed tokens the model itself would have produced.

A walk starts at the root (the last accepted token). At each node a *rule* picks the token
the model emits there, exactly as plain decoding would at that prefix; if a child of the node
carries that token, the walk moves on to it, else it stops. Every node on the walk yields one
token, so a walk over k matching guesses appends k + 1 tokens (the last one is free).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np
import torch

from lookahead.sampling.noise import NoiseStream
from lookahead.sampling.rule import Pick, Processes, SamplingRule
from lookahead.verify.tree import GuessTree


class Rule(Protocol):
    """What a walk follows: the model's own choice at each node of a step's tree.

    Attributes:
        ceiling: the chance that a guess of the likeliest token holds: 1 for greedy, under
            seeded sampling a running estimate; the draft budget scales its priors by it.
        sampled: whether it samples (what it learnt is kept apart from greedy's).
        picks_are_preds: whether every pick is the node's argmax as fetched to the host (no
            processors, no rows reported): then the walk needs no call of the rule.
        temperature: what a guess's race divides logits by (1 for greedy).
    """

    ceiling: float
    sampled: bool
    picks_are_preds: bool
    temperature: float

    def start(self, logits: torch.Tensor, preds: list[int] | None = None) -> None:
        """A step's logits ``[q, V]`` (or the prefill's ``[1, V]``), and their host argmax."""

    def __call__(self, node: int, sequence: torch.Tensor, children: list[int]) -> Pick:
        """The token emitted at ``node`` after ``sequence`` (the exact prefix), and its rows."""

    def report(self, node: int, sequence: torch.Tensor) -> Pick:
        """The rows ``generate`` reports at ``node``, emitting nothing."""

    def noise_ahead(self, n: int) -> torch.Tensor | None:
        """The known noise of the next ``n`` emitted tokens (None: greedy, or none known)."""

    def picker(self, preds: np.ndarray, logits: torch.Tensor | None, sequence_fn) -> np.ndarray | Callable:
        """The tokens this rule would emit at a branch of the step's tree read as the tokens
        after the step's new root (the free Jacobi iteration): an int64 array ``[q]`` by node
        where they are the step's host argmaxes ``preds`` ``[q]``, else ``picks(nodes)`` for a
        branch's nodes; ``sequence_fn()`` is the sequence."""

    def release(self) -> None:
        """This rule emits no more tokens."""


class GreedyRule(Processes):
    """Argmax of the processed logits, the processors seeing that node's exact prefix.

    Without processors all argmaxes are taken in one call per step.
    """

    ceiling = 1.0  # a guess of the token this rule picks always holds: the priors stand
    sampled = False
    temperature = 1.0

    def __init__(self, processors, keep_rows: bool):
        self.processors = processors
        self.keep_rows = keep_rows or bool(processors)
        self._preds: list[int] | None = None
        self._logits: torch.Tensor | None = None

    @property
    def picks_are_preds(self) -> bool:
        return not self.keep_rows

    def start(self, logits: torch.Tensor, preds: list[int] | None = None) -> None:
        self._logits = logits
        if self.keep_rows:
            self._preds = None
        else:
            self._preds = preds if preds is not None else logits.argmax(-1).tolist()

    def __call__(self, node: int, sequence: torch.Tensor, children: list[int]) -> Pick:
        if self._preds is not None:
            # no processors: the raw row is what stopping criteria would see as scores
            return Pick(self._preds[node], self._logits[node : node + 1], None)
        raw = self._logits[node : node + 1].float()
        scores = self._process(sequence, raw.clone()) if self.processors else raw
        return Pick(int(scores.argmax(-1)), raw, scores)

    def report(self, node: int, sequence: torch.Tensor) -> Pick:
        """The pick at ``node`` (greedy draws nothing, so reporting is picking)."""
        return self(node, sequence, [])

    def noise_ahead(self, n: int) -> None:
        return None

    def picker(self, preds: np.ndarray, logits: torch.Tensor | None, sequence_fn) -> np.ndarray:
        """The fetched argmaxes (processors are not re-run for a guess: it is verified)."""
        return preds

    def release(self) -> None:
        """Nothing to free: greedy keeps no per-row state."""


def walk(tree: GuessTree | None, rule: Rule, sequence_fn) -> Iterator[tuple[int, Pick]]:
    """Yield ``(node, pick)`` along the accepted path; ``sequence_fn()`` is the current sequence.

    The caller appends each pick's token before asking for the next one, so every rule call
    sees the exact prefix plain decoding would have had at that position.
    """
    kids = tree.children() if tree is not None else {}
    options: dict[int, list[int]] = {}
    for parent, token in kids:
        options.setdefault(parent, []).append(token)
    node = 0
    while True:
        pick = rule(node, sequence_fn(), options.get(node, []))
        yield node, pick
        child = kids.get((node, pick.token))
        if child is None:
            return
        node = child


def rule_for(generation_config, processors, generator: torch.Generator | None, rows: int, keep_rows: bool) -> Rule:
    """The rule ``generate``'s config asks for: seeded sampling that draws one noise block per
    step for every row, as ``generate`` draws them, or greedy (keeping each row's processed
    scores when the output asks for scores or logits)."""
    if generation_config.do_sample:
        return SamplingRule(processors, generator, NoiseStream(rows, generator))
    return GreedyRule(processors, keep_rows=keep_rows)
