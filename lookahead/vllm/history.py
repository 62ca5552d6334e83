"""Earlier requests' texts, kept across requests as suffix indexes, bounded in tokens.

vLLM's engine finishes requests one by one, so the history grows a text at a time. A single
index would be rebuilt whole for each new text; here the texts sit in tiers (a log-structured
merge): a new text gets an index of its own, and the newest tiers merge while the newer one
is at least half the older one's size, so each token is re-indexed ``O(log N)`` times and a
lookup asks ``O(log N)`` indexes. No tier grows past a quarter of the bound; once the history
holds more than ``max_tokens`` tokens, the oldest tiers go whole.

Memory: 8 bytes a token (``SuffixIndex``: the text and its suffix array, int32 each), at most
``max_tokens`` tokens (plus one text while its tier is built).
"""

from __future__ import annotations

import numpy as np

from lookahead.drafts.suffix import SuffixIndex, join_texts


class History:
    """Texts of finished requests as suffix-index tiers, oldest first.

    Args:
        max_tokens: the most tokens kept (separators included); 0 keeps none. A text longer
            than a quarter of it keeps its last quarter.
    """

    def __init__(self, max_tokens: int):
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be an int >= 0 (tokens kept), got {max_tokens!r}")
        self.max_tokens = max_tokens
        self._tiers: list[SuffixIndex] = []

    @property
    def tier_cap(self) -> int:
        """The largest tier a merge may make: a quarter of the bound (so that dropping the
        oldest tier forgets at most about a quarter of the history)."""
        return max(self.max_tokens // 4, 1)

    def __len__(self) -> int:
        """Tokens held, separators included."""
        return sum(len(tier) for tier in self._tiers)

    @property
    def nbytes(self) -> int:
        return sum(tier.nbytes for tier in self._tiers)

    def indexes(self) -> list[SuffixIndex]:
        """The tiers, oldest first (what ``CopyDrafter``'s ``history`` callable returns)."""
        return self._tiers

    def add(self, text: np.ndarray) -> None:
        """Keep ``text`` (token ids, ``[n]``); the oldest tiers go past ``max_tokens``."""
        if not self.max_tokens:
            return
        text = np.asarray(text, dtype=np.int32)[-(self.tier_cap - 1) :]  # room for its separator
        if not text.shape[0]:
            return
        self._tiers.append(SuffixIndex(join_texts([text])))
        while len(self._tiers) > 1 and self._mergeable(self._tiers[-2], self._tiers[-1]):
            newer = self._tiers.pop()
            older = self._tiers.pop()
            self._tiers.append(SuffixIndex(np.concatenate([older.text, newer.text])))
        while len(self) > self.max_tokens:
            self._tiers.pop(0)

    def _mergeable(self, older: SuffixIndex, newer: SuffixIndex) -> bool:
        return 2 * len(newer) >= len(older) and len(older) + len(newer) <= self.tier_cap
