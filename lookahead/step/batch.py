"""The cache of a left-padded batch: one length for every row, and holes where rows accepted
fewer tokens than the step's most.

Rows accept different numbers of tokens, so their caches would grow apart. The cache keeps
one length for all rows and leaves *holes* instead: a step whose rows accepted ``a_r``
tokens appends ``max(a)`` entries to every row, row r's first ``a_r`` its accepted nodes and
the rest holes that the mask hides from then on (``past_visible``). Holes cost attention width
but never a copy of the cache; when they make up most of it, every row's real entries are
gathered to the right end, as left padding (one copy, rarely). Positions are each row's
count of real tokens, as ``model.generate`` computes them from a left-padded attention mask,
and sliding windows are measured in positions, so the cache is a plain ``DynamicCache``
whose layers all keep full length (a sliding layer trims by index, which holes would break).
A row that stops leaves the batch and the cache; on a static cache it keeps its slot.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import DynamicCache

from lookahead.stats import LookaheadStats
from lookahead.step.cache import commit_rows, gather_rows, trim_rows
from lookahead.step.host import timed, upload
from lookahead.step.mask import attention_groups, batch_masks, stack_steps
from lookahead.step.proposer import Plan
from lookahead.step.static import StaticSteps, bucket_for


class Holes:
    """The cache of a decode of a left-padded batch (see the module's docstring).

    Args:
        model: the causal LM.
        static: steps on a full-length ``StaticCache`` (every row keeps its slot there), or None.
        stats: where forwards are counted and timed.
    """

    def __init__(self, model, static: StaticSteps | None, stats: LookaheadStats):
        self.model, self.static, self.stats = model, static, stats
        self.keeps_slots = static is not None  # a static cache's shapes stay
        self.cache = static.cache if static is not None else DynamicCache()
        self.groups, _ = attention_groups(model, DynamicCache(config=model.config))

    def prefill(self, input_ids: torch.Tensor, attention_mask, position_ids=None) -> tuple[torch.Tensor, np.ndarray]:
        """Run the prompts (``[B, n]``); returns each row's last logits ``[B, V]`` and which
        prompt tokens are real (bool ``[B, n]``)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        last_only = {"logits_to_keep": 1} if self.model._supports_logits_to_keep() else {}
        logits = self._forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, **last_only)
        self.past_visible = attention_mask.bool()
        self.past_pos = positions
        self.position = attention_mask.long().sum(-1)
        self.host_position = self.position.cpu().numpy()  # the same on the host: read there, not here
        return logits[:, -1], self.past_visible.cpu().numpy()

    output_cache = None  # holes and gathered rows: no cache generate would give

    def width(self, widest: int) -> int:
        """The tokens every row's step runs: the widest row's, on a static cache its bucket."""
        return bucket_for(widest, self.static.buckets) if self.static is not None else widest

    def forward(self, rows, plans: list[Plan], width: int, live: int) -> torch.Tensor:
        """Logits ``[B, width, V]`` of the ``rows``' steps, each padded to ``width`` with fillers
        that see only themselves (``live``: how many rows are still decoded)."""
        host_ids = np.array([plan.tokens + [plan.tokens[0]] * (width - len(plan.tokens)) for plan in plans])
        layouts = [a for plan in plans for a in plan.layout] if width > 1 else []
        ids, *parts = upload(self.position.device, host_ids, *layouts)  # one copy
        offsets, allowed = self._shapes(len(plans), width, parts)
        mask = batch_masks(
            offsets, allowed, self.position, self.past_visible, self.past_pos, self.groups, self.model.dtype
        )
        positions = self.position[:, None] + offsets
        if self.static is not None:
            return timed(self.stats, lambda: self.static.run_rows(ids, positions, mask), live)
        return self._forward(input_ids=ids, attention_mask=mask, position_ids=positions)

    def _forward(self, **inputs) -> torch.Tensor:
        run = lambda: self.model(cache=self.cache, use_cache=True, return_dict=True, **inputs).logits  # noqa: E731
        return timed(self.stats, run, inputs["input_ids"].shape[0])

    def _shapes(self, rows: int, width: int, parts: list[torch.Tensor]):
        """Offsets ``[B, width]`` and attention ``[B, width, width]`` of the rows' steps (``parts``:
        each row's offsets and attention, uploaded)."""
        if width == 1:  # every row feeds its root alone (a plain step)
            device = self.position.device
            return (
                torch.zeros(rows, 1, dtype=torch.long, device=device),
                torch.ones(rows, 1, 1, dtype=torch.bool, device=device),
            )
        return stack_steps(parts[0::2], [allowed.bool() for allowed in parts[1::2]], width)

    def commit(self, paths: list[list[int]], fed: list[int]) -> None:
        """Append ``max(a)`` entries per row, holes after each row's own ``a_r`` (its ``paths``;
        none for a row that only holds its slot)."""
        m = max(len(k) for k in paths)
        past_len = self.past_visible.shape[1]
        device = self.position.device
        moved = any(k != list(range(m)) for k in paths)  # else the entries already sit in place
        counts = np.array([len(k) for k in paths])
        index = np.array([k + [0] * (m - len(k)) for k in paths]) if moved else np.zeros((0,), dtype=np.int64)
        counts, index = upload(device, counts, index)
        steps = torch.arange(m, device=device)
        if moved:
            commit_rows(self.cache, past_len, index)
        else:
            trim_rows(self.cache, past_len + m)
        self.past_visible = torch.cat([self.past_visible, steps[None] < counts[:, None]], dim=1)
        self.past_pos = torch.cat([self.past_pos, self.position[:, None] + steps[None]], dim=1)
        self.position = self.position + counts
        self.host_position = self.host_position + np.array([len(k) for k in paths])  # as counts
        held = self.past_visible.shape[1]
        full = self.static is not None and held + self.static.room > self.static.max_len
        if full or (held > 64 and 2 * int(self.host_position.max()) < held):
            self._close_holes()

    def _close_holes(self) -> None:
        """Gather each row's real entries to the right end (holes become left padding)."""
        real = self.past_visible
        order = torch.sort(real.to(torch.int8), dim=1, stable=True).indices  # holes first
        index = order[:, real.shape[1] - int(self.host_position.max()) :]  # each row's real entries
        gather_rows(self.cache, index)
        self.past_visible = real.gather(1, index)
        self.past_pos = self.past_pos.gather(1, index)

    def retire(self, staying: list[int]) -> None:
        """Keep only the rows at ``staying`` (indices among those the cache held) in the cache;
        a static cache keeps every slot."""
        if self.keeps_slots or not staying:
            return
        index = torch.tensor(staying, device=self.position.device)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index.to(layer.keys.device))
            layer.values = layer.values.index_select(0, index.to(layer.values.device))
        self.past_visible = self.past_visible[index]
        self.past_pos = self.past_pos[index]
        self.position = self.position[index]
        self.host_position = self.host_position[staying]
