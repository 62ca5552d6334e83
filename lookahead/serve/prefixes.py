"""Conversations' cache entries kept across requests, so that a turn's prefill runs only what is new.

A multi-turn session re-sends the conversation so far plus a new message; an agent re-sends its
transcript. The server keeps, for each recent request, the ``DynamicCache`` its decode ended
with and the token ids it holds. A new request whose prompt starts with one of them (at least
``MIN_TOKENS`` in common) takes that cache, cut to the common prefix, and lookahead's prefill
runs only the tokens after it (as ``generate`` does when handed a cache holding a prompt
prefix). The tokens stay ``generate``'s: the entries are the model's own for the same tokens at
the same positions.

Bounded by bytes: the least recently used entries go once the kept tensors pass
``limit_bytes``. An entry is taken out while its request decodes (no two requests ever share a
cache) and put back, longer, when it ends well; a cancelled or failed request's cache is dropped.

Like the pool, kept entries make a request whose prompt an earlier one shared start sooner: a
timing side channel between clients of one server (docs/serve.md); ``--prefix-cache-mib 0``
keeps none.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

MIN_TOKENS = 32  # a shorter common prefix saves less than finding and cutting the entry costs


class PrefixCaches:
    """Up to ``limit_bytes`` of caches, each with the token ids ``[n]`` it holds, least recently
    used first out. Thread-safe."""

    def __init__(self, limit_bytes: int):
        if limit_bytes < 0:
            raise ValueError(f"limit_bytes must be >= 0, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self._entries: OrderedDict[int, tuple[np.ndarray, DynamicCache, int]] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()
        self.reused_tokens = 0  # prompt tokens not prefilled again, over every request

    @property
    def enabled(self) -> bool:
        return self.limit_bytes > 0

    def take(self, prompt: torch.Tensor) -> tuple[DynamicCache | None, int]:
        """For ``prompt`` (``[n]`` token ids): the kept cache sharing the longest prefix with it,
        removed from the store and cut to at most ``n - 1`` tokens (the prefill needs one), and
        how many tokens it holds; ``(None, 0)`` when none shares ``MIN_TOKENS``."""
        tokens = prompt.detach().cpu().numpy()
        with self._lock:
            best, common = None, 0
            for key, (held, _cache, _size) in self._entries.items():
                shared = _common_prefix(held, tokens)
                if shared > common:
                    best, common = key, shared
            keep = min(common, len(tokens) - 1)
            if best is None or keep < MIN_TOKENS:
                return None, 0
            _held, cache, _size = self._entries.pop(best)
            self.reused_tokens += keep
        if cache.get_seq_length() > keep:  # the cache is this request's alone now: cut outside the lock
            cache.crop(keep - cache.get_seq_length())  # a negative count: entries dropped from the end
        return cache, keep

    def keep(self, cache: DynamicCache, sequence: torch.Tensor) -> None:
        """After a request that ended well: its cache, holding the first ``get_seq_length()``
        tokens of ``sequence`` (``[n]``), kept for later requests; then the oldest entries go
        until the store fits. A cache with layers other than full-attention ones is not kept."""
        length = cache.get_seq_length()
        if not self.enabled or length < MIN_TOKENS or not _croppable(cache):
            return
        size = _bytes(cache)
        if size > self.limit_bytes:
            return
        with self._lock:
            self._entries[self._next] = (sequence[:length].detach().cpu().numpy().copy(), cache, size)
            self._next += 1
            while sum(entry[2] for entry in self._entries.values()) > self.limit_bytes:
                self._entries.popitem(last=False)

    def describe(self) -> dict:
        """For ``GET /lookahead/stats``: entries, their tokens and bytes, the limit, tokens reused."""
        with self._lock:
            entries = list(self._entries.values())
        return {
            "entries": len(entries),
            "tokens": sum(len(held) for held, _, _ in entries),
            "bytes": sum(size for _, _, size in entries),
            "limit_bytes": self.limit_bytes,
            "reused_tokens": self.reused_tokens,
        }


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def _croppable(cache) -> bool:
    """Only full-attention layers: a sliding layer past its window cannot be cut back."""
    return type(cache) is DynamicCache and all(type(layer) is DynamicLayer for layer in cache.layers)


def _bytes(cache: DynamicCache) -> int:
    total = 0
    for layer in cache.layers:
        for tensor in (layer.keys, layer.values):
            if tensor is not None:
                total += tensor.numel() * tensor.element_size()
    return total
