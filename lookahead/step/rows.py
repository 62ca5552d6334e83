"""One row of a decode: its sequence and proposer (``Row``), a batch's processors and criteria
seen from its slot (``RowView``), and the rule of a finished row that still feeds pads so that
its scores are reported (``ForcedPad``)."""

from __future__ import annotations

import numpy as np
import torch

from lookahead.sampling.rule import Pick
from lookahead.step.proposer import Plan, Proposer
from lookahead.step.sequence import TokenSequence
from lookahead.verify.tree import GuessTree

PAD_RUN = 4  # pad tokens a finished row feeds per step when its scores are reported


class ForcedPad:
    """The rule of a finished row whose scores are reported: ``rule``'s scores, the pad token."""

    ceiling = 1.0  # a guessed pad always holds
    picks_are_preds = False
    temperature = 1.0

    def __init__(self, rule, pad: int):
        self.rule, self.pad = rule, pad
        self.sampled = rule.sampled

    def start(self, logits: torch.Tensor, preds: list[int] | None = None) -> None:
        self.rule.start(logits, preds)

    def __call__(self, node: int, sequence: torch.Tensor, children: list[int]) -> Pick:
        pick = self.rule.report(node, sequence)  # draws no noise: generate's pad rows emit nothing
        return Pick(self.pad, pick.logits, pick.scores)

    def report(self, node: int, sequence: torch.Tensor) -> Pick:
        return self(node, sequence, [])

    def noise_ahead(self, n: int) -> None:
        return None

    def picker(self, preds, logits, sequence_fn):
        return lambda nodes: [self.pad] * len(nodes)

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
    """One prompt of the decode: its sequence, its proposer and where it stands.

    ``start`` is its first real token (after left padding); ``stop_at`` the number of new
    tokens when the stopping criteria first said stop.
    """

    def __init__(self, seq: TokenSequence, proposer: Proposer, prompt_len: int, start: int):
        self.seq = seq
        self.proposer = proposer
        self.prompt_len = prompt_len
        self.start = start
        self.stop_at: int | None = None

    @property
    def generated(self) -> int:
        return len(self.seq.tokens) - self.prompt_len

    @property
    def forced(self) -> bool:
        """Whether it feeds pads (it stopped, and its scores are still reported)."""
        return isinstance(self.proposer.rule, ForcedPad)

    def plan(self) -> Plan:
        """This step's plan: a run of pads for a forced row, else its proposer's."""
        if self.forced:
            tree = GuessTree.build(np.full((1, PAD_RUN), self.proposer.rule.pad, dtype=np.int64))
            return Plan(tree, [self.seq.tokens[-1], *tree.tokens.tolist()], None, (), tree.layout())
        return self.proposer.plan(self.seq)

    def refill(self, plan: Plan, width: int) -> Plan:
        """``plan`` with as many more draft nodes as fit in ``width`` tokens, which the step
        pays for anyway (a wider row's, a bucket's); ``plan`` itself where there is no room or
        no budget to choose them."""
        if len(plan.tokens) >= width or self.forced or self.proposer.planner is None:
            return plan
        return self.proposer.refill(self.seq, width - 1)
