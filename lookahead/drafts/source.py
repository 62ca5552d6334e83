"""The one interface every guess source fits: propose candidates for this step, learn from it.

A source proposes continuations of the text's end. Most propose *rows* (int64 ``[r, d]``,
-1 ends a shorter row), one array per *bin* the draft budget learns their chances in; a
source with its own scores (the copy drafter) proposes a *scored tree* instead, which the
budget calibrates (``budget.DraftBudget.plan``). After the step every source learns from
what it accepted. Adding a source is one class and one line in the list that
``lookahead.step.proposer.Proposer`` builds: the budget prices every source's nodes alike.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np


class Context(NamedTuple):
    """What a source reads to propose: the text so far (int64 ``[n]``, n >= 2: a step
    follows the prefill), and under seeded sampling the known noise of the next tokens
    (float32 ``[m, V]``, else None) and the temperature the race divides logits by."""

    text: np.ndarray
    noise: np.ndarray | None = None
    temperature: float = 1.0


class Outcome(NamedTuple):
    """What a step did, for the sources to learn from.

    Attributes:
        text: the text after the step (int64 ``[n]``); its last ``accepted`` tokens are new.
        accepted: tokens the step appended (>= 1).
        tree: the step's guess tree (``lookahead.verify.tree.GuessTree``).
        path: the tree's nodes the walk accepted, root first.
        picks: ``picks(nodes)``, the tokens the rule would emit at a branch of the tree read
            as the tokens after the new root (greedy: the argmaxes; sampled: the races with
            those positions' known noise).
        rank: ``rank(node, tokens)``, the indices of ``node``'s children's ``tokens``,
            likeliest first by the step's scores; None where the scores are not at hand.
    """

    text: np.ndarray
    accepted: int
    tree: object
    path: list[int]
    picks: object
    rank: object = None


class Source(Protocol):
    """A guess source. ``bins``: ``(name, prior chance of a row's first token, of its later
    ones)`` per array :meth:`propose` returns, in that order (empty for a scored tree)."""

    name: str
    bins: tuple[tuple[str, float, float], ...]
    scored: bool

    def propose(self, context: Context):
        """Rows per bin (a list of int64 ``[r, d]``), or a scored tree (``scored`` sources)."""

    def learn(self, outcome: Outcome) -> None:
        """Learn from a step's outcome."""
