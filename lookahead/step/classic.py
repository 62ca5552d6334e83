"""The published shape (Fu et al. 2024; LADE): the Jacobi window's levels fed every step.

``LookaheadConfig(adaptive=False)`` and ``method="jacobi"`` decode with it, for comparison
and as the method's definition. Each step feeds ``[root | window | guesses]``: the window's
``levels x width`` cells, then every source's whole guesses (copy rows, pool continuations,
successor rows) merged into one trie; no budget chooses among them. The window's newest
level's predictions become a level, and each column read top to bottom plus its prediction
is an n-gram for the pool. For W=3 columns and 2 levels (a0..a2, b0..b2), with draft nodes
x (child of a0) and y (child of x); digits are offsets from the root's position, X = may
attend (every row also attends the committed cache):

          r a0 a1 a2 b0 b1 b2  x  y
    r  0  X
    a0 1  X  X
    a1 2  X  X  X
    a2 3  X  X  X  X
    b0 2  X  X        X
    b1 3  X  X  X        X
    b2 4  X  X  X  X        X
    x  2  X  X                 X
    y  3  X  X                 X  X

Level 0 is a causal chain from the root; a higher level l at column i sees level 0 up to
column i and the column above it.
"""

from __future__ import annotations

import numpy as np
import torch

from lookahead.step.proposer import Proposer
from lookahead.step.sequence import TokenSequence
from lookahead.verify.tree import GuessTree


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


def window_layout(levels: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets from the root (int64 ``[n]``) and attention (bool ``[n, n]``) of the step's
    head, root + window (``n = 1 + levels * width``; drawn above)."""
    n = 1 + levels * width
    offsets = np.zeros(n, dtype=np.int64)
    allowed = np.zeros((n, n), dtype=np.bool_)
    allowed[:, 0] = True
    for level in range(levels):
        for col in range(width):
            row = 1 + level * width + col
            offsets[row] = 1 + col + level
            allowed[row, 1 : 2 + col] = True
            for above in range(1, level + 1):
                allowed[row, 1 + above * width + col] = True
    return offsets, allowed


class ClassicProposer(Proposer):
    """A row of the classic shape: the window's levels and every source's whole guesses."""

    windowed = True

    def _head(self, prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.config
        self.window = JacobiWindow(cfg.levels, cfg.window, prompt)
        return window_layout(cfg.levels, cfg.window)

    def _sources(self) -> list:
        return [source for source in super()._sources() if source.name != "window"]

    def _budget(self) -> None:
        return None

    def plan(self, seq: TokenSequence):
        context = self._context(seq)
        parts = []
        for source in self.sources:
            if source.scored:
                parts.insert(0, (source.name, source.rows(context.text)))
            else:
                parts += [(source.name, rows) for rows in source.propose(context)]
        parts = [(name, rows) for name, rows in parts if rows.size]
        origins = tuple(name for name, rows in parts for _ in range(rows.shape[0]))
        window = self.window
        return self._merged(
            seq, _stack([rows for _, rows in parts]), origins, window.chain, window.tokens.reshape(-1).tolist()
        )

    def learn(
        self, seq: TokenSequence, preds: torch.Tensor, path: list[int], tree: GuessTree, logits: torch.Tensor | None
    ) -> None:
        """Move the window on by its newest level's predictions (rows of the host argmax
        ``preds`` ``[q]``) and file the new text's n-grams in the pool."""
        accepted = len(path)
        self._advance_window(preds, accepted, seq.tokens[-accepted - 1])
        self.learn_text(seq, accepted)

    def _advance_window(self, preds: torch.Tensor, accepted: int, root: int) -> None:
        """The newest level's predictions become a level; full columns go to the pool, each
        after the token before it in its Jacobi context (column i of level 0 follows the
        step's ``root`` for i = 0, else column i - 1)."""
        window = self.window
        if not window.width:
            return
        first = 1 + (window.levels - 1) * window.width
        newest = preds[first : first + window.width].numpy()
        before = np.concatenate([[root], window.chain[:-1]])
        ngrams = window.advance(newest, accepted)
        if self.pool is not None:
            self.pool.insert(ngrams, before)


def _stack(parts: list[np.ndarray]) -> np.ndarray | None:
    """One ``[rows, width]`` int64 array of the parts' rows, padded with -1."""
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
