"""The published shape (Fu et al. 2024; LADE): the Jacobi window's levels fed every step.

``method="classic"`` and ``method="jacobi"`` decode with it, for comparison and as the
method's definition. It sits outside the decode core (``step/`` knows only ``[root | draft]``):
its rows are a :class:`ClassicProposer` the decode loop is handed (:func:`proposer_for`).
Each step feeds ``[root | draft | upper levels]``: the window's level 0 as the first guess
row, every source's whole guesses merged into the same trie (no budget chooses among them),
then the window's other levels, which the walk does not visit. The newest level's
predictions become a level, and each column read top to bottom plus its prediction is an
n-gram for the pool. For W=3 columns and 2 levels (a0..a2, b0..b2), with a
pool row a0 x y; digits are offsets from the root's position, X = may attend (every row also
attends the committed cache):

          r a0 a1 a2  x  y b0 b1 b2
    r  0  X
    a0 1  X  X
    a1 2  X  X  X
    a2 3  X  X  X  X
    x  2  X  X        X
    y  3  X  X        X  X
    b0 2  X  X                X
    b1 3  X  X  X                X
    b2 4  X  X  X  X                X

Level 0 is a causal chain from the root; a higher level l at column i sees level 0 up to
column i and the column above it.
"""

from __future__ import annotations

import numpy as np

from lookahead.config import LookaheadConfig
from lookahead.drafts.kept import KeptState
from lookahead.step.proposer import Plan, Proposer
from lookahead.step.sequence import TokenSequence
from lookahead.verify.tree import GuessTree


def proposer_for(config: LookaheadConfig, rule, stats, kept: KeptState, costs, index) -> Proposer:
    """A row's proposer of the classic shape, as the decode loop asks for one
    (``step.loop.Decoder(proposers=...)``); ``costs`` unused: no budget prices its nodes."""
    return ClassicProposer(config, rule, stats, kept, None, 0.0, index)


class JacobiWindow:
    """Guesses for the tokens after the last accepted one, and their recent history.

    ``tokens[l, i]`` (level l, column i) stands at ``1 + i + l`` positions after the last
    accepted token. Level 0 is the oldest iteration, the last level the newest. Every step
    the model's prediction after each column of the last level becomes a new level and the
    oldest is dropped; reading a column from top to bottom plus that prediction gives one
    ``levels + 1``-token trajectory, an n-gram for the pool.

    The window is seeded with tokens drawn from the prompt (a fixed-seed generator, so runs
    repeat). Trajectories are only harvested once every level came from the model.
    """

    def __init__(self, levels: int, width: int, seed_tokens: np.ndarray):
        self.levels = levels
        self.width = width
        rng = np.random.default_rng(0)
        self._tokens = rng.choice(np.asarray(seed_tokens, dtype=np.int64), size=(levels, width))
        self._pending = 0  # columns to slide before the window is next read
        self._model_levels = 0

    @property
    def tokens(self) -> np.ndarray:
        """int64 ``[levels, width]``, the guesses."""
        if self._pending:
            steps, self._pending = self._pending, 0
            self._tokens[:, :-steps] = self._tokens[:, steps:]
            self._tokens[:, -steps:] = self._tokens[:, -steps - 1 : -steps]
        return self._tokens

    @tokens.setter
    def tokens(self, value: np.ndarray) -> None:
        self._tokens, self._pending = value, 0

    @property
    def size(self) -> int:
        return self.levels * self.width

    @property
    def chain(self) -> np.ndarray:
        """Level 0: the current guess of the next ``width`` tokens after the last accepted one."""
        return self.tokens[0]

    def advance(self, newest: np.ndarray, accepted: int) -> np.ndarray:
        """Take the model's predictions after the last level and move the window on.

        Args:
            newest: int64 ``[width]``, the prediction after each column of the last level.
            accepted: tokens accepted this step (>= 1). Accepting k tokens moves the last
                token k places on, so the columns shift k - 1 places left to stay at the
                positions they were guessed for; the vacated right end repeats the last column.

        Returns:
            The harvested trajectories, int64 ``[width, levels + 1]`` (empty while the
            window still holds seed tokens).
        """
        if self._model_levels >= self.levels:
            ngrams = np.concatenate([self.tokens.T, newest[:, None]], axis=1)
        else:
            ngrams = np.empty((0, self.levels + 1), dtype=np.int64)
            self._model_levels += 1
        self.tokens = np.concatenate([self.tokens[1:], newest[None, :]], axis=0)
        self.slide(accepted - 1)
        return ngrams

    def slide(self, steps: int) -> None:
        """Move every level ``steps`` columns left (the last token moved on without the
        window); the vacated right end repeats the last column."""
        # done when next read: slides compose (a then b columns is a + b, up to width - 1)
        if steps > 0 and self.width > 1:
            self._pending = min(self._pending + steps, self.width - 1)


def classic_layout(tree: GuessTree, levels: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (int64 ``[q]``) and attention (bool ``[q, q]``) of ``[root | draft | upper
    levels]`` (drawn above): ``tree``'s own layout, its first ``width`` draft nodes the
    window's level 0, then ``levels - 1`` levels of ``width`` cells."""
    offsets, allowed = tree.layout()
    n, extra = offsets.shape[0], (levels - 1) * width
    out_offsets = np.concatenate([offsets, np.zeros(extra, dtype=np.int64)])
    out_allowed = np.zeros((n + extra, n + extra), dtype=np.bool_)
    out_allowed[:n, :n] = allowed
    for level in range(1, levels):
        for col in range(width):
            row = n + (level - 1) * width + col
            out_offsets[row] = 1 + col + level
            out_allowed[row, : 2 + col] = True  # the root and level 0 up to this column
            out_allowed[row, n + col : row + 1 : width] = True  # the column above, itself included
    return out_offsets, out_allowed


class ClassicProposer(Proposer):
    """A row of the classic shape: the window's levels and every source's whole guesses."""

    def start(self, seq: TokenSequence, logits, prompt: np.ndarray) -> None:
        self.window = JacobiWindow(self.config.levels, self.config.window, prompt)
        super().start(seq, logits, prompt)

    def _planner(self) -> None:
        return None  # no budget: every source's whole guesses

    def plan(self, seq: TokenSequence) -> Plan:
        window, context = self.window, self._context(seq)
        parts, names = ([window.chain[None]], ["window"]) if window.width else ([], [])
        for source in sorted(self.sources, key=lambda source: not source.scored):  # the copy rows first
            found = [source.rows(context.text)] if source.scored else source.propose(context)
            for rows in found:
                if rows.size:
                    parts.append(rows)
                    names += [source.name] * rows.shape[0]
        rows = _stack(parts)
        tree = GuessTree.build(rows)
        tail = window.tokens[1:].reshape(-1).tolist()
        layout = classic_layout(tree, window.levels, window.width)
        return Plan(tree, [seq.tokens[-1], *tree.tokens.tolist(), *tail], rows, tuple(names), layout)

    def learn(self, seq: TokenSequence, plan: Plan, path: list[int], preds, logits, top, scores) -> None:
        """Move the window on, then let every source learn (the pool files the new text's
        n-grams, the successors the fed tokens' top-k)."""
        accepted = len(path)
        self._advance_window(plan, preds, accepted, seq.tokens[-accepted - 1])
        outcome = self._outcome(seq, plan, path, preds, logits, top, scores)
        for source in self.sources:
            source.learn(outcome)

    def _advance_window(self, plan: Plan, preds, accepted: int, root: int) -> None:
        """The newest level's predictions (rows of the host argmax ``preds`` ``[q]``) become a
        level; full columns go to the pool, each after the token before it in its Jacobi
        context (column i of level 0 follows the step's ``root`` for i = 0, else column i - 1)."""
        window = self.window
        if not window.width:
            return
        first = 1 if window.levels == 1 else 1 + plan.tree.size + (window.levels - 2) * window.width
        before = np.concatenate([[root], window.chain[:-1]])
        ngrams = window.advance(preds[first : first + window.width], accepted)
        if self.config.uses_pool:
            self.kept.pool.insert(ngrams, before)


def _stack(parts: list[np.ndarray]) -> np.ndarray | None:
    """One ``[rows, width]`` int64 array of the parts' rows, padded with -1."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0].copy()  # a source's rows may be a view of a buffer it reuses
    rows = np.full((sum(p.shape[0] for p in parts), max(p.shape[1] for p in parts)), -1, dtype=np.int64)
    at = 0
    for part in parts:
        rows[at : at + part.shape[0], : part.shape[1]] = part
        at += part.shape[0]
    return rows
