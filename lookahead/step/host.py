"""A step's traffic between host and device: one upload of its inputs, one read of its logits.

Every read of a device tensor on the host (``.cpu()``, ``.tolist()``, ``.item()``) waits for
the device to finish, and so does a copy from pageable host memory to the device. A step needs
from its logits the argmax of every fed row (greedy verification and the window's next level
read it) and, with a successor table, the top-k of every fed row: computed on the device and
copied to the host together (``fetch``), or read in place by numpy when the logits are
already on the host. Its inputs (token ids, the tree's depths, anchors and
ancestry) go up together too, from pinned memory without waiting (``upload``).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from lookahead.stats import LookaheadStats
from lookahead.step import kernels


def upload(device, *arrays: np.ndarray) -> list[torch.Tensor]:
    """The host arrays (any int or bool dtype) on ``device`` as int64 tensors of their shapes,
    in one copy: pinned and non-blocking on CUDA, a view of the host memory on the CPU."""
    device = torch.device(device)
    arrays = [np.asarray(a) for a in arrays]
    flat = np.concatenate([a.reshape(-1) for a in arrays]).astype(np.int64, copy=False)
    moved = torch.from_numpy(flat)
    if device.type == "cuda":
        moved = moved.pin_memory().to(device, non_blocking=True)
    elif device.type != "cpu":
        moved = moved.to(device)
    out, at = [], 0
    for a in arrays:
        out.append(moved[at : at + a.size].view(a.shape))
        at += a.size
    return out


def views(*arrays: np.ndarray) -> list[torch.Tensor]:
    """The host arrays as CPU tensors over the same memory: what :func:`upload` is for a step
    that runs on the CPU and built its inputs (its mask too) on the host."""
    return [torch.from_numpy(a) for a in arrays]


def blocked_words(dtype: torch.dtype) -> np.ndarray:
    """The int16 words of ``dtype``'s most negative value, what a host-made mask blocks with
    (``kernels.additive_mask``): one for a half dtype, two for float32."""
    return torch.tensor([torch.finfo(dtype).min], dtype=dtype).view(torch.int16).numpy().copy()


def mask_words(past_visible: np.ndarray, allowed: np.ndarray, blocked: np.ndarray) -> np.ndarray:
    """A step's additive mask made on the host in one kernel call, as int16 words
    ``[1, 1, q, (p + q) * w]`` that a torch view as the model's dtype reads as ``[1, 1, q,
    p + q]``: 0 where a query may attend (a kept past entry, ``past_visible`` bool ``[p]``, or
    a step token it is ``allowed`` to see, bool ``[q, q]``), the dtype's minimum elsewhere
    (``blocked``: its :func:`blocked_words`, w of them)."""
    p, q = past_visible.shape[0], allowed.shape[0]
    words = np.empty((1, 1, q, (p + q) * blocked.shape[0]), dtype=np.int16)
    kernels.additive_mask(past_visible, allowed, blocked, words[0, 0])
    return words


def needs_widening(logits: torch.Tensor) -> bool:
    """Whether a decode's logits (like these) are read as float32 copies: on the CPU, half-
    precision rows widened once (float32 holds every half value exactly), so the fetch, the
    walk's rules and the guesses' race read one copy as views instead of converting rows
    each; elsewhere, and float32 rows, they are read as they are. Asked once per decode:
    after a forward even a dtype check costs."""
    return logits.device.type == "cpu" and logits.dtype in (torch.bfloat16, torch.float16)


def fetch(logits: torch.Tensor, k: int = 0) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(argmax, top-k, their logits)`` of ``logits`` (``[..., V]``, ``V >= 2``) as host
    numpy arrays: argmax int64 ``[...]`` (the first maximum, as ``generate``'s argmax takes it;
    the first NaN where a row has one) and, for ``k > 0``, the k best ids (int64 ``[..., k]``,
    best first) and their logits (float32 ``[..., k]``) (both None for ``k = 0``). Numpy,
    not torch: the walk and the sources read them a few values at a time, and after a
    forward each torch op costs more than the reads. On a device: one transfer (two where the top logit ties)
    and one top-k pass over the vocabulary. On the CPU a kernel reads the logits in place."""
    return _fetch_host(logits, k) if logits.device.type == "cpu" else _fetch_device(logits, k)


def _fetch_device(logits: torch.Tensor, k: int):
    """``fetch`` for logits on an accelerator: the work there, one copy back."""
    if not k:
        return logits.argmax(-1).cpu().numpy(), None, None
    # the top-k's first is the argmax unless the best two tie (or are NaN): then argmax's
    # first maximum may be another id, read in a second transfer (rare: exact ties)
    values, top = logits.topk(max(k, 2), dim=-1)
    tied = ((values[..., 0] == values[..., 1]) | values[..., 0].isnan()).long()
    # the logits travel as their float32 bits, so ids, ties and logits are one copy
    bits = values[..., :k].float().contiguous().view(torch.int32).long()
    host = torch.cat([top[..., :k], bits, tied[..., None]], dim=-1).cpu()
    preds = host[..., 0] if not host[..., -1].any() else logits.argmax(-1).cpu()
    scores = host[..., k : 2 * k].int().contiguous().view(torch.float32)
    return preds.numpy(), host[..., :k].numpy().copy(), scores.numpy()


def _fetch_host(logits: torch.Tensor, k: int):
    """``fetch`` for CPU logits: numpy's argmax over the rows, or for ``k > 0`` one kernel call
    (``kernels.top_k_rows``) that makes the argmax and the top-k together. Right after a
    forward every distinct operation runs from cold caches, so this one takes as few as it
    can: a step's ``[B, q, V]`` logits go through without a reshape."""
    rows = logits.detach() if logits.requires_grad else logits
    if rows.dtype != torch.float32:
        rows = rows.float()  # numpy has no bfloat16; float32 holds every half value exactly
    values = rows.numpy()
    if not k:
        return values.argmax(-1), None, None  # the first maximum or NaN, as torch's argmax
    shape = values.shape[:-1]
    if values.ndim != 3:
        values = values.reshape(-1, 1, values.shape[-1])
    preds, top, scores = kernels.top_k_rows(values, k)
    if len(shape) != 2:
        preds, top, scores = preds.reshape(shape), top.reshape(*shape, k), scores.reshape(*shape, k)
    return preds, top, scores


def wait(logits: torch.Tensor) -> torch.Tensor:
    """``logits``, once the forward that makes them has run: CUDA runs it asynchronously, so
    a clock read at once would time the launch only. The step reads its logits right after
    (:func:`fetch`), so this moves that wait before the clock instead of adding one; on the
    CPU it does nothing."""
    if logits.is_cuda:
        torch.cuda.synchronize(logits.device)  # the last device of a device_map: it waited for the rest
    return logits


def timed(stats: LookaheadStats, run, rows: int = 1) -> torch.Tensor:
    """``run()`` (a forward's logits) once the device is done, counted and timed in ``stats``
    as one forward over ``rows`` rows."""
    started = time.perf_counter()
    logits = wait(run())
    stats.forward_s += time.perf_counter() - started
    stats.forwards += 1
    stats.row_forwards += rows
    return logits


def synchronize(devices) -> None:
    """Wait for every CUDA device of ``devices`` (a forward over a device_map ends on the last)."""
    for device in devices:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
