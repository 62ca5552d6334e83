"""Positions and the additive 4D attention mask of one step.

The step's input is ``[root | draft]`` (the classic shape adds the window's upper levels
after the draft: ``lookahead/classic.py`` draws them), laid out by ``verify.tree.GuessTree.layout``.
Draft nodes x (child of the root), y (child of x) and z (child of the root); digits are
offsets from the root's position, X = may attend (every row also attends the committed cache):

          r  x  y  z
    r  0  X
    x  1  X  X
    y  2  X  X  X
    z  1  X        X

A draft node sees the root and its own ancestors. Masks are additive floats (0 = attend,
dtype min = blocked), the one form that both ``eager`` and ``sdpa`` read correctly.
"""

from __future__ import annotations

import torch


class StepMask:
    """Builds each step's positions and masks for one sequence.

    Args:
        groups: attention kinds to build masks for, ``{name: sliding_window or None}``.
            A single entry named ``None`` gives one tensor; named entries give a dict keyed
            by layer type, which hybrid models (full + sliding layers) take.
        dtype, device: of the model's activations.
    """

    def __init__(self, groups: dict, dtype: torch.dtype, device):
        self.groups = groups
        self.dtype = dtype
        self.device = device
        self._attend = torch.zeros((), dtype=dtype, device=device)
        self._blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=device)

    def build(self, layout, sizes: dict, past_visible: torch.Tensor):
        """Offsets and the mask(s) for the model.

        Args:
            layout: the step's offsets from the root (``[q]``) and attention (``[q, q]``), as
                host arrays or already on the device (any integer or bool dtype).
            sizes: ``{name: (kv_offset, past_len)}``: the first cache index the group's
                layers still hold, and the committed cache length.
            past_visible: bool ``[past_len]``, False at padding.

        Returns:
            ``(offsets [q], mask)``: ``mask`` is ``[1, 1, q, kv]`` or a dict of them.
        """
        offsets, allowed = (torch.as_tensor(a, device=self.device) for a in layout)
        allowed = allowed.bool()
        masks = {}
        for name, window in self.groups.items():
            kv_offset, past_len = sizes[name]
            past = past_visible[kv_offset:].expand(allowed.shape[0], -1)
            new = allowed
            if window is not None:
                query = past_len + offsets
                keys = torch.arange(kv_offset, past_len, device=self.device)
                past = past & (query[:, None] - keys[None, :] < window)
                new = new & (offsets[:, None] - offsets[None, :] < window)
            keep = torch.cat([past, new], dim=1)
            masks[name] = torch.where(keep, self._attend, self._blocked)[None, None]
        if list(masks) == [None]:
            return offsets, masks[None]
        return offsets, masks


def stack_steps(offsets: list[torch.Tensor], allowed: list[torch.Tensor], width: int):
    """Pad the rows of a batch step to ``width`` tokens.

    Args:
        offsets: per row, long ``[q_r]`` offsets from that row's root (``StepMask.offsets``).
        allowed: per row, bool ``[q_r, q_r]`` (``StepMask.allowed``).

    Returns:
        ``(offsets [B, width], allowed [B, width, width])``. A filler token (after a row's
        own) sits at offset 0 and sees only itself: its entries are never kept, and a query
        that sees one key stays finite under every backend.
    """
    rows, device = len(offsets), offsets[0].device
    out_offsets = torch.zeros(rows, width, dtype=torch.long, device=device)
    out_allowed = torch.eye(width, dtype=torch.bool, device=device).repeat(rows, 1, 1)
    for r, (off, allow) in enumerate(zip(offsets, allowed)):
        q = off.shape[0]
        out_offsets[r, :q] = off
        out_allowed[r, :q, :q] = allow
    return out_offsets, out_allowed


def batch_masks(
    offsets: torch.Tensor,
    allowed: torch.Tensor,
    positions: torch.Tensor,
    past_visible: torch.Tensor,
    past_pos: torch.Tensor,
    groups: dict,
    dtype: torch.dtype,
):
    """The additive mask(s) ``[B, 1, q, L + q]`` of a batch step over a cache with holes.

    Row r's step tokens sit at positions ``positions[r] + offsets[r]``. A committed entry is
    visible where ``past_visible`` (bool ``[B, L]``: False at padding and holes) says so and,
    for a sliding-window group, where its position (``past_pos``, long ``[B, L]``) is less
    than the window behind the query's. Positions, not cache indices, measure the window:
    holes make indices drift from positions.

    One row, two committed tokens at positions 0 and 1, a hole, and a step of root r with
    one guess g (full attention; X = attend, . = hole, never seen)::

              p0 p1  .  r  g
        r      X  X     X
        g      X  X     X  X

    Returns a tensor for a single group named None, else ``{group name: tensor}``.
    """
    blocked = torch.finfo(dtype).min
    masks = {}
    for name, window in groups.items():
        past = past_visible[:, None, :].expand(-1, offsets.shape[1], -1)
        new = allowed
        if window is not None:
            query = positions[:, None] + offsets
            past = past & (query[:, :, None] - past_pos[:, None, :] < window)
            new = new & (offsets[:, :, None] - offsets[:, None, :] < window)
        keep = torch.cat([past, new], dim=2)
        mask = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
        masks[name] = mask.masked_fill_(~keep, blocked)[:, None]
    if list(masks) == [None]:
        return masks[None]
    return masks


def attention_groups(model, cache) -> tuple[dict, dict]:
    """``({name: sliding window or None}, {name: a layer index})`` per attention kind."""
    types = getattr(model.config, "layer_types", None)
    names = list(dict.fromkeys(types)) if types and len(set(types)) > 1 else [None]
    windows, index = {}, {}
    for name in names:
        i = types.index(name) if name is not None else 0
        layer = cache.layers[i]
        index[name] = i
        windows[name] = layer.sliding_window if getattr(layer, "is_sliding", False) else None
    return windows, index
