"""The one interface every guess source fits: propose candidates for this step, learn from it.

A source proposes continuations of the text's end. Most propose *rows* (int64 ``[r, d]``,
-1 ends a shorter row), one array per *bin* the draft budget learns their chances in; a
*scored* source (the copy drafter) proposes a tree whose nodes carry their own probabilities,
which the budget calibrates (``budget.DraftBudget``). After the step every source learns from
its outcome. Adding a source is one class and one line in the list that
``lookahead.drafts.planner.Planner`` builds: the budget prices every source's nodes alike.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np


class Bin(NamedTuple):
    """One array of rows a source proposes, as the budget learns it: its source's ``name`` and
    the prior chances of a row's first token and of its later ones. ``free``: its rows are a
    fed step's free Jacobi iterations, so any fed node buys the next step one (the budget
    counts that: ``DraftBudget.window_worth``)."""

    name: str
    first: float
    later: float
    free: bool = False


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
        tree: the step's guess tree (``lookahead.verify.tree.GuessTree``; None where the
            step's tree is not at hand, as inside vLLM).
        path: the tree's nodes the walk accepted, root first.
        picks: the tokens the rule would emit at a branch of the tree read as the tokens
            after the new root: greedy, the step's argmaxes (int64 ``[q]``, by node); sampled,
            ``picks(nodes)``, the races with those positions' known noise.
        scores_at: ``scores_at(node)``, the step's scores at ``node`` (float32 ``[V]``), by
            which its children rank; None where the scores are not at hand.
        fed: the tokens the step fed (int64 ``[q]``), and ``top``/``scores`` the k likeliest
            next tokens the model predicted after each (int64 / float32 ``[q, k]``, best
            first), where the step fetched them (``Source.top_k``); else None.
    """

    text: np.ndarray
    accepted: int
    tree: object = None
    path: list[int] | None = None
    picks: object = None
    scores_at: object = None
    fed: np.ndarray | None = None
    top: np.ndarray | None = None
    scores: np.ndarray | None = None


class Source(Protocol):
    """A guess source.

    Attributes:
        name: what its accepted tokens are credited to.
        bins: one :class:`Bin` per array :meth:`propose` returns, in that order (empty for a
            scored source).
        scored: whether it proposes one scored tree ``(tokens, parents, probs, match)``
            instead of rows (``drafts.CopyDrafter.tree``).
        top_k: how many of the model's likeliest next tokens after each fed token it learns
            from (``Outcome.top``; 0: none).
        reads_noise: whether it reads ``Context.noise`` (peeked only where one does).
    """

    name: str
    bins: tuple[Bin, ...]
    scored: bool
    top_k: int
    reads_noise: bool

    def propose(self, context: Context):
        """Rows per bin (a list of int64 ``[r, d]``), or a scored tree (``scored`` sources)."""

    def learn(self, outcome: Outcome) -> None:
        """Learn from a step's outcome."""
