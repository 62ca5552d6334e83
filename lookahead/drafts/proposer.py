"""What one row proposes each step, and what it learns from what the step accepted.

A :class:`Proposer` holds a row's guess sources, each in its own module: the Jacobi window
(``window.py``, also advanced by each step's free Jacobi iteration, ``jacobi.py``), the n-gram
pool (``pool.py``, shared by a batch's rows), the copy guess's scored drafts
(``copy_drafter.py``) and the recycled successors (``successors.py``, shared too). Each step it
plans the guess tree from them and walks the tree with the row's rule; after the step it moves
the window on and lets every source learn from what held. The decode loop of one sequence
(``decode.Decoder``) and every row of a batch (``batch_rows.Row``) own one.
"""

from __future__ import annotations

import numpy as np
import torch

from lookahead.config import LookaheadConfig
from lookahead.drafts import kernels
from lookahead.drafts.budget import DraftBudget
from lookahead.drafts.copy_drafter import CopyDrafter
from lookahead.drafts.jacobi import free_iterations
from lookahead.drafts.noise_race import NoiseRace
from lookahead.drafts.pool import NgramPool
from lookahead.drafts.successors import SuccessorTable, kept_table
from lookahead.drafts.suffix import SuffixIndex
from lookahead.drafts.tree import GuessTree
from lookahead.drafts.window import JacobiWindow
from lookahead.stats import LookaheadStats
from lookahead.step.controller import DRAFT, PLAIN
from lookahead.step.costmodel import CostCurve
from lookahead.step.mask import StepMask
from lookahead.step.sequence import TokenSequence
from lookahead.verify.rules import walk

_NO_CHAIN = np.zeros(0, dtype=np.int64)
_NO_ROWS = np.zeros((0, 0), dtype=np.int64)
# (source, prior of a row's first token, of its later ones): a little above what rows held
# alone, so a fresh request still tries them (docs/benchmarks.md, POOL_SOURCES)
POOL_SOURCES = (("pool", 0.6, 0.9), ("pool", 0.3, 0.6))
# the successors' first row (the likeliest chain, or the noise's race winners) learns in the
# bin of the margin its first token wins by (``SuccessorTable.margin``, split at these), for
# a stored pick that wins by far holds more: under seeded sampling at T=0.7 the race winner was
# the sample 0.25-0.34 of the time below a margin of 2 and 0.50 above it (benchmarks/ceilings.py)
SUCCESSOR_MARGINS = (1.0, 2.0, 4.0)
# then the other rows; alone the first row held 0.49 / 0.45 and the others 0.04 / 0.57
# (docs/benchmarks.md, SUCCESSOR_SOURCE)
SUCCESSOR_SOURCE = tuple(("successors", first, 0.6) for first in (0.4, 0.55, 0.7, 0.8)) + (("successors", 0.1, 0.5),)
# the window's free Jacobi iteration: right after one wrong token the model's next prediction
# held 23% of the time on the embedded model (docs/benchmarks.md, WINDOW_SOURCE)
WINDOW_SOURCE = (("window", 0.25, 0.5),)
# a step that found no guess may feed the text's commonest recent token as one: where the
# curve prices a two-token step below a one-token one (bf16 on an AVX-512 CPU, see
# ``CostCurve.from_times``) the forward costs less with it, now and then it holds, and where it
# misses it still gives the next step a guess from the Jacobi window (``DraftBudget``)
FILLER_SOURCE = (("filler", 0.05, 0.0),)
FILLER_SPAN = 256  # the newest tokens the filler counts


class Proposer:
    """One row's guess sources and its rule.

    Args:
        config: the decoder's configuration (which sources, their sizes).
        rule: the greedy or sampling rule the row's tree is walked with.
        stats: the stats its steps are counted in.
        pool: an n-gram pool to use (a kept one, or a batch's shared one); a fresh one if None.
        costs, overhead: the cost curve and per-step overhead (one-token forwards) the draft
            budget weighs every step's nodes against; ``costs=None`` feeds every source's
            whole guesses (a fixed shape).
        index: a corpus the copy guess also drafts from.
        dtype: the dtype of the step masks (the model's).
    """

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
            self.pool = (
                pool
                if pool is not None
                else NgramPool(config.ngram, config.guesses, config.pool_capacity, config.context_tokens)
            )
        self.drafter = self.budget = None
        self.filler = None  # the budget's source index of the filler, where it can pay
        if config.uses_copy:
            kept = self.pool
            self.drafter = CopyDrafter(
                config.copy_length,
                config.copy_match,
                config.copy_min_prob,
                history=(lambda: kept.history_indexes) if kept is not None else None,
                corpus=index,
            )
            if costs is not None:
                # the window first: a node it shares with another source learns (and is credited) as its
                sources = WINDOW_SOURCE * (config.window > 0) + POOL_SOURCES * config.uses_pool
                sources += SUCCESSOR_SOURCE * config.uses_successors
                if costs(2) + overhead < 1.0 or config.window > 0:
                    self.filler, sources = len(sources), sources + FILLER_SOURCE
                self.budget = DraftBudget(config.copy_length, costs, overhead, sources, config.ngram - 1)
                if pool is not None:  # a kept (or a batch's) pool: start from what earlier requests learnt
                    sampled = getattr(rule, "noise_ahead", None) is not None
                    self.budget.carry(self.pool.budgets, (sampled, sources, config.ngram - 1, config.copy_length))
        # the window's guesses of the tokens after the root (int64 [r, <= ngram - 1], -1
        # padded), from the last step's free Jacobi iterations (the budget weighs them with
        # the other sources)
        self.jacobi = _NO_ROWS
        self.successors: SuccessorTable | None = None
        self.window: JacobiWindow | None = None
        self.step_mask: StepMask | None = None  # root + window + guesses
        self.lean_mask: StepMask | None = None  # root + guesses

    def seed(
        self, prompt: np.ndarray, windows: dict, vocab: int, device, successors: SuccessorTable | None = None
    ) -> None:
        """Start the window, the step masks, the pool and the successor table from the
        prompt's real tokens (int64 ``[n]``); ``successors`` shares one table between a batch's
        rows, else the pool's is used (a kept pool keeps one for later requests)."""
        cfg = self.config
        self.window = JacobiWindow(cfg.levels, cfg.window, prompt)
        self.step_mask = StepMask(cfg.levels, cfg.window, windows, self.dtype, device)
        self.lean_mask = StepMask(0, 0, windows, self.dtype, device)
        if self.pool is not None and cfg.prompt_ngrams:
            self.pool.insert_text(prompt)
        if successors is not None:
            self.successors = successors
        elif cfg.uses_successors:
            self.successors = kept_table(self.pool, vocab, cfg.successors, cfg.ngram - 1)

    def plan(self, seq: TokenSequence, window: JacobiWindow | None, guess: bool):
        """The step's guess tree, its input tokens ``[root | window | draft]`` as a list, the
        guess rows merged into it (None or empty where there are none) and each row's source."""
        return self._merged(seq, window, *(self._guesses(seq) if guess else (None, ())))

    def refill(self, seq: TokenSequence, window: JacobiWindow | None, fill: int):
        """:meth:`plan`'s last budgeted step again with at least ``fill`` draft nodes where the
        budget had as many candidates (a batch row padded to a wider row feeds them for free)."""
        return self._merged(seq, window, *self.budget.refill(fill))

    def _merged(self, seq: TokenSequence, window: JacobiWindow | None, cands, origins):
        chain = window.chain if window is not None else _NO_CHAIN
        head = [seq.tokens[-1]] + (window.tokens.reshape(-1).tolist() if window is not None else [])
        tree = GuessTree.build(chain, len(head), cands)
        return tree, head + tree.tokens.tolist(), cands, origins

    def count(self, shape: str, step, fed: int, appended: list[int]) -> None:
        """Add a step that fed ``fed`` tokens and appended ``appended`` to the stats (one that
        fed its root alone is a plain step, whatever shape found nothing to guess)."""
        stats, accepted = self.stats, len(appended)
        stats.steps += 1
        stats.guess_tokens += fed - 1
        stats.lean_steps += int(not step.windowed)
        stats.window_steps += int(step.windowed or "window" in step.origins)
        stats.plain_steps += int(shape == PLAIN or fed == 1)
        stats.draft_steps += int(shape == DRAFT and fed > 1)
        stats.record_step(accepted)
        if accepted > 1:
            stats.credit(step.source_of(appended[:-1]), accepted - 1)

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

    def _guesses(self, seq: TokenSequence) -> tuple[np.ndarray | None, tuple[str, ...]]:
        """Rows of guessed continuations (shorter rows end in -1) and the source of each:
        the budget's choice from every source, or (under a fixed shape) every source's whole
        guesses, the copy guess's, then the pool's, then the recycled successors'."""
        parts = []
        if self.budget is not None and self.config.window:
            parts.append(("window", self.jacobi))
        if self.pool is not None:
            # a step follows the prefill: the prompt's last token precedes its first token
            pooled, paired = self.pool.lookup_split(seq.tokens[-1], seq.tokens[-2])
            self.stats.pool_lookups += 1
            self.stats.pool_hits += int(pooled.shape[0] > 0)
            parts += [("pool", pooled[:paired]), ("pool", pooled[paired:])]
        if self.successors is not None:
            parts += self._successor_parts(seq.tokens[-1])
        if self.budget is not None:
            self.budget.scale_priors(self.rule.ceiling)
            rows = [(source, rows) for source, (_, rows) in enumerate(parts) if rows.size]
            text = seq.array()
            copy = self.drafter.tree(text)
            if self.filler is not None and not rows and not copy[0].size:
                rows = [(self.filler, _commonest(text[-FILLER_SPAN:]))]
            return self.budget.plan(copy, rows)
        if self.drafter is not None:
            parts.insert(0, ("copy", self.drafter.propose(seq.array())))
        parts = [(name, rows) for name, rows in parts if rows.size]
        origins = tuple(name for name, rows in parts for _ in range(rows.shape[0]))
        return _stack_rows([rows for _, rows in parts]), origins

    def _successor_parts(self, root: int) -> list[tuple[str, np.ndarray]]:
        """The recycled successors' rows as the budget's sources: the first row under the bin
        of its margin (one part per ``SUCCESSOR_MARGINS`` bin, the others empty), then the rest."""
        race = self._race()
        recycled = self.successors.guesses(root, *race)
        margin = self.successors.margin(root, *race) if recycled.size else -1.0
        at = int(np.searchsorted(SUCCESSOR_MARGINS, margin, side="right"))
        first = [recycled[:1] if b == at else recycled[:0] for b in range(len(SUCCESSOR_MARGINS) + 1)]
        return [("successors", rows) for rows in first] + [("successors", recycled[1:])]

    def _race(self) -> tuple[np.ndarray | None, float]:
        """What the successors' race reads under seeded sampling: the known noise of the next
        tokens (float32 ``[m, V]``) and the temperature; ``(None, 1.0)`` under greedy."""
        ahead = getattr(self.rule, "noise_ahead", None)
        if ahead is None:
            return None, 1.0
        noise = ahead(self.successors.length)
        return (noise.numpy() if noise is not None else None), self.rule.temperature

    def _advance_window(self, preds: torch.Tensor, accepted: int, root: int) -> None:
        """The newest level's predictions (rows of the host argmax ``preds`` ``[q]``) become a
        level; full columns go to the pool."""
        width = self.window.width
        if not width:
            return
        first = 1 + (self.window.levels - 1) * width
        newest = preds[first : first + width].numpy()
        # in its Jacobi context, column i of level 0 follows the root (i = 0) or column i - 1
        before = np.concatenate([[root], self.window.chain[:-1]])
        ngrams = self.window.advance(newest, accepted)
        if self.pool is not None:
            self.pool.insert(ngrams, before)

    def _iterate_window(
        self, seq: TokenSequence, tree: GuessTree, path: list[int], preds: torch.Tensor, logits: torch.Tensor | None
    ) -> None:
        """The step's free Jacobi iterations, read after the new root's likeliest fed siblings
        (up to ``window`` of them, ranked by the step's ``logits``), become the window's guesses
        of what follows the new root (without any, the old first guess moves on); a full first
        one is also a trajectory n-gram for the pool, keyed by the root alone: under the root and
        the token before it, it would learn in the text's context-pair bins, whose chances it
        does not have (docs/benchmarks.md, 2026-12-03)."""
        rank = None if logits is None else lambda node, tokens: _likeliest_first(logits[node], tokens)
        picks = self._picker(seq, preds, logits)
        guesses = free_iterations(tree, path[-1], picks, self.config.ngram - 1, rank, self.config.window)
        self.jacobi = guesses if guesses.size else _moved_on(self.jacobi, len(path))
        first = guesses[0] if guesses.size else _NO_CHAIN
        if self.pool is not None and first.size == self.config.ngram - 1 and first[-1] >= 0:
            gram = np.concatenate([seq.tokens[-1:], first])[None]
            self.pool.insert(gram)

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

    def learn_text(self, seq: TokenSequence, accepted: int) -> None:
        """File the n-grams that end in the ``accepted`` newest tokens (after the prefill: 1)."""
        if self.pool is not None and self.config.prompt_ngrams:
            text = seq.array()
            self.pool.insert_text(text, text.shape[0] - accepted - self.config.ngram + 1)

    def learn(
        self,
        seq: TokenSequence,
        preds: torch.Tensor,
        windowed: bool,
        path: list[int],
        root: int,
        tree: GuessTree,
        logits: torch.Tensor | None = None,
    ) -> None:
        """After a step that walked ``path`` (its accepted nodes) from the root ``root`` down
        ``tree``, appending ``len(path)`` tokens to ``seq``: move the window on (by its newest
        level's predictions, from ``preds``, the host argmax ``[q]`` of the step's logits, when
        it was fed; and by the step's free Jacobi iteration, raced on the step's ``logits``
        ``[q, V]`` under sampling where given), file the new n-grams and score the draft's
        nodes."""
        accepted = len(path)
        if windowed:
            self._advance_window(preds, accepted, root)
        else:
            self.window.slide(accepted)
        if self.budget is not None and self.config.window:
            if self.jacobi.size:  # scored fed or not: the token after the root is the first appended
                self.budget.score_window(seq.tokens[-accepted] in self.jacobi[:, 0].tolist())
            self._iterate_window(seq, tree, path, preds, logits)
        self.learn_text(seq, accepted)
        if self.budget is not None:
            self.budget.learn(seq.tokens[-accepted:])


def _moved_on(guesses: np.ndarray, accepted: int) -> np.ndarray:
    """The first of the window's ``guesses`` (int64 ``[r, d]``, -1 padded) past the ``accepted``
    tokens a step appended, as a ``[1, <= d]`` row (``[0, 0]`` where nothing of it is left)."""
    rest = guesses[:1, accepted:]
    return rest if rest.size and rest[0, 0] >= 0 else _NO_ROWS


def _likeliest_first(scores: torch.Tensor, tokens: np.ndarray) -> list[int]:
    """The indices of ``tokens`` (int64 ``[c]``) by their ``scores`` (a ``[V]`` row), highest
    first (the first of a tie first)."""
    return torch.argsort(scores[torch.from_numpy(tokens)], descending=True, stable=True).tolist()


def _commonest(text: np.ndarray) -> np.ndarray:
    """The commonest token of ``text`` (int64 ``[n]``, n >= 1; the first of a tie) as one row
    ``[1, 1]``."""
    return np.array([[np.bincount(text).argmax()]], dtype=np.int64)


def _stack_rows(parts: list[np.ndarray]) -> np.ndarray | None:
    """One ``[rows, width]`` int64 array of the non-empty parts' rows, padded with -1."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    cands = np.full((sum(p.shape[0] for p in parts), max(p.shape[1] for p in parts)), -1, dtype=np.int64)
    row = 0
    for part in parts:
        cands[row : row + part.shape[0], : part.shape[1]] = part
        row += part.shape[0]
    return cands
