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

import time

import numpy as np
import torch
from transformers.cache_utils import DynamicCache, StaticCache, StaticLayer

from lookahead.config import LookaheadConfig
from lookahead.step.cache import trim_rows
from lookahead.step.costmodel import CostCurve, synchronize
from lookahead.step.host import upload
from lookahead.step.mask import attention_groups

BUCKETS = (1, 4, 8, 16, 32, 64)
REPEATS = 5  # timed runs of each bucket when calibrating (the fastest counts)


def full_static_cache(model, max_len: int) -> StaticCache:
    """A ``StaticCache`` of ``max_len`` entries whose layers all keep full length."""
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    cache.layers = [StaticLayer(max_cache_len=max_len) for _ in cache.layers]
    return cache


ROUND = 256  # cache lengths are rounded up to this, so requests of similar lengths share shapes


def reusable_static_cache(model, need: int, rows: int = 1) -> StaticCache:
    """The model's lookahead cache from an earlier call, emptied, when it holds ``need`` entries
    and matches the model's dtype and device; else a new one of ``need`` rounded up to ``ROUND``,
    kept on the model (``model._lookahead_cache``) as ``generate`` keeps its own ``_cache``: a
    compiled forward is specialised to the cache's shape, so a new shape means new graphs."""
    cache = getattr(model, "_lookahead_cache", None)
    param = next(model.parameters())
    if cache is not None and cache.layers[0].max_cache_len >= need and _fits(cache, param, rows):
        trim_rows(cache, 0)  # stale entries stay: every step's mask hides them
        return cache
    cache = full_static_cache(model, -(-need // ROUND) * ROUND)
    model._lookahead_cache = cache
    return cache


def _fits(cache: StaticCache, param: torch.Tensor, rows: int) -> bool:
    layer = cache.layers[0]
    if not layer.is_initialized:
        return True
    return layer.keys.dtype == param.dtype and layer.keys.device == param.device and layer.keys.shape[0] == rows


def bucket_for(q: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket holding q tokens, or q itself past the largest (run uncompiled)."""
    return next((b for b in buckets if b >= q), q)


class StaticSteps:
    """Runs and commits one sequence's steps on a full-length ``StaticCache``.

    Args:
        model: the causal LM (batch of one row).
        cache: from :func:`full_static_cache`, already holding the prefill.
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

    def prepare(self, calibrate: bool = True) -> None:
        """Before the prefill: compile every bucket not yet traced for this cache (a step of
        filler alone, rolled back), so that no decoding step waits for a compile, and, where
        ``calibrate``, time each bucket's compiled forward (the fastest of ``REPEATS``) into
        ``costs``, the curve the draft budget prices steps with. A static step attends over the
        whole cache, so its cost does not depend on how much of it is filled: measuring on the
        empty cache holds for every step. ``warmup_s`` is what it took; graphs, the traced
        buckets and the curve are kept with the cache for later calls."""
        if self.compiled is None:
            return
        started = time.perf_counter()
        param = next(self.model.parameters())
        if not self.cache.layers[0].is_initialized:  # allocate eagerly: never inside a traced graph
            self._run(
                self.model,
                torch.zeros((1, 1), dtype=torch.long, device=param.device),
                torch.zeros((1, 1), dtype=torch.long, device=param.device),
                None,
            )
        groups, _ = attention_groups(self.model, DynamicCache(config=self.model.config))
        seconds = []
        timing = calibrate and self.costs is None and self.buckets[0] == 1 and len(self.buckets) > 1
        for b in self.buckets:
            if b in self.warm and not timing:
                continue
            seconds.append(self._trace(b, groups, param, repeats=REPEATS if timing else 0))
            self.warm.add(b)
            self.graphs.add(b)
        if timing:
            self.costs = CostCurve.from_times(self.buckets, seconds)
            self.cache.__dict__["_lookahead_costs"] = self.costs
        trim_rows(self.cache, 0)
        self.warmup_s += time.perf_counter() - started

    def ready(self, costs: CostCurve | None, rows: int, given: bool, sharded: bool, stats) -> CostCurve | None:
        """Prepare one sequence's steps before its prefill (a batch of ``rows`` > 1 compiles
        each bucket at its first use) and return the curve to price them by: what each compiled
        bucket measured, unless a curve was ``given``, the model is ``sharded`` (every rank must
        price alike) or this is a batch (measured for one row); else ``costs`` at the buckets'
        sizes."""
        measure = costs is not None and not given and not sharded and rows == 1
        if rows == 1:
            self.prepare(calibrate=measure)
            stats.compiled_graphs += sorted(self.graphs)
            stats.warmup_s += self.warmup_s
        if costs is None:
            return None
        return self.costs if measure and self.costs is not None else costs.bucketed(self.buckets)

    def _trace(self, b: int, groups: dict, param: torch.Tensor, repeats: int) -> float:
        """Run a ``b``-token step of filler once (tracing it), then ``repeats`` times timed; the
        best seconds (0.0 without timed runs)."""
        dtype, device = self.model.dtype, param.device
        mask = torch.full((1, 1, b, self.max_len), torch.finfo(dtype).min, dtype=dtype, device=device)
        steps = torch.arange(b, device=device)
        mask[0, 0, steps, steps] = 0.0
        ids = torch.zeros((1, b), dtype=torch.long, device=device)
        positions = torch.zeros((1, b), dtype=torch.long, device=device)
        # one tensor per kind, as real steps have (dynamo guards on whether two are one)
        masks = mask if list(groups) == [None] else {name: mask.clone() for name in groups}
        devices = {p.device for p in self.model.parameters()}
        best = float("inf")
        for i in range(repeats + 1):
            trim_rows(self.cache, 0)
            synchronize(devices)
            started = time.perf_counter()
            self._run(self.compiled, ids, positions, masks)
            synchronize(devices)
            if i:  # the first run compiles (or warms) the graph
                best = min(best, time.perf_counter() - started)
        return best if repeats else 0.0


def static_steps(model, input_ids, model_kwargs: dict, generation_config, config: LookaheadConfig):
    """Steps on a ``StaticCache`` when ``generate`` prepared one (``cache_implementation="static"``
    or a ``StaticCache`` passed in), compiled where ``generate`` would compile its forward; else None.

    The cache ``generate`` made holds ``max_length`` entries and sliding layers as ring buffers;
    lookahead replaces it by one with room for its widest step and full-length layers
    (lookahead.step.static), kept on the model for later calls as ``generate`` keeps its own (same
    shapes, so no recompilation), and ``model_kwargs["cache"]`` then holds it.
    """
    given = model_kwargs.get("cache")
    if not isinstance(given, StaticCache):
        return None
    longest = max(generation_config.max_length, generation_config.max_cache_len or 0)  # sized as generate sizes
    room = max(max(config.static_buckets), config.widest_step)  # a step wider than every bucket runs as it is
    cache = reusable_static_cache(model, longest + room, rows=input_ids.shape[0])
    model_kwargs["cache"] = cache
    compiled = None
    criteria = {"cache": cache, "past_key_values": cache}  # transformers 5.19 reads the old name
    if model._valid_auto_compile_criteria(criteria, generation_config):
        compiled = model.get_compiled_call(generation_config.compile_config)
    return StaticSteps(model, cache, compiled, config.static_buckets, room)
