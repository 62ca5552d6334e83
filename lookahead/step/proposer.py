"""One row of a decode: its planner, its rule, the walk down its tree, and what it counts.

Each step :meth:`Proposer.plan` asks the row's planner (its sources and the draft budget,
``lookahead.drafts.planner``) for the nodes that pay for their forward, possibly none (then
the step is plain decoding), and merges them into the step's guess tree; after the forward
:meth:`Proposer.verify` walks that tree with the row's rule, appending the model's own
choices, counts the step and lets the planner learn. The published fixed shape, with the
window's levels fed every step and no budget, is ``lookahead.classic.ClassicProposer``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from lookahead.config import LookaheadConfig
from lookahead.drafts.kept import KeptState
from lookahead.drafts.planner import Planner, sources_for
from lookahead.drafts.pool import file_new
from lookahead.drafts.source import Context, Outcome
from lookahead.drafts.suffix import SuffixIndex
from lookahead.stats import LookaheadStats
from lookahead.step.costmodel import CostCurve
from lookahead.step.sequence import TokenSequence
from lookahead.verify.rules import Rule, walk
from lookahead.verify.tree import ROOT_ONLY, GuessTree

ROOT_LAYOUT = (np.zeros(1, dtype=np.int64), np.ones((1, 1), dtype=np.bool_))  # the root alone


class Plan(NamedTuple):
    """One row's step: its guess tree, the tokens it feeds (``[root | draft]``, and after the
    draft whatever a fixed shape adds that the walk does not visit), the guess rows merged
    into the tree (int64 ``[r, d]`` or None) and each row's source, and the layout of every
    fed token: offsets from the root (int64 ``[q]``) and attention (bool ``[q, q]``)."""

    tree: GuessTree
    tokens: list[int]
    rows: np.ndarray | None
    origins: tuple[str, ...]
    layout: tuple[np.ndarray, np.ndarray]

    def source_of(self, held: list[int]) -> str:
        """The source whose row matched the most of ``held`` (the guessed tokens the step
        accepted), the first row's among the longest."""
        best, best_len = "", 0
        for name, row in zip(self.origins, self.rows if self.rows is not None else ()):
            n = _common(row, held)
            if n > best_len:
                best, best_len = name, n
        return best


def _common(row, held: list[int]) -> int:
    """Length of the common prefix of a guess row and ``held``."""
    n = 0
    while n < len(held) and n < len(row) and int(row[n]) == held[n]:
        n += 1
    return n


def plain_plan(root: int) -> Plan:
    """The plan of a step that feeds its ``root`` alone."""
    return Plan(ROOT_ONLY, [root], None, (), ROOT_LAYOUT)


class Proposer:
    """One row's planner, rule and walk.

    Args:
        config: the decoder's configuration (which sources, their sizes).
        rule: the greedy or sampling rule the row's tree is walked with.
        stats: the stats its steps are counted in.
        kept: what earlier requests taught (a batch's rows share one).
        costs, overhead: the cost curve and per-step overhead (one-token forwards) the draft
            budget weighs every step's nodes against.
        index: a corpus the copy guess also drafts from.
    """

    def __init__(
        self,
        config: LookaheadConfig,
        rule: Rule,
        stats: LookaheadStats,
        kept: KeptState,
        costs: CostCurve | None = None,
        overhead: float = 0.0,
        index: SuffixIndex | None = None,
    ):
        self.config, self.rule, self.stats, self.kept = config, rule, stats, kept
        self.costs, self.overhead, self.index = costs, overhead, index
        self.sources: list = []
        self.planner: Planner | None = None

    @property
    def top_k(self) -> int:
        """How many of each fed token's likeliest successors the sources learn from."""
        return max((source.top_k for source in self.sources), default=0)

    def start(self, seq: TokenSequence, logits: torch.Tensor, prompt: np.ndarray) -> None:
        """After the prefill: the sources (filing the prompt's real tokens, int64 ``[n]``, in
        the pool), then the first token the rule picks from the prompt's last ``logits``
        ``[1, V]``, and the n-grams it ends."""
        cfg = self.config
        self.sources = sources_for(cfg, self.kept, self.stats, logits.shape[-1], self.index)
        if cfg.uses_pool and cfg.prompt_ngrams:
            self.kept.pool.insert_text(prompt)
        self.planner = self._planner()
        self.rule.start(logits)
        seq.append(next(walk(None, self.rule, lambda: seq.ids))[1])
        self.learn_text(seq, 1)

    def _planner(self) -> Planner | None:
        cfg = self.config
        return Planner(
            self.sources, cfg.draft_nodes, cfg.ngram - 1, self.costs, self.overhead, self.kept, self.rule.sampled
        )

    def plan(self, seq: TokenSequence) -> Plan:
        """The step's plan: the draft the budget chose from every source's candidates."""
        return self._plan(seq, *self.planner.plan(self._context(seq), self.rule.ceiling))

    def refill(self, seq: TokenSequence, fill: int) -> Plan:
        """:meth:`plan`'s step again with at least ``fill`` draft nodes where the budget had as
        many candidates (a batch row padded to a wider row feeds them for free)."""
        return self._plan(seq, *self.planner.refill(fill))

    def _plan(self, seq: TokenSequence, rows: np.ndarray, origins: tuple[str, ...]) -> Plan:
        if not rows.shape[0]:
            return plain_plan(seq.tokens[-1])
        tree = GuessTree.build(rows)
        return Plan(tree, [seq.tokens[-1], *tree.tokens.tolist()], rows, origins, tree.layout())

    def _context(self, seq: TokenSequence) -> Context:
        """What the sources read: the text, and under seeded sampling the known noise of the
        next tokens (as many as a guess row is long) and the temperature."""
        reads = self.rule.sampled and any(source.reads_noise for source in self.sources)
        noise = self.rule.noise_ahead(self.config.ngram - 1) if reads else None
        if noise is None:
            return Context(seq.array())
        return Context(seq.array(), noise.numpy(), self.rule.temperature)

    def verify(self, seq: TokenSequence, plan: Plan, logits, preds, top=None, scores=None, learn=True, laps=None):
        """Walk ``plan``'s tree over its ``logits`` ``[q, V]`` (``preds`` ``[q]``: their host
        argmax; ``top``/``scores``: the top-k fetched for the sources, or None) appending to
        ``seq``; where ``learn``, count the step and let the planner learn (``laps``, a
        ``stats.Laps``, marks the two stages). Returns the nodes whose cache entries stay."""
        path = self.accept(seq, plan.tree, logits, preds)
        if laps is not None:
            laps.mark("verify")
        if learn:
            self.count(plan, preds.shape[0], seq.tokens[-len(path) :])
            self.learn(seq, plan, path, preds, logits, top, scores)
        if laps is not None:
            laps.mark("learn")
        return path

    def accept(self, seq: TokenSequence, tree: GuessTree, logits: torch.Tensor, preds: np.ndarray) -> list[int]:
        """Walk the tree appending the model's own choices; return the nodes whose entries
        stay. Where every pick is the fetched argmax, the path is found in one kernel and then
        appended token by token until the sequence stops."""
        picks = preds.tolist()
        self.rule.start(logits, picks)
        if self.rule.picks_are_preds:
            nodes, bare, path = tree.greedy_path(preds), seq.bare, []
            for node in nodes:
                path.append(node)
                if bare:  # a token is all the sequence needs: no Pick, no logits row
                    seq.append_token(picks[node])
                else:
                    seq.append(self.rule(node, None, None))
                if seq.done:
                    break
            return path
        path = []
        for node, pick in walk(tree if tree.size else None, self.rule, lambda: seq.ids):
            path.append(node)
            seq.append(pick)
            if seq.done:
                break
        return path

    def count(self, plan: Plan, fed: int, appended: list[int]) -> None:
        """Add a step that fed ``fed`` tokens and appended ``appended`` to the stats, and credit
        its accepted guesses to the source that guessed the most of them."""
        stats, accepted = self.stats, len(appended)
        stats.steps += 1
        stats.guess_tokens += fed - 1
        stats.window_steps += int("window" in plan.origins)
        stats.plain_steps += int(fed == 1)
        stats.draft_steps += int(fed > 1 and self.planner is not None)
        stats.record_step(accepted)
        if accepted > 1:
            stats.credit(plan.source_of(appended[:-1]), accepted - 1)

    def learn_text(self, seq: TokenSequence, accepted: int) -> None:
        """File the n-grams that end in the ``accepted`` newest tokens (after the prefill: 1)."""
        if self.config.uses_pool and self.config.prompt_ngrams:
            file_new(self.kept.pool, seq.array(), accepted)

    def learn(self, seq: TokenSequence, plan: Plan, path: list[int], preds, logits, top, scores) -> None:
        """After a step that walked ``path`` down ``plan``'s tree: the planner learns its
        outcome (the free Jacobi iterations read with the rule's picks, the fed tokens' top-k)."""
        self.planner.learn(self._outcome(seq, plan, path, preds, logits, top, scores))

    def _outcome(self, seq: TokenSequence, plan: Plan, path: list[int], preds, logits, top, scores) -> Outcome:
        scores_at = None if logits is None else lambda node: _host_row(logits[node])
        picks = self.rule.picker(preds, logits, lambda: seq.ids)
        fed = np.asarray(plan.tokens, dtype=np.int64) if top is not None else None
        return Outcome(seq.array(), len(path), plan.tree, path, picks, scores_at, fed, top, scores)


def _host_row(row: torch.Tensor) -> np.ndarray:
    """A logits row as a float32 numpy array: a view of a float32 row on the CPU (no copy, one
    op fewer after a forward), else a converted copy."""
    return row.numpy() if row.dtype == torch.float32 and row.device.type == "cpu" else row.float().cpu().numpy()
