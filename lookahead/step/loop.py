"""The decode loop: one prefill, then one forward a step until every row has stopped.

    prefill   the prompts; each row's first token, its sources started from its prompt
    step
      plan      each row's proposer: the nodes the draft budget keeps, merged into a tree
      forward   one forward over every row's ``[root | draft]`` under one 4D mask
      verify    each row walks its tree with its rule, appending the model's own choices,
                and learns (what held, the step's top-k, its free Jacobi iterations)
      commit    the accepted nodes' cache entries stay behind the prefix, the rest go
      stop      rows whose stopping criteria said stop leave

One sequence and a batch run this same loop; they differ only in how the cache holds them
(``single.OneRow``: compact, sliding layers trimmed, host-made masks on a CPU; ``batch.Holes``:
one length for every row, holes where a row accepted less than the step's most).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from lookahead.config import LookaheadConfig
from lookahead.drafts.kept import KeptState
from lookahead.drafts.suffix import SuffixIndex
from lookahead.stats import Laps, LookaheadStats
from lookahead.step.batch import Holes
from lookahead.step.costmodel import CostCurve
from lookahead.step.host import fetch, needs_widening
from lookahead.step.proposer import Proposer, plain_plan
from lookahead.step.rows import ForcedPad, Row, RowView
from lookahead.step.sequence import TokenSequence, fast_check
from lookahead.step.single import OneRow
from lookahead.step.static import StaticSteps


def proposer_for(config: LookaheadConfig, rule, stats, kept: KeptState, costs: CostCurve | None, index) -> Proposer:
    """A row's proposer, whose draft budget prices nodes by ``costs`` (proportional when
    None) plus one row's planning work (the classic shape brings its own:
    ``lookahead.classic.proposer_for``)."""
    costs = costs if costs is not None else CostCurve.linear()
    return Proposer(config, rule, stats, kept, costs, costs.overhead, index)


class Decoder:
    """One lookahead generation over one or more rows.

    Args:
        rule: the rule every row's tree is walked with (a batch's rows get copies, one noise
            row each).
        stopping_criteria: ``generate``'s list, checked after every appended token.
        kept: what earlier requests taught; the rows share it, and their texts join its history.
        costs: the curve the draft budget prices forwards with (proportional when None).
        static: steps on a ``StaticCache`` (compiled where ``generate`` would compile).
        index: a corpus the copy guess also drafts from.
        pad, pad_after_stop: ``generate``'s rule for a batch's finished rows when its criteria
            include EOS: filled with ``pad``; otherwise finished rows go on generating.
        keep_scores, keep_logits: report the rows' processed scores or raw logits per token;
            then finished rows keep feeding pads to compute them, as ``generate``'s do.
        streamer: gets each token of a single row as it is appended.
        proposers: makes each row's proposer, called as :func:`proposer_for` (default, for
            every method but the classic shape's, which ``lookahead.classic`` brings).
    """

    def __init__(
        self,
        model,
        config: LookaheadConfig,
        rule,
        stats: LookaheadStats,
        stopping_criteria,
        kept: KeptState,
        costs: CostCurve | None = None,
        static: StaticSteps | None = None,
        index: SuffixIndex | None = None,
        pad: int | None = None,
        pad_after_stop: bool = False,
        keep_scores: bool = False,
        keep_logits: bool = False,
        streamer=None,
        proposers=None,
    ):
        if config.classic and proposers is None:
            raise ValueError(f"method={config.method!r} decodes with lookahead.classic.proposer_for as proposers")
        self.proposers = proposers if proposers is not None else proposer_for
        self.model, self.config, self.rule, self.stats = model, config, rule, stats
        self.stopping_criteria, self.kept, self.costs = stopping_criteria, kept, costs
        self.static, self.index, self.streamer = static, index, streamer
        self.pad, self.pad_after_stop = pad, pad_after_stop
        self.keep_scores, self.keep_logits = keep_scores, keep_logits
        self.rows: list[Row] = []
        self.live: list[Row] = []  # the rows still decoded, in cache order

    def prefill(self, input_ids: torch.Tensor, attention_mask=None, position_ids=None, cache=None) -> None:
        """Run the prompts (left-padded ``[B, n]``), pick each row's first token, start each
        row's proposer. One row may come with a ``cache`` holding its prompt's first tokens."""
        laps, rows = Laps(self.stats.stages), input_ids.shape[0]
        self.layout = (
            OneRow(self.model, cache, self.static, self.stats)
            if rows == 1
            else Holes(self.model, self.static, self.stats)
        )
        last, real = self.layout.prefill(input_ids, attention_mask, position_ids)
        for r in range(rows):
            self.rows.append(self._start_row(input_ids, r, last[r : r + 1], real[r]))
            self._check_stop(self.rows[-1])
        self.top_k = self.rows[0].proposer.top_k
        self.widen = needs_widening(last)
        self.live = list(self.rows)
        self._retire()
        laps.mark("prefill")

    def _start_row(self, input_ids: torch.Tensor, r: int, logits: torch.Tensor, real: np.ndarray) -> Row:
        """Row ``r``: its sequence, its rule (a batch row's own copy reading its noise row and
        seeing the batch's processors and criteria from its slot), its proposer, started
        from its prompt's real tokens and last ``logits`` ``[1, V]``."""
        rows, criteria, rule = input_ids.shape[0], self.stopping_criteria, self.rule
        if rows > 1:
            criteria = criteria if fast_check(criteria) is not None else RowView(criteria, r, rows)
            rule = copy.copy(rule)
            rule.row = r  # its row of a sampling rule's noise blocks
            if rule.processors:
                rule.processors = RowView(rule.processors, r, rows)
        streamer = self.streamer if rows == 1 else None
        seq = TokenSequence(input_ids[r : r + 1], criteria, streamer, self.stats, self.keep_scores, self.keep_logits)
        # priced by the rows' own curve (a [B, k] forward against a [B, 1] one)
        proposer = self.proposers(self.config, rule, self.stats, self.kept, self.costs, self.index)
        proposer.start(seq, logits, np.asarray(seq.tokens, dtype=np.int64)[real])
        return Row(seq, proposer, input_ids.shape[1], int(real.argmax()))

    @property
    def done(self) -> bool:
        return not self.live

    def step(self) -> None:
        """One forward for every live row: plan, forward, verify (and learn), commit, stop. On
        a static cache every row keeps its slot: a row that left feeds its last token, which
        nothing sees or keeps. Each stage's time goes to ``stats.stages``."""
        laps, stats = Laps(self.stats.stages), self.stats
        live = {id(row) for row in self.live}
        rows = self.rows if self.layout.keeps_slots else self.live
        plans = [row.plan() if id(row) in live else plain_plan(row.seq.tokens[-1]) for row in rows]
        width = self.layout.width(max(len(plan.tokens) for plan in plans))
        # a row narrower than the step may fill the room it pays for anyway with more nodes
        plans = [row.refill(plan, width) if id(row) in live else plan for row, plan in zip(rows, plans)]
        laps.mark("plan")
        forwarded = stats.forward_s
        logits = self.layout.forward(rows, plans, width, len(self.live))
        logits = logits.float() if self.widen else logits
        laps.mark("inputs")
        laps.move(stats.forward_s - forwarded, "inputs", "forward")
        preds, top, scores = fetch(logits, self.top_k)  # one read for every row
        laps.mark("fetch")
        paths = []
        for i, (row, plan) in enumerate(zip(rows, plans)):
            if id(row) not in live:
                paths.append([])
                continue
            fed = len(plan.tokens)
            recycled = (top[i, :fed], scores[i, :fed]) if top is not None else (None, None)
            learn = not row.forced  # a forced row feeds pads, not guesses
            paths.append(row.proposer.verify(row.seq, plan, logits[i, :fed], preds[i, :fed], *recycled, learn, laps))
        self.layout.commit(paths, [len(plan.tokens) for plan in plans])
        laps.mark("commit")
        for row in self.live:
            self._check_stop(row)
        self._retire()
        laps.mark("stop")

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
        if self.pad_after_stop and not row.forced:
            return False
        return horizon is None or row.generated < horizon

    def _retire(self) -> None:
        """Drop rows that need no more tokens (from the cache too, unless it keeps their slots)."""
        stops = [row.stop_at for row in self.rows]
        horizon = max(stops) if None not in stops else None
        staying = [i for i, row in enumerate(self.live) if self._needs_more(row, horizon)]
        if len(staying) == len(self.live):
            return
        for i in sorted(set(range(len(self.live))) - set(staying)):
            if not self.live[i].forced:  # a forced row released its rule when it stopped
                self.live[i].proposer.rule.release()
        self.live = [self.live[i] for i in staying]
        self.layout.retire(staying)

    def outputs(self):
        """``(sequences [B, n + T], scores, logits, cache)`` laid out as ``generate`` returns
        them: T = the most new tokens any row had when it stopped; per-step tuples of
        ``[B, V]``; the cache of a single row (a batch's, with its holes, is none ``generate``
        would give). Each row's text (without padding, up to its stop) joins the history."""
        horizon = max(row.stop_at for row in self.rows)
        sequences = []
        for row in self.rows:
            self.kept.remember(row.seq.array()[row.start : row.prompt_len + row.stop_at])
            ids = row.seq.ids[0, : row.prompt_len + horizon]
            if ids.shape[0] < row.prompt_len + horizon:
                ids = torch.cat([ids, ids.new_full((row.prompt_len + horizon - ids.shape[0],), self.pad)])
            sequences.append(ids)
            self.stats.new_tokens -= max(row.generated - horizon, 0)  # beyond what is returned
        scores = _per_step([row.seq.scores for row in self.rows], horizon) if self.keep_scores else None
        logits = _per_step([row.seq.logits for row in self.rows], horizon) if self.keep_logits else None
        return torch.stack(sequences), scores, logits, self.layout.output_cache


def _per_step(rows: list[list[torch.Tensor]], steps: int) -> tuple[torch.Tensor, ...]:
    if len(rows) == 1:
        return tuple(rows[0][:steps])
    return tuple(torch.cat([row[t] for row in rows], dim=0) for t in range(steps))


def decode(model, input_ids: torch.Tensor, *, attention_mask=None, position_ids=None, cache=None, **decoding):
    """Generate after ``input_ids`` (left-padded ``[B, n]``) until every row stopped; the
    keywords are :class:`Decoder`'s. Returns :meth:`Decoder.outputs`."""
    decoder = Decoder(model, **decoding)
    decoder.prefill(input_ids, attention_mask, position_ids, cache)
    while not decoder.done:
        decoder.step()
    return decoder.outputs()
