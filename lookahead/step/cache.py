"""Committing a step's accepted KV entries to the model's ``DynamicCache``.

After a step's forward, every layer holds ``[committed prefix | q step entries]``. Only the
root and the accepted path survive: their entries move down to just after the prefix, the
rest is cut off. Nothing already committed is ever recomputed.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer, StaticLayer

from lookahead.step.host import upload

SUPPORTED_LAYERS = (DynamicLayer, DynamicSlidingWindowLayer)


def check_cache(cache) -> None:
    """Raise unless every layer is one whose entries can be moved and cut."""
    if not isinstance(cache, DynamicCache):
        raise NotImplementedError(
            f"lookahead decoding needs a DynamicCache, got {type(cache).__name__}; "
            "leave `cache`/`cache_implementation` unset"
        )
    for layer in cache.layers:
        if type(layer) not in SUPPORTED_LAYERS:
            raise NotImplementedError(
                f"lookahead decoding cannot roll back cache layers of type {type(layer).__name__}"
            )


def prepare_cache(cache: DynamicCache) -> bool:
    """Make sliding-window layers keep a step's entries until ``commit`` trims them; returns
    whether there are any (``commit``'s ``sliding``)."""
    sliding = False
    for layer in cache.layers:
        if isinstance(layer, DynamicSlidingWindowLayer):
            layer.activate_past_recording()
            sliding = True
    return sliding


def held_from(layer, past_len: int) -> int:
    """First cache index a layer still holds, once ``past_len`` entries were committed: 0 for
    a full layer, later for a sliding one, which keeps only a recent stretch.

    Cache tensors are ``[batch, heads, seq, head_dim]``.
    """
    return past_len - layer.keys.shape[2]


def commit(cache: DynamicCache, past_len: int, step_len: int, keep: list[int], sliding: bool | None = None) -> None:
    """Keep the step entries at indices ``keep`` (host ints, increasing, from the root's 0)
    after the prefix (``sliding``: whether any layer slides, as :func:`prepare_cache` said;
    None: look).

    Every layer ends with ``past_len + k`` logical entries; sliding layers then hold only
    their last ``sliding_window - 1``, as after plain decoding. Entries that already sit in
    place (a path of consecutive nodes) are not copied: no index reaches the device.
    """
    k = len(keep)
    contiguous = keep[-1] == k - 1
    layers = cache.layers
    if sliding is None:
        sliding = any(isinstance(layer, DynamicSlidingWindowLayer) for layer in layers)
    if contiguous and k == step_len and not sliding:
        return  # every entry the step wrote stays where it is (a plain step, or all nodes held)
    index = None if contiguous else upload(layers[0].keys.device, np.array(keep))[0]
    sources = {}  # (device, start) -> the source index there: one per device and layer length
    for layer in layers:
        if not layer.is_initialized:
            continue
        start = layer.keys.shape[2] - step_len
        if not contiguous:
            where = (layer.keys.device, start)  # layers may sit on other devices (device_map)
            src = sources.get(where)
            if src is None:
                src = sources[where] = index.to(layer.keys.device) + start
            layer.keys[:, :, start : start + k] = layer.keys.index_select(2, src)
            layer.values[:, :, start : start + k] = layer.values.index_select(2, src)
        end = start + k
        if isinstance(layer, DynamicSlidingWindowLayer):
            begin = max(end - layer.sliding_window + 1, 0)
            layer.cumulative_length = past_len + k
        else:
            begin = 0
        layer.keys = layer.keys[:, :, begin:end]
        layer.values = layer.values[:, :, begin:end]


def commit_rows(cache, past_len: int, keep: torch.Tensor) -> None:
    """Batch commit: row r keeps its step entries ``keep[r]`` (long ``[B, m]``) after the
    common prefix of ``past_len`` entries; every layer ends ``past_len + m`` long.

    Rows that accepted fewer than m tokens repeat an index to fill their row: those entries
    are holes, which the caller marks as never visible. Only full-length layers
    (``DynamicLayer``, ``StaticLayer``) are supported here: sliding layers drop entries by
    index, and holes would make them drop visible ones.
    """
    m = keep.shape[1]
    for layer in cache.layers:
        index = keep.to(layer.keys.device) + past_len
        index = index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
        layer.keys[:, :, past_len : past_len + m] = layer.keys.gather(2, index)
        layer.values[:, :, past_len : past_len + m] = layer.values.gather(2, index)
    trim_rows(cache, past_len + m)


def trim_rows(cache, length: int) -> None:
    """Cut every layer to its first ``length`` entries (a batch step whose rows all kept
    their first nodes: those sit where a commit would move them). A static layer keeps its
    buffer and moves its counter: what lies beyond is overwritten by later steps."""
    for layer in cache.layers:
        if isinstance(layer, StaticLayer):
            layer.cumulative_length.fill_(length)
        else:
            layer.keys = layer.keys[:, :, :length]
            layer.values = layer.values[:, :, :length]


def gather_rows(cache, index: torch.Tensor) -> None:
    """Replace every layer's entries by ``entries[r, :, index[r]]`` (long ``[B, L']``)."""
    for layer in cache.layers:
        full = index.to(layer.keys.device)[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
        keys, values = layer.keys.gather(2, full), layer.values.gather(2, full)
        if isinstance(layer, StaticLayer):  # in place: a static buffer keeps its address
            layer.keys[:, :, : index.shape[1]] = keys
            layer.values[:, :, : index.shape[1]] = values
        else:
            layer.keys, layer.values = keys, values
    trim_rows(cache, index.shape[1])
