"""The growing token sequence of one generation: ids, a numpy view, what it reports, when it stops."""

from __future__ import annotations

import numpy as np
import torch

from lookahead.stopping import fast_check


def _never(length: int, token: int) -> bool:
    return False


class TokenSequence:
    """The growing token sequence of one generation, and what it reports on the way.

    ``ids`` is a ``[1, len]`` view of a buffer grown by doubling, so appending a token costs
    no concatenation of the whole sequence.
    """

    def __init__(self, input_ids, stopping_criteria, streamer, stats, keep_scores, keep_logits):
        self.tokens = input_ids[0].tolist()
        self._ids = input_ids.new_empty((1, 2 * len(self.tokens) + 64))
        self._ids[:, : len(self.tokens)] = input_ids
        self._buffer = np.empty(2 * len(self.tokens) + 64, dtype=np.int64)
        self._buffer[: len(self.tokens)] = self.tokens
        self._filled = len(self.tokens)
        self.stopping_criteria = stopping_criteria
        self._fast_stop = fast_check(stopping_criteria)
        self.streamer = streamer
        self.stats = stats
        self.scores = [] if keep_scores else None
        self.logits = [] if keep_logits else None
        self.done = False

    def ignore_stops(self) -> None:
        """Go on appending whatever the criteria say (a batch row that stopped while the
        others go on, as ``generate`` continues rows that have no EOS to stop them)."""
        self._fast_stop = _never
        self.done = False

    @property
    def ids(self) -> torch.Tensor:
        """The sequence so far, long ``[1, len]`` (a view: valid until the next append)."""
        return self._ids[:, : len(self.tokens)]

    def array(self) -> np.ndarray:
        """The tokens so far as int64 ``[len]`` (a view: valid until the next append)."""
        n = len(self.tokens)
        if self._buffer.shape[0] < n:
            grown = np.empty(2 * n, dtype=np.int64)
            grown[: self._filled] = self._buffer[: self._filled]
            self._buffer = grown
        self._buffer[self._filled : n] = self.tokens[self._filled : n]
        self._filled = n
        return self._buffer[:n]

    def append(self, pick) -> None:
        n = len(self.tokens)
        if self._ids.shape[1] == n:
            grown = self._ids.new_empty((1, 2 * n))
            grown[:, :n] = self._ids
            self._ids = grown
        self._ids[0, n] = pick.token
        self.tokens.append(pick.token)
        self.stats.new_tokens += 1
        if self.scores is not None:
            self.scores.append(pick.scores)
        if self.logits is not None:
            self.logits.append(pick.logits)
        if self.streamer is not None:
            self.streamer.put(torch.tensor([pick.token]))
        if self._fast_stop is not None:
            self.done = self._fast_stop(n + 1, pick.token)
        else:
            scores = pick.scores if pick.scores is not None else pick.logits
            self.done = bool(self.stopping_criteria(self.ids, scores).any())
