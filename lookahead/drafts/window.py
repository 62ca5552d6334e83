"""The Jacobi window: ``levels`` rows of ``width`` guessed future tokens, refined every step."""

from __future__ import annotations

import numpy as np


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
