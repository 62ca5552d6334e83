"""What the host reads of a step's logits, in one device-to-host transfer.

Every read of a device tensor on the host (``.cpu()``, ``.tolist()``, ``.item()``) waits for
the device to finish. A step needs three things from its logits: the argmax of every fed row
(greedy verification and the window's next level read it) and, with a successor table, the
top-k of every fed row. They are computed on the device and copied to the host together.
"""

from __future__ import annotations

import torch


def fetch(logits: torch.Tensor, k: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(argmax, top-k or None)`` of ``logits`` (``[..., V]``) as host (CPU) tensors: argmax
    long ``[...]`` (the first maximum, as ``generate``'s argmax takes it) and, for ``k > 0``,
    the k best ids long ``[..., k]``, best first. One transfer."""
    preds = logits.argmax(-1, keepdim=True)
    both = torch.cat([preds, logits.topk(k, dim=-1).indices], dim=-1) if k else preds
    host = both.cpu()
    return host[..., 0], (host[..., 1:] if k else None)
