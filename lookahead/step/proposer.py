"""One row's guesses: its sources, the draft budget over them, its rule, and what it learns.

Each step :meth:`Proposer.plan` asks every source (``lookahead.drafts.source``) for its
candidates and lets the budget keep the nodes that pay for their forward cost, possibly none
(then the step is plain decoding); :meth:`Proposer.accept` walks the merged tree with the
row's rule; :meth:`Proposer.learn` lets every source and the budget learn from what held.
The decode loop of one sequence (``decode.Decoder``) and every row of a batch
(``batch_rows.Row``) own one. The published fixed shape, with the window's levels fed every
step and no budget, is ``classic.ClassicProposer``.
"""

from __future__ import annotations

import numpy as np
import torch

from lookahead.config import LookaheadConfig
from lookahead.drafts.budget import DraftBudget
from lookahead.drafts.copy_drafter import CopyDrafter
from lookahead.drafts.jacobi import WindowSource
from lookahead.drafts.pool import NgramPool, PoolSource, file_new
from lookahead.drafts.source import Context, Outcome
from lookahead.drafts.successors import SuccessorSource, SuccessorTable, kept_table
from lookahead.drafts.suffix import SuffixIndex
from lookahead.sampling.guess import NoiseRace
from lookahead.stats import LookaheadStats
from lookahead.step.costmodel import CostCurve
from lookahead.step.inputs import NO_CHAIN
from lookahead.step.mask import StepMask
from lookahead.step.sequence import TokenSequence
from lookahead.verify import kernels
from lookahead.verify.rules import walk
from lookahead.verify.tree import GuessTree, root_layout


class Proposer:
    """One row's guess sources, draft budget and rule.

    Args:
        config: the decoder's configuration (which sources, their sizes).
        rule: the greedy or sampling rule the row's tree is walked with.
        stats: the stats its steps are counted in.
        pool: an n-gram pool to use (a kept one, or a batch's shared one); a fresh one if None.
        costs, overhead: the cost curve and per-step overhead (one-token forwards) the draft
            budget weighs every step's nodes against (None: the classic shape, no budget).
        index: a corpus the copy guess also drafts from.
        dtype: the dtype of the step masks (the model's).
    """

    windowed = False  # whether steps feed the window's levels (the classic shape)

    def __init__(
        self,
        config: LookaheadConfig,
        rule,
        stats: LookaheadStats,
        pool: NgramPool | None = None,
        costs: CostCurve | None = None,
        overhead: float = 0.0,
        index: SuffixIndex | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        self.config, self.rule, self.stats, self.dtype = config, rule, stats, dtype
        self.pool = None
        if config.uses_pool:
            self.pool = pool
            if pool is None:
                self.pool = NgramPool(config.ngram, config.guesses, config.pool_capacity, config.context_tokens)
        self.copy = None
        if config.uses_copy:
            kept = self.pool
            history = (lambda: kept.history_indexes) if kept is not None else None
            self.copy = CopyDrafter(config.copy_length, config.copy_match, config.copy_min_prob, history, index)
        self.costs, self.overhead = costs, overhead
        self.successors: SuccessorTable | None = None
        self.sources: list = []
        self.budget: DraftBudget | None = None
        self.mask: StepMask | None = None

    def seed(self, prompt: np.ndarray, groups: dict, vocab: int, device, successors: SuccessorTable | None = None):
        """Start the sources and the step mask from the prompt's real tokens (int64 ``[n]``);
        ``successors`` shares one table between a batch's rows, else the pool's is used (a
        kept pool keeps one for later requests)."""
        cfg = self.config
        if self.pool is not None and cfg.prompt_ngrams:
            self.pool.insert_text(prompt)
        if successors is not None:
            self.successors = successors
        elif cfg.uses_successors:
            self.successors = kept_table(self.pool, vocab, cfg.successors, cfg.ngram - 1)
        self.mask = StepMask(self._head(prompt), groups, self.dtype, device)
        self.sources = self._sources()
        self.budget = self._budget()

    def start(self, seq: TokenSequence, logits: torch.Tensor, prompt: np.ndarray, groups, device, successors=None):
        """After the prefill: :meth:`seed` from the prompt's real tokens, append the first token
        the rule picks from the prompt's last ``logits`` ``[1, V]``, file the n-grams it ends."""
        self.seed(prompt, groups, logits.shape[-1], device, successors)
        self.rule.start(logits)
        seq.append(next(walk(None, self.rule, lambda: seq.ids))[1])
        self.learn_text(seq, 1)

    def _head(self, prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The step's fixed head before the guesses (offsets, attention): the root alone."""
        return root_layout()

    def _sources(self) -> list:
        """The row sources in bin order, the window first (a node it shares with another
        source learns, and is credited, as its), then the scored copy guess."""
        cfg, sources = self.config, []
        if cfg.window:
            sources.append(WindowSource(cfg.ngram - 1, cfg.window, self.pool))
        if self.pool is not None:
            sources.append(PoolSource(self.pool, self.stats, cfg.prompt_ngrams))
        if self.successors is not None:
            sources.append(SuccessorSource(self.successors))
        if self.copy is not None:
            sources.append(self.copy)
        return sources

    def _budget(self) -> DraftBudget:
        bins = tuple(b for source in self.sources for b in source.bins)
        budget = DraftBudget(self.config.draft_nodes, self.costs, self.overhead, bins, self.config.ngram - 1)
        for source in self.sources:
            if isinstance(source, WindowSource):
                source.score = budget.score_window
        if self.pool is not None:  # a kept (or a batch's) pool: start from what earlier requests learnt
            sampled = getattr(self.rule, "noise_ahead", None) is not None
            budget.carry(self.pool.budgets, (sampled, bins, self.config.ngram - 1, self.config.draft_nodes))
        return budget

    def plan(self, seq: TokenSequence):
        """The step's guess tree, its input tokens ``[root | draft]`` as a list, the guess rows
        merged into it (None or empty where there are none) and each row's source."""
        self.budget.scale_priors(self.rule.ceiling)
        context = self._context(seq)
        copy, rows, first = None, [], 0
        for source in self.sources:
            found = source.propose(context)
            if source.scored:
                copy = found
                continue
            rows += [(first + i, part) for i, part in enumerate(found) if part.size]
            first += len(source.bins)
        return self._merged(seq, *self.budget.plan(copy, rows))

    def refill(self, seq: TokenSequence, fill: int):
        """:meth:`plan`'s step again with at least ``fill`` draft nodes where the budget had as
        many candidates (a batch row padded to a wider row feeds them for free)."""
        return self._merged(seq, *self.budget.refill(fill))

    def _context(self, seq: TokenSequence) -> Context:
        """What the sources read: the text, and under seeded sampling the known noise of the
        next tokens (as many as a successor row is long) and the temperature."""
        ahead = getattr(self.rule, "noise_ahead", None)
        if ahead is None or self.successors is None:
            return Context(seq.array())
        noise = ahead(self.successors.length)
        return Context(seq.array(), noise.numpy() if noise is not None else None, self.rule.temperature)

    def _merged(self, seq: TokenSequence, cands, origins, chain=NO_CHAIN, head=()):
        tree = GuessTree.build(chain, 1 + len(head), cands)
        return tree, [seq.tokens[-1], *head] + tree.tokens.tolist(), cands, origins

    def count(self, step, fed: int, appended: list[int]) -> None:
        """Add a step that fed ``fed`` tokens and appended ``appended`` to the stats, and credit
        its accepted guesses to the source that guessed the most of them."""
        stats, accepted = self.stats, len(appended)
        stats.steps += 1
        stats.guess_tokens += fed - 1
        stats.lean_steps += int(not self.windowed)
        stats.window_steps += int(self.windowed or "window" in step.origins)
        stats.plain_steps += int(fed == 1)
        stats.draft_steps += int(not self.windowed and fed > 1)
        stats.record_step(accepted)
        if accepted > 1:
            stats.credit(step.source_of(appended[:-1]), accepted - 1)

    def verify(self, seq: TokenSequence, step, logits: torch.Tensor, preds: torch.Tensor, learn: bool = True):
        """Verify and learn from a step that fed ``step``'s tokens: walk its tree over their
        ``logits`` ``[q, V]`` (``preds`` ``[q]``: their argmax on the host) appending to ``seq``,
        then, where ``learn``, count the step and let every source learn. Returns the nodes
        whose cache entries stay."""
        path = self.accept(seq, step.tree, logits, preds.tolist())
        if learn:
            self.count(step, preds.shape[0], seq.tokens[-len(path) :])
            self.learn(seq, preds, path, step.tree, logits)
        return path

    def accept(
        self, seq: TokenSequence, tree: GuessTree, logits: torch.Tensor, preds: list[int] | None = None
    ) -> list[int]:
        """Walk the tree appending the model's own choices; return the nodes whose entries stay
        (``preds``: the logits' argmax on the host, when already fetched)."""
        self.rule.start(logits, preds)
        if preds is not None and getattr(self.rule, "picks_are_preds", False):
            return self._accept_preds(seq, tree, preds)
        path = []
        for node, pick in walk(tree if tree.size or tree.chain.size else None, self.rule, lambda: seq.ids):
            path.append(node)
            seq.append(pick)
            if seq.done:
                break
        return path

    def _accept_preds(self, seq: TokenSequence, tree: GuessTree, preds: list[int]) -> list[int]:
        """:meth:`accept` where every pick is the node's argmax (greedy, no processors): the
        path found in one kernel, then appended token by token until the sequence stops."""
        out = np.empty(1 + tree.chain.shape[0] + tree.size, dtype=np.int64)
        n = kernels.greedy_path(tree.chain, tree.base, tree.tokens, tree.parents, np.asarray(preds), out)
        path = []
        bare = seq.bare  # then a token is all the sequence needs: no Pick, no logits row
        for node in out[:n].tolist():
            path.append(node)
            if bare:
                seq.append_token(preds[node])
            else:
                seq.append(self.rule(node, None, None))
            if seq.done:
                break
        return path

    def learn_text(self, seq: TokenSequence, accepted: int) -> None:
        """File the n-grams that end in the ``accepted`` newest tokens (after the prefill: 1)."""
        if self.pool is not None and self.config.prompt_ngrams:
            file_new(self.pool, seq.array(), accepted)

    def learn(
        self, seq: TokenSequence, preds: torch.Tensor, path: list[int], tree: GuessTree, logits: torch.Tensor | None
    ) -> None:
        """After a step that walked ``path`` (its accepted nodes) down ``tree``, appending
        ``len(path)`` tokens to ``seq``: every source learns (the window from the step's free
        Jacobi iterations: the host argmax ``preds`` ``[q]``, or under sampling the races on the
        step's ``logits`` ``[q, V]`` where given), then the budget scores the nodes it fed."""
        accepted = len(path)
        rank = None if logits is None else lambda node, tokens: _likeliest_first(logits[node], tokens)
        outcome = Outcome(seq.array(), accepted, tree, path, self._picker(seq, preds, logits), rank)
        for source in self.sources:
            source.learn(outcome)
        self.budget.learn(seq.tokens[-accepted:])

    def _picker(self, seq: TokenSequence, preds: torch.Tensor, logits: torch.Tensor | None):
        """``picks(nodes)``: the tokens the rule would emit at a branch of the step's tree read
        as the tokens after the root: the fetched argmaxes, or under sampling the races with
        those positions' known noise (so the window follows the sampled text), run on the
        step's ``logits`` ``[q, V]`` by the noise race where it re-states the processors."""
        if getattr(self.rule, "guesses", None) is None:
            return lambda nodes: [int(preds[v]) for v in nodes]
        race = NoiseRace.of(self.rule.processors) if logits is not None else None
        if race is None:
            return lambda nodes: self.rule.guesses(nodes, seq.ids)
        return lambda nodes: race.picks(logits, nodes, self.rule.noise_ahead(len(nodes)))


def _likeliest_first(scores: torch.Tensor, tokens: np.ndarray) -> list[int]:
    """The indices of ``tokens`` (int64 ``[c]``) by their ``scores`` (a ``[V]`` row), highest
    first (the first of a tie first)."""
    return torch.argsort(scores[torch.from_numpy(tokens)], descending=True, stable=True).tolist()
