"""Earlier requests' texts, kept for later requests' copy drafts: bounded, and indexed in two
parts so that remembering a text costs a small rebuild.

The history is one int64 buffer of finished texts, each followed by -1, the oldest tokens
evicted once ``capacity`` are held. The copy guess drafts from it through suffix indexes
(``suffix.SuffixIndex``, ``O(log N)`` a match): one over the settled bulk, one over the texts
remembered since. The small one is rebuilt when next asked for after a text was remembered;
the bulk when the recent part has grown past an eighth of it (or ``RECENT_TOKENS``), or a
quarter of the capacity was evicted meanwhile::

    buffer   [ text 1 -1 text 2 -1 text 3 -1 | text 4 -1 text 5 -1 ]
    indexes    settled (bulk)                  recent

Memory: 8 bytes a held token, plus 8 bytes an indexed one (the index's int32 text and suffix
array); the recent index holds at most an eighth of the bulk or ``RECENT_TOKENS``.
"""

from __future__ import annotations

import numpy as np

from lookahead.drafts.suffix import SuffixIndex

# the recent texts' index may grow this far before the bulk is rebuilt: a rebuild of a few
# thousand tokens costs a millisecond, and small histories then never rebuild their bulk
RECENT_TOKENS = 4096


class History:
    """Finished texts for the copy guess, at most ``capacity`` tokens (separators included;
    0 keeps none)."""

    def __init__(self, capacity: int = 1 << 16):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 0:
            raise ValueError(f"history must be an int >= 0 (tokens kept), got {capacity!r}")
        self.capacity = int(capacity)
        self._tokens = np.zeros(0, dtype=np.int64)
        self._settled: SuffixIndex | None = None
        self._settled_end = 0  # where the settled part ends in the buffer (after eviction)
        self._evicted = 0  # tokens evicted since the bulk was built
        self._recent: SuffixIndex | None = None

    @property
    def tokens(self) -> np.ndarray:
        """int64 ``[<= capacity]``: the newest texts remembered, each followed by -1."""
        return self._tokens

    def __len__(self) -> int:
        return int(self._tokens.shape[0])

    def indexes(self) -> tuple[SuffixIndex, ...]:
        """Suffix indexes over :attr:`tokens` (none while it is empty), built when first asked
        for after a text was remembered: the settled bulk and the texts since."""
        if self._settled is None and self._tokens.shape[0]:
            self._settled = SuffixIndex(self._tokens)
            self._settled_end, self._evicted, self._recent = self._tokens.shape[0], 0, None
        if self._recent is None and self._tokens.shape[0] > self._settled_end:
            self._recent = SuffixIndex(self._tokens[self._settled_end :])
        return tuple(index for index in (self._settled, self._recent) if index is not None)

    def remember(self, text: np.ndarray) -> None:
        """Keep a finished text (prompt and output); the oldest tokens go once ``capacity``
        tokens are held."""
        if not self.capacity:
            return
        joined = np.concatenate([self._tokens, np.asarray(text, dtype=np.int64), [-1]])
        evicted = max(joined.shape[0] - self.capacity, 0)
        self._tokens = joined[evicted:]
        self._settled_end -= evicted
        self._evicted += evicted
        self._recent = None
        recent = self._tokens.shape[0] - self._settled_end
        if self._settled is not None and (
            self._settled_end < 0
            or self._evicted > self.capacity // 4
            or recent > max(len(self._settled) // 8, RECENT_TOKENS)
        ):
            self._settled = None

    def restore(self, tokens: np.ndarray) -> None:
        """Hold ``tokens`` (a saved :attr:`tokens`; its newest ``capacity`` are kept)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        self._tokens = tokens[max(tokens.shape[0] - self.capacity, 0) :]
        self._settled, self._recent, self._settled_end, self._evicted = None, None, 0, 0

    @property
    def nbytes_bound(self) -> int:
        """The most bytes it can take: the buffer and its two indexes (the recent one counted
        as a second bulk)."""
        return self.capacity * 8 + 2 * self.capacity * (4 + 4)
