"""A suffix index over fixed texts (earlier requests, a corpus): where the current text's end
occurred in them, and what followed, in ``O(m log N)`` per match of m tokens.

The index is the texts as one int32 array (each text followed by -1) and its suffix array,
int32 too: 8 bytes per indexed token, nothing else. ``lookahead index build`` writes one for
a corpus; :class:`~lookahead.drafts.history.History` keeps two over the texts of earlier requests.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property

import numpy as np

from lookahead import files
from lookahead.drafts import suffix_kernels

SORT_DEPTH = 64  # suffixes are sorted by their first SORT_DEPTH tokens: more than any match and draft
BYTES_PER_TOKEN = 8


def suffix_array(text: np.ndarray, depth: int = SORT_DEPTH) -> np.ndarray:
    """int32 ``[N]``: the start positions of ``text``'s suffixes in the order of their first
    ``depth`` tokens (-1 separators sort before every token; an ended suffix before both),
    ties by position. Prefix doubling with numpy: ``O(N log N log depth)``."""
    n = text.shape[0]
    if n >= 1 << 31:
        raise ValueError(f"a suffix index holds fewer than 2**31 tokens, got {n}")
    rank = text.astype(np.int64) + 2  # -1 -> 1; "past the end" is 0
    order = np.argsort(rank, kind="stable")
    k = 1
    while k < depth and n > 1:
        second = np.zeros(n, dtype=np.int64)
        second[: n - k] = rank[k:]
        order = np.lexsort((second, rank))
        first, after = rank[order], second[order]
        change = np.ones(n, dtype=np.int64)
        change[1:] = (first[1:] != first[:-1]) | (after[1:] != after[:-1])
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.cumsum(change)
        if rank.max() == n:  # every suffix has its own rank: fully sorted
            break
        k *= 2
    return order.astype(np.int32)


def join_texts(texts: Iterable[np.ndarray]) -> np.ndarray:
    """The texts as one int32 array, each followed by -1."""
    parts = []
    for text in texts:
        parts.append(np.asarray(text, dtype=np.int32))
        parts.append(np.array([-1], dtype=np.int32))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


class SuffixIndex:
    """A read-only suffix index over ``text`` (int32 ``[N]``, texts separated by -1).

    ``sa`` is its suffix array when already built (a loaded file), else it is built here.
    """

    def __init__(self, text: np.ndarray, sa: np.ndarray | None = None):
        self.text = np.ascontiguousarray(text, dtype=np.int32)
        self.sa = np.ascontiguousarray(sa if sa is not None else suffix_array(self.text), dtype=np.int32)
        self.vocabulary = ""  # the fingerprint of its tokenizer, as KeptState.vocabulary

    @classmethod
    def from_texts(cls, texts: Iterable[np.ndarray]) -> SuffixIndex:
        return cls(join_texts(texts))

    def __len__(self) -> int:
        """Tokens indexed (separators included)."""
        return self.text.shape[0]

    @cached_property
    def largest_id(self) -> int:
        """The largest token id indexed (-1 when none): read once, the index never changes."""
        return int(self.text.max()) if self.text.size else -1

    @property
    def nbytes(self) -> int:
        return self.text.nbytes + self.sa.nbytes

    def count(self, pattern) -> int:
        """How often ``pattern`` (a token sequence) occurs in the texts."""
        query = np.asarray(pattern, dtype=np.int32)
        if not query.shape[0]:
            return len(self)
        lo, hi = suffix_kernels.suffix_range(self.text, self.sa, query, query.shape[0])
        return int(hi - lo)

    def save(self, path, tokenizer=None) -> None:
        """Write ``path`` as a numpy ``.npz`` archive (plain arrays, no pickle), marked with
        ``tokenizer``'s fingerprint where given (``lookahead index build`` gives it)."""
        marks = files.marks("suffix index", tokenizer, self.vocabulary)
        np.savez(path, text=self.text, sa=self.sa, format=np.array([1]), **marks)

    @classmethod
    def load(cls, path, vocab_size: int | None = None, tokenizer=None) -> SuffixIndex:
        """Read an index written by :meth:`save` (arrays only, never a pickle). A file is
        input: anything but an index of ids below ``vocab_size``, made with ``tokenizer``
        where both name one, raises ``ValueError`` naming what it is not."""
        data = files.read(path, "suffix index", ("text", "sa"), tokenizer)
        text, sa = data["text"], data["sa"]
        files.check_index(path, text, sa, vocab_size)
        index = cls(text, sa)
        index.vocabulary = files.stored_fingerprint(data)
        return index
