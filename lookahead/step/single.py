"""The cache of one sequence: each step's inputs made as cheaply as the device allows, the
accepted entries committed behind the prefix.

One row keeps a compact cache: a step's entries ``[root | draft]`` are written after the
committed ones, and the commit moves the accepted nodes' entries down behind them and cuts
the rest (``cache.commit``), so the cache holds exactly the committed text, as plain
decoding's does: sliding-window layers trim as they would, and a ``DynamicCache`` that holds
a prefix of the prompt (kept from an earlier request) is taken as it is. Three ways to a
step's inputs, cheapest first:

- a plain step (the root alone) over an unpadded cache with full attention passes no mask:
  the model's own causal mask is the same;
- on the CPU with full attention, the ids, positions and mask are made on the
  host in one kernel and handed over as views (no torch op);
- elsewhere they are uploaded together and the mask is built where the model runs
  (``mask.StepMask``), on a ``StaticCache`` padded to a bucket (``static.StaticSteps``).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import DynamicCache

from lookahead.stats import LookaheadStats
from lookahead.step.cache import check_cache, commit, held_from, prepare_cache
from lookahead.step.host import blocked_words, mask_words, timed, upload, views
from lookahead.step.mask import StepMask, attention_groups
from lookahead.step.proposer import Plan
from lookahead.step.static import StaticSteps, bucket_for


def host_masks(full: bool, static: StaticSteps | None, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether a single row's steps are made whole on the host (ids, offsets and the mask,
    handed over as views): on the CPU, in a float dtype, with every layer attending the whole
    past (``full``) on a DynamicCache. Elsewhere the mask is built where the model runs."""
    floats = (torch.float32, torch.bfloat16, torch.float16)
    return full and static is None and device.type == "cpu" and dtype in floats


class OneRow:
    """The cache of a decode of one sequence (see the module's docstring).

    Args:
        model: the causal LM.
        cache: its ``DynamicCache`` (empty, or holding a prefix of the prompt), or the static
            steps' cache.
        static: steps on a full-length ``StaticCache`` (then ``cache`` is ``static.cache``).
        stats: where forwards are counted and timed.
    """

    keeps_slots = False  # a row that stops leaves: there is no other

    def __init__(self, model, cache, static: StaticSteps | None, stats: LookaheadStats):
        self.model, self.static, self.stats = model, static, stats
        self.cache = static.cache if static is not None else cache

    def prefill(self, input_ids: torch.Tensor, attention_mask, position_ids) -> tuple[torch.Tensor, np.ndarray]:
        """Run the prompt (``[1, n]``) after what the cache already holds; returns the last
        position's logits ``[1, V]`` and which prompt tokens are real (bool ``[1, n]``)."""
        model = self.model
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        last_only = {"logits_to_keep": 1} if model._supports_logits_to_keep() else {}
        held = 0
        if self.static is None:
            check_cache(self.cache)  # before the prefill's work: a cache it cannot roll back is refused at once
            held = self.cache.get_seq_length()
        logits = self._forward(
            input_ids=input_ids[:, held:],
            attention_mask=attention_mask,
            position_ids=position_ids[:, held:],
            **last_only,
        )
        if self.static is None:
            check_cache(self.cache)  # the layers a lazily built cache made in the prefill
            self._sliding = prepare_cache(self.cache)
        real = (
            attention_mask[0].bool() if attention_mask is not None else torch.ones_like(input_ids[0], dtype=torch.bool)
        )
        self._visible = torch.zeros(0, dtype=torch.bool, device=real.device)
        self._grow_visible(2 * real.shape[0] + 64)
        self._visible[: real.shape[0]] = real
        self.past_len = real.shape[0]
        self.position = int(position_ids[0, -1]) + 1  # the first token's, fed by the first step
        # static layers are all full length: the windows come from the config (see static.py)
        windows, self.layer_index = attention_groups(
            model, self.cache if self.static is None else DynamicCache(config=model.config)
        )
        # a lone root over an unpadded cache with full attention needs no mask of ours: the
        # model's own causal mask is the same, and building ours costs more than plain decoding
        full = list(windows) == [None] and windows[None] is None
        self._maskless_plain = bool(real.all()) and full and self.static is None
        self._host_masks = host_masks(full, self.static, real.device, model.dtype)
        self._blocked = blocked_words(model.dtype) if self._host_masks else None
        self.mask = StepMask(windows, model.dtype, real.device)
        return logits[:, -1], real.cpu().numpy()[None]

    @property
    def output_cache(self):
        """The cache ``generate``'s output carries: this one, holding the committed text."""
        return self.cache

    def width(self, widest: int) -> int:
        """The tokens a step of ``widest`` fed tokens runs: its bucket on a static cache."""
        return bucket_for(widest, self.static.buckets) if self.static is not None else widest

    def forward(self, rows, plans: list[Plan], width: int, live: int = 1) -> torch.Tensor:
        """Logits ``[1, q, V]`` of the one row's step (``rows[0]``'s plan ``plans[0]``)."""
        plan, past_len = plans[0], self.past_len
        if plan.tree.size == 0 and len(plan.tokens) == 1 and self._maskless_plain:
            ids = rows[0].seq.ids[:, -1:]
            positions = torch.full((1, 1), self.position, dtype=torch.long, device=ids.device)
            return self._forward(input_ids=ids, attention_mask=None, position_ids=positions)
        host = np.asarray(plan.tokens, dtype=np.int64)
        if self._host_masks:
            # shaped as the model takes them on the host: numpy's views cost less than torch's
            offsets, allowed = plan.layout
            words = mask_words(self._visible_host[:past_len], allowed, self._blocked)
            ids, positions, words = views(host[None], (offsets + self.position)[None], words)
            mask = words.view(self.model.dtype)
            return self._forward(input_ids=ids, attention_mask=mask, position_ids=positions)
        sizes = {
            name: (0 if self.static is not None else held_from(self.cache.layers[i], past_len), past_len)
            for name, i in self.layer_index.items()
        }
        ids, *layout = upload(self.mask.device, host, *plan.layout)  # one copy
        offsets, mask = self.mask.build(layout, sizes, self._visible[:past_len])
        positions = (self.position + offsets)[None]
        if self.static is not None:
            run = lambda: self.static.forward(ids[None], positions, mask, past_len)[None]  # noqa: E731
            return timed(self.stats, run)
        return self._forward(input_ids=ids[None], attention_mask=mask, position_ids=positions)

    def _forward(self, **inputs) -> torch.Tensor:
        run = lambda: self.model(cache=self.cache, use_cache=True, return_dict=True, **inputs).logits  # noqa: E731
        return timed(self.stats, run)

    def commit(self, paths: list[list[int]], fed: list[int]) -> None:
        """Keep the accepted nodes' cache entries (``paths[0]``, of a step that fed
        ``fed[0]`` tokens) behind the committed ones, drop the rest."""
        path = paths[0]
        if self.static is not None:
            self.static.commit(self.past_len, path)
        else:
            commit(self.cache, self.past_len, fed[0], path, self._sliding)
        self.past_len += len(path)
        if self.past_len > self._visible.shape[0]:
            self._grow_visible(2 * self._visible.shape[0])
        self.position += len(path)

    def retire(self, staying: list[int]) -> None:
        """Nothing to drop: a decode of one row ends when it stops."""

    def _grow_visible(self, size: int) -> None:
        """Grow the flags of which cache entries are real tokens to ``size``, the new ones
        True: on the CPU one memory that numpy (``_visible_host``) and torch both view, on a
        device made and grown there (no host copy inside a step)."""
        old = self._visible
        if old.device.type == "cpu":
            self._visible_host = np.ones(size, dtype=bool)
            self._visible = torch.from_numpy(self._visible_host)
        else:
            self._visible = torch.ones(size, dtype=torch.bool, device=old.device)
        self._visible[: old.shape[0]] = old
