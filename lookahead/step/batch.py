"""Lookahead decoding of a left-padded batch: one forward per step for every row.

Each row keeps its own window, copy guess, guess tree, positions and acceptance (a
:class:`~lookahead.step.proposer.Proposer`, which plans and learns); the n-gram pool
and the successor table are shared, so rows learn from one another. A step pads every row's
``[root | window | draft]`` to the widest row, runs them in one forward, walks each row's
tree with its own logits and commits what each accepted.

Rows accept different numbers of tokens, so their caches would grow apart. The cache keeps
one length for all rows and leaves *holes* instead: a step whose rows accepted ``a_r``
tokens appends ``max(a)`` entries to every row, row r's first ``a_r`` its accepted nodes and
the rest holes that the mask hides from then on (``past_visible``). Holes cost attention width
but never a copy of the cache; when they make up most of it, every row's real entries are
gathered to the right end, as left padding (one copy, rarely). Positions are each row's
count of real tokens, as ``model.generate`` computes them from a left-padded attention mask,
and sliding windows are measured in positions, so the cache is a plain ``DynamicCache``
whose layers all keep full length (a sliding layer trims by index, which holes would break).

Rows stop as ``model.generate``'s do: with an EOS criterion in the list a finished row is
filled with the pad token; without one it keeps generating until every row has stopped (its
extra tokens are what ``generate`` would return too). A finished row leaves the batch (and
the cache) unless its scores or logits must be reported: then it feeds pad tokens as
``generate`` does, so those rows hold what ``generate``'s would.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from transformers.cache_utils import DynamicCache

from lookahead.config import LookaheadConfig
from lookahead.drafts.pool import NgramPool
from lookahead.drafts.successors import kept_table
from lookahead.drafts.suffix import SuffixIndex
from lookahead.stats import LookaheadStats
from lookahead.step.batch_rows import ForcedPad, Row, RowView
from lookahead.step.cache import commit_rows, gather_rows, trim_rows
from lookahead.step.costmodel import CostCurve
from lookahead.step.decode import new_proposer
from lookahead.step.host import fetch, upload
from lookahead.step.inputs import timed
from lookahead.step.mask import attention_groups, batch_masks, stack_steps
from lookahead.step.sequence import TokenSequence, fast_check
from lookahead.step.static import StaticSteps, bucket_for
from lookahead.verify.tree import root_layout

ROOT_HEAD = root_layout()  # the head of a step that feeds no window: a pad run, or a left row's root


class BatchDecoder:
    """State of one lookahead generation over a left-padded batch.

    Args:
        pad_after_stop: ``generate``'s rule for finished rows when its criteria include EOS:
            fill with ``pad``; otherwise finished rows go on generating.
        keep_scores, keep_logits: scores or logits are reported, so finished rows (filled
            with ``pad``) keep feeding it to compute them, as ``generate``'s do.
    """

    def __init__(
        self,
        model,
        config: LookaheadConfig,
        rule,
        stats: LookaheadStats,
        stopping_criteria,
        pool: NgramPool | None,
        costs: CostCurve | None,
        pad: int | None,
        pad_after_stop: bool,
        keep_scores: bool,
        keep_logits: bool,
        static: StaticSteps | None = None,
        index: SuffixIndex | None = None,
    ):
        self.model, self.config, self.rule, self.stats = model, config, rule, stats
        self.index = index  # a corpus every row's copy guess drafts from
        self.stopping_criteria = stopping_criteria
        self.pool = pool
        if pool is None and config.uses_pool:
            self.pool = NgramPool(config.ngram, config.guesses, config.pool_capacity, config.context_tokens)
        self.costs = costs
        self.adaptive = not config.classic  # rows with a draft budget
        self.pad, self.pad_after_stop = pad, pad_after_stop
        self.keep_scores, self.keep_logits = keep_scores, keep_logits
        # full-length layers: see the module docstring; on a static cache rows keep their slots
        self.static = static
        self.cache = static.cache if static is not None else DynamicCache()
        windows, _ = attention_groups(model, DynamicCache(config=model.config))
        self.groups = windows
        self.rows: list[Row] = []
        self.live: list[Row] = []  # the rows still decoded, in cache order

    def forward(self, **inputs) -> torch.Tensor:
        run = lambda: self.model(cache=self.cache, use_cache=True, return_dict=True, **inputs).logits  # noqa: E731
        return timed(self.stats, run, inputs["input_ids"].shape[0])

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
        """Run the prompts, pick each row's first token, seed every row's proposer."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        last_only = {"logits_to_keep": 1} if self.model._supports_logits_to_keep() else {}
        out = self.forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, **last_only)
        logits = out[:, -1]
        self.past_visible = attention_mask.bool()
        self.past_pos = positions
        self.position = attention_mask.long().sum(-1)
        self.host_position = self.position.cpu().numpy()  # the same on the host: read there, not here
        cfg = self.config
        successors = None
        if cfg.uses_successors:
            successors = kept_table(self.pool, logits.shape[-1], cfg.successors, cfg.ngram - 1)
        real_mask = self.past_visible.cpu().numpy()
        rows = input_ids.shape[0]
        for r in range(rows):
            criteria = self.stopping_criteria
            if fast_check(criteria) is None:
                criteria = RowView(criteria, r, rows)
            seq = TokenSequence(input_ids[r : r + 1], criteria, None, self.stats, self.keep_scores, self.keep_logits)
            rule = copy.copy(self.rule)
            rule.row = r  # its row of a sampling rule's noise blocks
            if rule.processors:
                rule.processors = RowView(rule.processors, r, rows)
            # priced by the batch's own curve (a [B, k] forward against a [B, 1] one)
            proposer = new_proposer(cfg, rule, self.stats, self.pool, self.costs, self.index, self.model.dtype)
            prompt = np.asarray(seq.tokens, dtype=np.int64)[real_mask[r]]
            # the inputs, masks and past_visible live where input_ids do
            proposer.start(seq, logits[r : r + 1], prompt, self.groups, input_ids.device, successors)
            row = Row(seq, proposer, input_ids.shape[1], int(real_mask[r].argmax()))
            self.rows.append(row)
            self._check_stop(row)
        self.live = list(self.rows)
        self._retire()

    @property
    def done(self) -> bool:
        return not self.live

    def step(self) -> None:
        """One forward for every live row: propose, verify, append, commit. On a static cache
        every row keeps its slot: a row that left feeds its last token, which nothing sees or
        keeps, and the step is padded to a bucket."""
        live = self.live
        rows = self.rows if self.static is not None else live
        active = {id(row) for row in live}
        plans = [row.plan(self._forced(row)) if id(row) in active else row.plan_plain() for row in rows]
        width = max(len(tokens) for _, tokens in plans)
        if self.static is not None:
            width = bucket_for(width, self.static.buckets)
        if self.adaptive:  # every row is padded to the widest: its draft may fill the room
            plans = [
                row.refill(plan, width) if id(row) in active and not self._forced(row) else plan
                for row, plan in zip(rows, plans)
            ]
        host_ids = np.array([tokens + [tokens[0]] * (width - len(tokens)) for _, tokens in plans], dtype=np.int64)
        heads = [row.proposer.mask.head if inputs.windowed else ROOT_HEAD for row, (inputs, _) in zip(rows, plans)]
        layouts = [inputs.tree.layout(head) for head, (inputs, _) in zip(heads, plans)] if width > 1 else []
        ids, *parts = upload(self.position.device, host_ids, *(a for lay in layouts for a in lay))  # one copy
        offsets, allowed = self._shapes(rows, plans, width, parts)
        mask = batch_masks(
            offsets, allowed, self.position, self.past_visible, self.past_pos, self.groups, self.model.dtype
        )
        positions = self.position[:, None] + offsets
        if self.static is not None:
            logits = timed(self.stats, lambda: self.static.run_rows(ids, positions, mask), len(live))
        else:
            logits = self.forward(input_ids=ids, attention_mask=mask, position_ids=positions)
        table = live[0].proposer.successors  # the rows share one
        preds, top, scores = fetch(logits, table.k if table is not None else 0)  # one transfer for all rows
        if top is not None:  # what each row fed, not its filler
            for i, (_, tokens) in enumerate(plans):
                table.record(
                    host_ids[i, : len(tokens)], top[i, : len(tokens)].numpy(), scores[i, : len(tokens)].numpy()
                )
        accepted = []  # each row's kept nodes; none for a row that only holds its slot
        for i, (row, (inputs, tokens)) in enumerate(zip(rows, plans)):
            if id(row) not in active:
                accepted.append([])
                continue
            fed, learn = len(tokens), not self._forced(row)  # a forced row feeds pads, not guesses
            accepted.append(row.proposer.verify(row.seq, inputs, logits[i, :fed], preds[i, :fed], learn))
        self._commit(accepted)
        for row in live:
            self._check_stop(row)
        self._retire()

    def _shapes(self, live: list[Row], plans, width: int, parts: list[torch.Tensor]):
        """Offsets ``[B, width]`` and attention ``[B, width, width]`` of the rows' steps (``parts``:
        each row's offsets and attention, uploaded)."""
        if width == 1:  # every row feeds its root alone (a plain step)
            device = self.position.device
            return (
                torch.zeros(len(live), 1, dtype=torch.long, device=device),
                torch.ones(len(live), 1, 1, dtype=torch.bool, device=device),
            )
        return stack_steps(parts[0::2], [allowed.bool() for allowed in parts[1::2]], width)

    def _commit(self, accepted: list[list[int]]) -> None:
        """Append ``max(a)`` entries per row, holes after each row's own ``a_r``."""
        m = max(len(k) for k in accepted)
        past_len = self.past_visible.shape[1]
        device = self.position.device
        moved = any(k != list(range(m)) for k in accepted)  # else the entries already sit in place
        counts = np.array([len(k) for k in accepted])
        index = np.array([k + [0] * (m - len(k)) for k in accepted]) if moved else np.zeros((0,), dtype=np.int64)
        counts, index = upload(device, counts, index)
        steps = torch.arange(m, device=device)
        if moved:
            commit_rows(self.cache, past_len, index)
        else:
            trim_rows(self.cache, past_len + m)
        self.past_visible = torch.cat([self.past_visible, steps[None] < counts[:, None]], dim=1)
        self.past_pos = torch.cat([self.past_pos, self.position[:, None] + steps[None]], dim=1)
        self.position = self.position + counts
        self.host_position = self.host_position + np.array([len(k) for k in accepted])  # as counts
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

    def _forced(self, row: Row) -> bool:
        return isinstance(row.proposer.rule, ForcedPad)

    def _check_stop(self, row: Row) -> None:
        """Note when a row's criteria first said stop, and what it does from then on."""
        if row.stop_at is not None or not row.seq.done:
            return
        row.stop_at = row.generated
        row.seq.ignore_stops()
        if self.pad_after_stop and (self.keep_scores or self.keep_logits):
            row.proposer.rule.release()
            row.proposer.rule = ForcedPad(row.proposer.rule, self.pad)

    def _needs_more(self, row: Row, horizon: int | None) -> bool:
        if row.stop_at is None:
            return True
        if self.pad_after_stop and not self._forced(row):
            return False
        return horizon is None or row.generated < horizon

    def _retire(self) -> None:
        """Drop rows that need no more tokens from the batch and the cache (from the batch only on
        a static cache, whose shapes stay)."""
        stops = [row.stop_at for row in self.rows]
        horizon = max(stops) if None not in stops else None
        staying = [i for i, row in enumerate(self.live) if self._needs_more(row, horizon)]
        if len(staying) == len(self.live):
            return
        for i in sorted(set(range(len(self.live))) - set(staying)):
            if not self._forced(self.live[i]):  # a forced row released its rule when it stopped
                self.live[i].proposer.rule.release()
        self.live = [self.live[i] for i in staying]
        if not staying or self.static is not None:  # a static cache keeps every row's slot
            return
        index = torch.tensor(staying, device=self.position.device)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index.to(layer.keys.device))
            layer.values = layer.values.index_select(0, index.to(layer.values.device))
        self.past_visible = self.past_visible[index]
        self.past_pos = self.past_pos[index]
        self.position = self.position[index]
        self.host_position = self.host_position[staying]

    def outputs(self):
        """``(sequences [B, n + T], scores, logits)`` laid out as ``generate`` returns them:
        T = the most new tokens any row had when it stopped; per-step tuples of ``[B, V]``.
        Each row's text (without padding, up to its stop) goes to the pool's history."""
        horizon = max(row.stop_at for row in self.rows)
        sequences = []
        for row in self.rows:
            if self.pool is not None:
                self.pool.remember(row.seq.array()[row.start : row.prompt_len + row.stop_at])
            ids = row.seq.ids[0, : row.prompt_len + horizon]
            if ids.shape[0] < row.prompt_len + horizon:
                ids = torch.cat([ids, ids.new_full((row.prompt_len + horizon - ids.shape[0],), self.pad)])
            sequences.append(ids)
            self.stats.new_tokens -= max(row.generated - horizon, 0)  # beyond what is returned
        scores = _per_step([row.seq.scores for row in self.rows], horizon) if self.keep_scores else None
        logits = _per_step([row.seq.logits for row in self.rows], horizon) if self.keep_logits else None
        return torch.stack(sequences), scores, logits


def _per_step(rows: list[list[torch.Tensor]], steps: int) -> tuple[torch.Tensor, ...]:
    return tuple(torch.cat([row[t] for row in rows], dim=0) for t in range(steps))


def batch_decode(
    model,
    input_ids,
    *,
    rule,
    stopping_criteria,
    config,
    stats,
    pool=None,
    attention_mask=None,
    keep_scores=False,
    keep_logits=False,
    costs: CostCurve | None = None,
    pad: int | None = None,
    pad_after_stop: bool = False,
    static: StaticSteps | None = None,
    index: SuffixIndex | None = None,
):
    """Generate after the left-padded ``input_ids`` (``[B, n]``) until every row stopped.

    Returns ``(sequences, scores, logits)`` as :meth:`BatchDecoder.outputs` lays them out.
    """
    decoder = BatchDecoder(
        model,
        config,
        rule,
        stats,
        stopping_criteria,
        pool,
        costs,
        pad,
        pad_after_stop,
        keep_scores,
        keep_logits,
        static,
        index,
    )
    decoder.prefill(input_ids, attention_mask)
    while not decoder.done:
        decoder.step()
    return decoder.outputs()
