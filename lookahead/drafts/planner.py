"""One row's planning: its guess sources, and the draft budget that chooses among them.

Each step :meth:`Planner.plan` asks every source for its candidates (``drafts.source``) and
lets the budget keep the nodes that pay for their forward, possibly none; after the step
:meth:`Planner.learn` lets every source and the budget learn from its outcome. Nothing here
imports torch: the decode loop's rows (``lookahead.step.proposer``) and vLLM's proposer
(``lookahead.vllm``) plan alike.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lookahead.drafts.budget import DraftBudget
from lookahead.drafts.copy_drafter import CopyDrafter
from lookahead.drafts.jacobi import WindowSource
from lookahead.drafts.kept import KeptState
from lookahead.drafts.pool import PoolSource
from lookahead.drafts.source import Context, Outcome
from lookahead.drafts.successors import SuccessorSource
from lookahead.drafts.suffix import SuffixIndex


def sources_for(config, kept: KeptState, stats, vocab: int, index: SuffixIndex | None = None) -> list:
    """The sources ``config`` (a ``LookaheadConfig``) asks for, kept in ``kept``, in bin
    order: the window first (a node it shares with another source learns, and is credited,
    as its), the pool, the successors, then the scored copy guess (drafting from this text,
    ``kept``'s history and the corpus ``index``)."""
    pool = (
        kept.ngrams(config.ngram, config.guesses, config.pool_capacity, config.context_tokens)
        if config.uses_pool
        else None
    )
    sources: list = []
    if config.window and config.method == "lookahead":
        sources.append(WindowSource(config.ngram - 1, config.window, pool))
    if pool is not None:
        sources.append(PoolSource(pool, stats, config.prompt_ngrams))
    if config.uses_successors:
        sources.append(SuccessorSource(kept.successor_table(vocab, config.successors, config.ngram - 1)))
    if config.uses_copy:
        sources.append(
            CopyDrafter(config.copy_length, config.copy_match, config.copy_min_prob, kept.history.indexes, index)
        )
    return sources


class Planner:
    """A row's sources and the budget over them.

    Args:
        sources: the row's sources (:func:`sources_for`), in bin order.
        max_nodes, depth: the most nodes a step feeds and the longest row.
        costs, overhead: what a forward over k tokens costs (a callable) and the decoder's own
            work per guessing step, both in one-token forwards.
        kept: where the budget starts from what earlier requests learnt, and leaves its own
            (per rule kind and bins).
        sampled: whether the rule samples (its chances are learnt apart from greedy's).
        chain: feed a prefix of the likeliest chain only, for a verifier of one chain (vLLM).
    """

    def __init__(
        self,
        sources: list,
        max_nodes: int,
        depth: int,
        costs: Callable[[int], float],
        overhead: float,
        kept: KeptState | None = None,
        sampled: bool = False,
        chain: bool = False,
    ):
        self.sources = sources
        bins = tuple(b for source in sources for b in source.bins)
        scored = tuple(source.name for source in sources if source.scored)
        self.budget = DraftBudget(max_nodes, costs, overhead, bins, depth, scored, chain=chain)
        if kept is not None:
            self.budget.carry(kept.budgets, (sampled, *self.budget.key))

    def plan(self, context: Context, ceiling: float = 1.0, fill: int = 0) -> tuple[np.ndarray, tuple[str, ...]]:
        """The step's draft rows (int64 ``[r, d]``, -1 padded; ``[0, 0]`` for none) and each
        row's source, priced with priors scaled by the rule's ``ceiling``; at least ``fill``
        nodes where there are as many."""
        self.budget.scale_priors(ceiling)
        trees, rows, first = [], [], 0
        for source in self.sources:
            found = source.propose(context)
            if source.scored:
                trees.append(found)
                continue
            rows += [(first + i, part) for i, part in enumerate(found) if part.size]
            first += len(source.bins)
        return self.budget.plan(trees, rows, fill)

    def refill(self, fill: int) -> tuple[np.ndarray, tuple[str, ...]]:
        """The last plan again with at least ``fill`` nodes (``DraftBudget.refill``)."""
        return self.budget.refill(fill)

    def price(self, costs: Callable[[int], float], overhead: float) -> None:
        """Weigh later steps against other costs (``DraftBudget.price``)."""
        self.budget.price(costs, overhead)

    def learn(self, outcome: Outcome) -> None:
        """Every source learns from the step, then the budget counts the nodes it fed."""
        for source in self.sources:
            source.learn(outcome)
        self.budget.learn(outcome.text[-outcome.accepted :])
