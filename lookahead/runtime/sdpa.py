"""Which of sdpa's kernels a decode's forwards may run on: cuDNN's attention off on CUDA.

``scaled_dot_product_attention`` picks among flash, memory-efficient, cuDNN and math kernels.
PyTorch builds a cuDNN attention plan for every new shape of query and keys and caches it by
shape; a decode's key length grows every step, so every step builds one. Measured on an H200
(torch 2.11.0+cu130, transformers 5.24, the embedded model in bf16, where PyTorch picks cuDNN):

    one-token forward of plain generate     21.0 ms with cuDNN    4.8 ms without
    lookahead's steps (varied query widths)  3.1-3.95 one-token forwards   1.03-1.12

so a decode runs with cuDNN's attention off unless ``LookaheadConfig.cudnn_attention`` says
otherwise. The switch is PyTorch's process-wide flag (``torch.backends.cuda.enable_cudnn_sdp``),
set for the call and restored after it: a forward another thread runs meanwhile sees it too.
"""

from __future__ import annotations

import contextlib

import torch


def without_cudnn(model, allow: bool = False):
    """A context manager under which sdpa does not pick cuDNN's attention, for a ``model``
    with parameters on CUDA unless ``allow``; a null context otherwise (the CPU has no cuDNN
    attention, and a flag left alone is the user's)."""
    if allow or not _on_cuda(model):
        return contextlib.nullcontext()
    return cudnn_attention_off()


def _on_cuda(model) -> bool:
    """Whether any of ``model``'s parameters is on CUDA: its first one's device, or one of a
    device map's (asked every call, so without a walk over every parameter)."""
    placed = getattr(model, "hf_device_map", None) or {}
    devices = [torch.device(d if not isinstance(d, int) else f"cuda:{d}") for d in placed.values() if d != "disk"]
    first = next(model.parameters(), None)
    return any(d.type == "cuda" for d in devices) or (first is not None and first.device.type == "cuda")


@contextlib.contextmanager
def cudnn_attention_off():
    """sdpa's cuDNN kernel disabled inside, the flag's earlier value back on exit (an
    exception's included)."""
    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)
