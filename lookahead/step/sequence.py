"""The growing token sequence of one generation: ids, a numpy view, what it reports, when it stops.

``generate`` builds a ``StoppingCriteriaList``; lookahead checks it after each token a step
appends (a step may accept many), cheaply where it is safe: for the lists ``generate`` builds by default, only
a length limit and EOS tokens, the same answer is computed from the length and the new
token in Python, without tensors; any other criterion runs the list as given.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

Check = Callable[[int, int], bool]


def fast_check(criteria) -> Check | None:
    """``(length, newest token) -> stop`` equivalent to ``criteria``, or None when the list
    holds anything besides ``MaxLengthCriteria`` and ``EosTokenCriteria``."""
    max_length, eos = None, set()
    for criterion in criteria:
        if type(criterion) is MaxLengthCriteria:
            max_length = criterion.max_length if max_length is None else min(max_length, criterion.max_length)
        elif type(criterion) is EosTokenCriteria:
            eos.update(int(t) for t in criterion.eos_token_id.reshape(-1).tolist())
        else:
            return None
    if max_length is None:
        return lambda length, token: token in eos
    return lambda length, token: length >= max_length or token in eos


def _never(length: int, token: int) -> bool:
    return False


class TokenSequence:
    """The growing token sequence of one generation, and what it reports on the way.

    ``ids`` is a ``[1, len]`` view of a buffer grown by doubling, so appending a token costs
    no concatenation of the whole sequence. On the CPU (int64 ids) that buffer is the numpy
    array ``array()`` views too: an appended token is one numpy store, no torch op.
    """

    def __init__(self, input_ids, stopping_criteria, streamer, stats, keep_scores, keep_logits):
        self.tokens = input_ids[0].tolist()
        size = 2 * len(self.tokens) + 64
        self._shared = input_ids.device.type == "cpu" and input_ids.dtype == torch.int64
        self._buffer = np.empty(size, dtype=np.int64)
        self._buffer[: len(self.tokens)] = self.tokens
        self._filled = len(self.tokens)
        self._size = size  # the buffer's room, as an int: a step reads no tensor to append
        if self._shared:
            self._ids = torch.from_numpy(self._buffer)[None]
        else:
            self._ids = input_ids.new_empty((1, size))
            self._ids[:, : len(self.tokens)] = input_ids
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

    @property
    def bare(self) -> bool:
        """Whether a token may be appended alone (:meth:`append_token`): no scores or logits
        kept, and stops decided from lengths and token ids."""
        return self.scores is None and self.logits is None and self._fast_stop is not None

    def array(self) -> np.ndarray:
        """The tokens so far as int64 ``[len]`` (a view: valid until the next append)."""
        n = len(self.tokens)
        if not self._shared:
            if self._buffer.shape[0] < n:
                self._buffer = _grown(self._buffer, 2 * n, self._filled)
            self._buffer[self._filled : n] = self.tokens[self._filled : n]
            self._filled = n
        return self._buffer[:n]

    def append(self, pick) -> None:
        self._store(pick.token)
        if self.scores is not None:
            self.scores.append(pick.scores)
        if self.logits is not None:
            self.logits.append(pick.logits)
        if self.streamer is not None:
            self.streamer.put(torch.tensor([pick.token]))
        if self._fast_stop is not None:
            self.done = self._fast_stop(len(self.tokens), pick.token)
        else:
            scores = pick.scores if pick.scores is not None else pick.logits
            self.done = bool(self.stopping_criteria(self.ids, scores).any())

    def append_token(self, token: int) -> None:
        """:meth:`append` for a :attr:`bare` sequence, from the token alone."""
        self._store(token)
        if self.streamer is not None:
            self.streamer.put(torch.tensor([token]))
        self.done = self._fast_stop(len(self.tokens), token)

    def _store(self, token: int) -> None:
        n = len(self.tokens)
        if self._size == n:
            self._grow(2 * n)
        if self._shared:
            self._buffer[n] = token
        else:
            self._ids[0, n] = token
        self.tokens.append(token)
        self.stats.new_tokens += 1

    def _grow(self, size: int) -> None:
        n = len(self.tokens)
        self._size = size
        if self._shared:
            self._buffer = _grown(self._buffer, size, n)
            self._ids = torch.from_numpy(self._buffer)[None]
        else:
            grown = self._ids.new_empty((1, size))
            grown[:, :n] = self._ids
            self._ids = grown


def _grown(buffer: np.ndarray, size: int, n: int) -> np.ndarray:
    """A new int64 buffer of ``size`` holding ``buffer``'s first ``n`` entries."""
    grown = np.empty(size, dtype=np.int64)
    grown[:n] = buffer[:n]
    return grown
