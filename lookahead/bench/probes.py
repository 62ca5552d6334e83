"""Measurement probes: forward-pass hooks and peak memory.

Methods that do not report their own statistics (plain ``model.generate``, transformers' prompt
lookup) are measured from outside with forward hooks on the model: the hooks count forwards,
sum the time spent inside them, and record where each forward starts in the sequence, from
which the tokens appended per step follow.
"""

from __future__ import annotations

import resource
import sys
import time

import torch


class ForwardProbe:
    """Context manager: hooks ``model.forward`` while active.

    Attributes:
        forwards: forward passes seen.
        forward_s: seconds spent inside them (CUDA synchronised on both sides).
        first_s: seconds of the first one (the prefill).
        starts: sequence position of each forward's first input token (``None`` if unknown).
    """

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.cuda = _on_cuda(model)
        self.forwards = 0
        self.forward_s = 0.0
        self.first_s: float | None = None  # the prefill's forward
        self.starts: list[int | None] = []
        self._t0 = 0.0
        self._handles = []

    def __enter__(self) -> ForwardProbe:
        # kept out of a compiled forward (bench --compile): traced, the hooks' Python state would
        # be guarded on and recompiled at every call until dynamo gives up and runs eagerly
        self._handles = [
            self.model.register_forward_pre_hook(torch.compiler.disable(self._pre), with_kwargs=True),
            self.model.register_forward_hook(torch.compiler.disable(self._post)),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _pre(self, module, args, kwargs):
        self.starts.append(_start_position(kwargs))
        if self.cuda:
            torch.cuda.synchronize()
        self._t0 = time.perf_counter()

    def _post(self, module, args, output):
        if self.cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - self._t0
        if self.first_s is None:
            self.first_s = elapsed
        self.forward_s += elapsed
        self.forwards += 1

    def appended_per_forward(self, prompt_len: int, final_len: int) -> list[int] | None:
        """Tokens committed by each forward, or ``None`` when positions are unknown or inconsistent.

        A forward starting at position ``s`` follows a commit of ``s + 1`` tokens (the last
        committed token is fed again, its cache entry not yet written).
        """
        if not self.starts or any(s is None for s in self.starts):
            return None
        committed = [s + 1 for s in self.starts[1:]] + [final_len]
        appended = [c - p for c, p in zip(committed, [prompt_len] + committed[:-1])]
        if any(a < 0 for a in appended) or sum(appended) != final_len - prompt_len:
            return None
        return appended


def _start_position(kwargs) -> int | None:
    pos = kwargs.get("position_ids")
    if isinstance(pos, torch.Tensor) and pos.numel():
        return int(pos.reshape(-1)[0])
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is not None and hasattr(cache, "get_seq_length"):
        return int(cache.get_seq_length())
    return None


def _on_cuda(model: torch.nn.Module) -> bool:
    try:
        return next(model.parameters()).device.type == "cuda"
    except StopIteration:
        return False


def reset_peak_memory(model: torch.nn.Module) -> None:
    """Start a new peak: CUDA's allocator peak, or Linux's resident-set high-water mark."""
    if _on_cuda(model):
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass  # no reset: the process-wide peak is reported instead


def peak_memory_mb(model: torch.nn.Module) -> float:
    """Peak since the last reset: CUDA allocated bytes, or the process's resident set (MiB)."""
    if _on_cuda(model):
        return torch.cuda.max_memory_allocated() / 2**20
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def synchronize(model: torch.nn.Module) -> None:
    if _on_cuda(model):
        torch.cuda.synchronize()
