"""One row of a lookahead batch: its sequence and proposer (``Row``), the batch-wide processors
and criteria seen from its slot (``RowView``), and the rule of a finished row that still feeds
pads so that its scores are reported (``ForcedPad``)."""

from __future__ import annotations

import numpy as np
import torch

from lookahead.sampling.rule import Pick
from lookahead.step.inputs import NO_CHAIN, ROOT_ONLY, StepInputs
from lookahead.step.proposer import Proposer
from lookahead.step.sequence import TokenSequence
from lookahead.verify.tree import GuessTree

PAD_RUN = 4  # pad tokens a finished row feeds per step when its scores are reported


class ForcedPad:
    """The rule of a finished row whose scores are reported: ``rule``'s scores, the pad token."""

    ceiling = 1.0  # a guessed pad always holds

    def __init__(self, rule, pad: int):
        self.rule, self.pad = rule, pad

    def start(self, logits: torch.Tensor, preds: list[int] | None = None) -> None:
        self.rule.start(logits, preds)

    def __call__(self, node: int, sequence: torch.Tensor, children: list[int]) -> Pick:
        pick = self.rule.report(node, sequence)  # draws no noise: generate's pad rows emit nothing
        return Pick(self.pad, pick.logits, pick.scores)

    def release(self) -> None:
        self.rule.release()


class RowView:
    """A batch-wide logits processor list or stopping criteria list, applied to one row.

    ``generate`` calls them on the whole batch, and some keep per-row state indexed by the
    row's place in it (the repetition penalty's padding lengths, ``prefix_allowed_tokens_fn``'s
    batch id). A row decoded on its own is copied into every one of the ``rows`` slots, so
    whatever they index by reads this row's place, and the row's own answer is kept.
    """

    def __init__(self, fn, row: int, rows: int):
        self.fn, self.row, self.rows = fn, row, rows

    def __iter__(self):  # a list of one criterion that is neither a length nor an EOS check
        return iter([self])

    def __bool__(self) -> bool:
        return bool(self.fn)

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor):
        # scores are never None here: criteria get the raw row when no processor ran
        return self.fn(ids.expand(self.rows, -1), scores.repeat(self.rows, 1))[self.row : self.row + 1]


class Row:
    """One prompt of the batch: its sequence, its proposer and where it stands.

    ``stop_at`` is the number of new tokens when the stopping criteria first said stop.
    """

    def __init__(self, seq: TokenSequence, proposer: Proposer, prompt_len: int, start: int):
        self.seq = seq
        self.proposer = proposer
        self.prompt_len = prompt_len
        self.start = start  # the first real token (after the left padding)
        self.stop_at: int | None = None

    @property
    def generated(self) -> int:
        return len(self.seq.tokens) - self.prompt_len

    def plan(self, forced: bool):
        """This step's inputs (ids None) and input tokens."""
        if forced:
            pads = np.full((1, PAD_RUN), self.proposer.rule.pad, dtype=np.int64)
            tree = GuessTree.build(NO_CHAIN, 1, pads)
            return StepInputs(tree, None, None, None, None, (), False), [self.seq.tokens[-1]] + tree.tokens.tolist()
        return self._inputs(*self.proposer.plan(self.seq))

    def plan_plain(self):
        """The inputs of a step that feeds the root alone (a row that left a static batch)."""
        return StepInputs(ROOT_ONLY, None, None, None, None, (), False), [self.seq.tokens[-1]]

    def refill(self, plan, width: int):
        """``plan`` (this step's, from :meth:`plan`) with as many more draft nodes as fit in
        ``width`` tokens, which the batch's widest row already pays for; ``plan`` itself
        where there is no room."""
        inputs, tokens = plan
        if len(tokens) >= width:
            return plan
        return self._inputs(*self.proposer.refill(self.seq, width - 1))

    def _inputs(self, tree, tokens, cands, origins):
        cands = cands.copy() if cands is not None else None  # the pool's rows are a view it reuses
        return StepInputs(tree, None, None, None, cands, origins, self.proposer.windowed), tokens
