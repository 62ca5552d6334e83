"""Lookahead steps on a ``StaticCache``: fixed shapes, so the forward can be compiled once per bucket.

A static layer preallocates ``[B, H, M, D]`` and writes a forward's q entries at its own
counter (``cumulative_length``) plus ``arange(q)``. A step therefore runs with the counter at
the committed length L, and writes ``[root | window | draft | filler]`` at ``L .. L+b-1``. The
commit copies the accepted nodes' entries down to ``L .. L+k-1`` (one ``index_copy_`` per
layer, none when they already sit there) and sets the counter to ``L + k``; what lies beyond
stays in the buffer, masked, until a later step overwrites it. (A batch commits its rows the
same way, with holes: ``lookahead.step.cache.commit_rows`` moves the counter of a static layer.)

Every layer is a full-length ``StaticLayer``, sliding-window ones included: a static sliding
layer is a ring buffer, which cannot roll a step back, so windows are applied by position in
the mask (as the batch decoder does).

A step of q tokens is padded to the smallest bucket b >= q (1, 4, 8, 16, 32, 64 by default)
with filler tokens that see only themselves, so a compiled forward (``dynamic=False``) meets
one shape per bucket. The mask always spans the whole cache: ``[B, 1, b, M]``::

    keys:   0 .. L-1      L .. L+q-1   L+q .. L+b-1   L+b .. M-1
    step    committed     the step's   (filler)       stale / free
    rows    (as built)    tree mask    blocked        blocked
    filler  blocked       blocked      itself only    blocked
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import StaticCache

from lookahead.step.cache import trim_rows
from lookahead.step.costmodel import CostCurve
from lookahead.step.host import upload

BUCKETS = (1, 4, 8, 16, 32, 64)


def bucket_for(q: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket holding q tokens, or q itself past the largest (run uncompiled)."""
    return next((b for b in buckets if b >= q), q)


class StaticSteps:
    """Runs and commits one sequence's steps on a full-length ``StaticCache``.

    Args:
        model: the causal LM (batch of one row).
        cache: from :func:`lookahead.runtime.static.full_static_cache`, already holding the prefill.
        compiled: the forward to use for bucketed steps (``model.get_compiled_call(...)``), or
            ``None`` for the eager ``model``.
        buckets: step sizes a compiled forward is built for.
        room: the widest step the decoder may feed (``LookaheadConfig.widest_step``, at least
            the largest bucket): a batch gathers its holes away before they would leave less.
    """

    def __init__(
        self, model, cache: StaticCache, compiled=None, buckets: tuple[int, ...] = BUCKETS, room: int | None = None
    ):
        self.model = model
        self.cache = cache
        self.compiled = compiled
        self.buckets = tuple(sorted(buckets))
        self.max_len = cache.layers[0].max_cache_len
        self.room = room if room is not None else max(self.buckets)  # the widest step that may come
        self.graphs: set[int] = set()  # the bucket sizes run through the compiled forward
        # buckets already traced for this cache's shapes, and their measured costs (kept with the cache)
        self.warm: set[int] = cache.__dict__.setdefault("_lookahead_warm", set())
        self.costs: CostCurve | None = cache.__dict__.get("_lookahead_costs")
        self.warmup_s = 0.0

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, mask, past_len: int) -> torch.Tensor:
        """Logits ``[q, V]`` of the step ``ids`` (long ``[1, q]``) at ``positions`` (``[1, q]``)
        under ``mask`` (``[1, 1, q, past_len + q]``, or a dict of them per attention kind)."""
        q = ids.shape[1]
        b = bucket_for(q, self.buckets)
        if past_len + b > self.max_len:
            raise RuntimeError(f"static cache of {self.max_len} entries cannot take a {b}-token step after {past_len}")
        if b > q:  # filler: copies of the root at its position
            ids = torch.cat([ids, ids[:, :1].expand(1, b - q)], dim=1)
            positions = torch.cat([positions, positions[:, :1].expand(1, b - q)], dim=1)
        full = (
            {name: self._full_mask(m, past_len, q, b) for name, m in mask.items()}
            if isinstance(mask, dict)
            else self._full_mask(mask, past_len, q, b)
        )
        forward = self.model
        if self.compiled is not None and b in self.buckets:
            forward = self.compiled
            self.graphs.add(b)
        return self._run(forward, ids, positions, full).logits[0, :q]

    def run_rows(self, ids: torch.Tensor, positions: torch.Tensor, mask) -> torch.Tensor:
        """A batch step: logits ``[B, b, V]`` of ``ids`` (long ``[B, b]``, already padded to a
        bucket) under ``mask`` (``[B, 1, b, L + b]`` or a dict of them), its keys padded to the
        cache's length; compiled when ``b`` is a bucket."""
        b = ids.shape[1]
        full = {name: self._span(m) for name, m in mask.items()} if isinstance(mask, dict) else self._span(mask)
        forward = self.compiled if self.compiled is not None and b in self.buckets else self.model
        if forward is self.compiled:
            self.graphs.add(b)
        return self._run(forward, ids, positions, full).logits

    def _span(self, mask: torch.Tensor) -> torch.Tensor:
        """``mask`` with its key axis padded to the whole cache, the extra keys blocked."""
        full = torch.full(
            (*mask.shape[:-1], self.max_len), torch.finfo(mask.dtype).min, dtype=mask.dtype, device=mask.device
        )
        full[..., : mask.shape[-1]] = mask
        return full

    def _run(self, forward, ids: torch.Tensor, positions: torch.Tensor, mask):
        return forward(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=self.cache,
            use_cache=True,
            return_dict=True,
        )

    def _full_mask(self, mask: torch.Tensor, past_len: int, q: int, b: int) -> torch.Tensor:
        blocked = torch.finfo(mask.dtype).min
        full = torch.full((1, 1, b, self.max_len), blocked, dtype=mask.dtype, device=mask.device)
        full[:, :, :q, : past_len + q] = mask
        if b > q:
            filler = torch.arange(q, b, device=mask.device)
            full[0, 0, filler, past_len + filler] = 0.0
        return full

    def commit(self, past_len: int, keep: list[int]) -> None:
        """Keep the step entries at ``keep`` (increasing, starting at the root's 0) as the
        entries ``past_len .. past_len + k - 1``; the counter moves to ``past_len + k``."""
        k = len(keep)
        moved = keep[-1] != k - 1
        if moved:
            device = self.cache.layers[0].keys.device
            dst = torch.arange(past_len, past_len + k, device=device)
            src = upload(device, np.array(keep))[0] + past_len
            for layer in self.cache.layers:
                if layer.is_initialized:
                    d, s = dst.to(layer.keys.device), src.to(layer.keys.device)
                    layer.keys.index_copy_(2, d, layer.keys.index_select(2, s))
                    layer.values.index_copy_(2, d, layer.values.index_select(2, s))
        trim_rows(self.cache, past_len + k)
