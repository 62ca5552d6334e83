"""Setting up lookahead's steps on a ``StaticCache`` (see :mod:`lookahead.step.static`): the
cache with full-length layers, kept on the model between calls, and every step-size bucket
compiled (and timed into the curve that prices steps) before the prefill."""

from __future__ import annotations

import time

import torch
from transformers.cache_utils import DynamicCache, StaticCache, StaticLayer

from lookahead.config import LookaheadConfig
from lookahead.step.cache import trim_rows
from lookahead.step.costmodel import CostCurve
from lookahead.step.host import synchronize
from lookahead.step.mask import attention_groups
from lookahead.step.static import StaticSteps

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


def prepare(steps: StaticSteps, calibrate: bool = True) -> None:
    """Before the prefill: compile every bucket not yet traced for this cache (a step of
    filler alone, rolled back), so that no decoding step waits for a compile, and, where
    ``calibrate``, time each bucket's compiled forward (the fastest of ``REPEATS``) into
    ``costs``, the curve the draft budget prices steps with. A static step attends over the
    whole cache, so its cost does not depend on how much of it is filled: measuring on the
    empty cache holds for every step. ``warmup_s`` is what it took; graphs, the traced
    buckets and the curve are kept with the cache for later calls."""
    if steps.compiled is None:
        return
    started = time.perf_counter()
    param = next(steps.model.parameters())
    if not steps.cache.layers[0].is_initialized:  # allocate eagerly: never inside a traced graph
        steps._run(
            steps.model,
            torch.zeros((1, 1), dtype=torch.long, device=param.device),
            torch.zeros((1, 1), dtype=torch.long, device=param.device),
            None,
        )
    groups, _ = attention_groups(steps.model, DynamicCache(config=steps.model.config))
    seconds = []
    timing = calibrate and steps.costs is None and steps.buckets[0] == 1 and len(steps.buckets) > 1
    for b in steps.buckets:
        if b in steps.warm and not timing:
            continue
        seconds.append(_trace(steps, b, groups, param, repeats=REPEATS if timing else 0))
        steps.warm.add(b)
        steps.graphs.add(b)
    if timing:
        steps.costs = CostCurve.from_times(steps.buckets, seconds)
        steps.cache.__dict__["_lookahead_costs"] = steps.costs
    trim_rows(steps.cache, 0)
    steps.warmup_s += time.perf_counter() - started


def ready(steps: StaticSteps, costs: CostCurve | None, rows: int, given: bool, sharded: bool, stats):
    """Prepare one sequence's steps before its prefill (a batch of ``rows`` > 1 compiles
    each bucket at its first use) and return the curve to price them by: what each compiled
    bucket measured, unless a curve was ``given``, the model is ``sharded`` (every rank must
    price alike) or this is a batch (measured for one row); else ``costs`` at the buckets'
    sizes."""
    measure = costs is not None and not given and not sharded and rows == 1
    if rows == 1:
        prepare(steps, calibrate=measure)
        stats.compiled_graphs += sorted(steps.graphs)
        stats.warmup_s += steps.warmup_s
    if costs is None:
        return None
    return steps.costs if measure and steps.costs is not None else costs.bucketed(steps.buckets)


def _trace(steps: StaticSteps, b: int, groups: dict, param: torch.Tensor, repeats: int) -> float:
    """Run a ``b``-token step of filler once (tracing it), then ``repeats`` times timed; the
    best seconds (0.0 without timed runs)."""
    dtype, device = steps.model.dtype, param.device
    mask = torch.full((1, 1, b, steps.max_len), torch.finfo(dtype).min, dtype=dtype, device=device)
    diagonal = torch.arange(b, device=device)
    mask[0, 0, diagonal, diagonal] = 0.0
    ids = torch.zeros((1, b), dtype=torch.long, device=device)
    positions = torch.zeros((1, b), dtype=torch.long, device=device)
    # one tensor per kind, as real steps have (dynamo guards on whether two are one)
    masks = mask if list(groups) == [None] else {name: mask.clone() for name in groups}
    devices = {p.device for p in steps.model.parameters()}
    best = float("inf")
    for i in range(repeats + 1):
        trim_rows(steps.cache, 0)
        synchronize(devices)
        started = time.perf_counter()
        steps._run(steps.compiled, ids, positions, masks)
        synchronize(devices)
        if i:  # the first run compiles (or warms) the graph
            best = min(best, time.perf_counter() - started)
    return best if repeats else 0.0
