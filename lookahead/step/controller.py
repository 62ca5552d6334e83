"""Backing off when guesses stop paying: each step's shape by expected tokens per unit cost.

Up to four shapes compete:

- ``full``: root + Jacobi window + guesses (the window keeps producing n-grams), where no
  draft budget takes the window's row;
- ``draft``: root + the draft budget's choice of nodes from every source
  (``budget.DraftBudget``: the window's free-iteration row, copy, pool, recycled
  successors), which may be none;
- ``lean``: root + every guess source but the window, whole (where no budget weighs them:
  the decoder has no copy guess);
- ``plain``: the root alone, i.e. plain decoding (one token: the cheapest forward but where
  the curve says two cost less, see ``CostCurve.from_times``).

Each guessing shape keeps moving averages of the tokens it accepted per step and of the
tokens it fed; its rate is ``tokens / (cost(fed) + overhead)``, with ``cost`` the model's
calibrated :class:`~lookahead.step.costmodel.CostCurve` and ``overhead`` the decoder's own work
per guessing step in the same units. Plain decoding's rate is exactly 1. No decision reads a
clock, so a busy machine cannot push decoding into a bad shape, and every rank of a
distributed run makes the same choices.

The best shape runs; the others are tried now and then so a text that starts to repeat wins
the guesses back. A try that loses again waits twice as long for the next one (up to
``max_backoff`` times the base wait), so where nothing holds exploration gets rarer. The
window's tries wait in proportion to what one costs beyond a plain step: where the curve
is flat (a GPU) it is tried every ``explore_every`` steps, where its tokens cost most of a
forward more (this project's CPU) about three times as rarely, so that a losing window takes
at most ``EXPLORE_SHARE`` of the forward cost.

Over a whole call, the tries together waste at most ``EXPLORE_SHARE`` of what the call paid:
a try's waste is its cost beyond the tokens it appended (a plain step pays 1 per token), and
a shape's tries wait while their waste so far is above its part of that share (each guessing
shape an equal part, so a cheap shape's frequent tries cannot starve the window's). Where
nothing holds (seeded sampling of a flat distribution, on a curve where any second token
costs 40% of a forward) decoding is then plain but for tries worth 2% of the call, and a try
that pays costs nothing.
A ``frugal`` controller (seeded sampling's) also counts a fresh call's first tries, and starts
a try only when its waste so far plus what its tries have been wasting on average fits its
part: one losing window try then waits for the hundred steps that pay for it.
"""

from __future__ import annotations

import math

from lookahead.step.costmodel import CostCurve

FULL, LEAN, DRAFT, PLAIN = "full", "lean", "draft", "plain"
# the decoder's per-step work beyond plain decoding's (pool lookup, trie, mask, walk), in
# seconds; measured by benchmarks/overhead.py on this project's CPU
GUESS_OVERHEAD_S = 4e-4
# a sampled guessing step's prior tokens: one guess in two holds (greedy's prior is 2)
SAMPLED_PRIOR_TOKENS = 1.5
# under seeded sampling a source's first guess holds about this share of the rule's ceiling:
# the best source's noise-raced guess held 20.8% at T=0.7, where the ceiling averaged 0.52
# (benchmarks/ceilings.py, the embedded model on HumanEval)
GUESS_HIT_SHARE = 0.4
GATE_NODES = 16  # the largest step whose per-node price gates seeded sampling's budget (copy_length's default)
EXPLORE_SHARE = 0.02  # the most of the forward cost the window's losing tries take, before backoff
# consulting the budget costs a guessing step's overhead even where it feeds nothing: after
# this many budget-decided steps in a row that fed nothing, plain steps stop consulting it
# for as many steps, twice as many after each such run, up to QUIET_CAP
EMPTY_RUN = 16
QUIET_CAP = 64
MAX_WINDOW_WAIT = 8  # the window's base wait is at most this many times explore_every


def rule_settings(sampled: bool, draft: bool) -> dict:
    """The :class:`ShapeController` keywords for the decoder's rule: with a draft budget no
    full shape (the window reaches the budget as a row); under seeded sampling the lower
    prior and frugal tries."""
    sampling = {"prior_tokens": SAMPLED_PRIOR_TOKENS, "frugal": True} if sampled else {}
    return {"full": not draft, **sampling}


class _Average:
    __slots__ = ("value", "weight")

    def __init__(self, prior: float = 0.0, weight: float = 0.0):
        self.value = prior * weight
        self.weight = weight

    def add(self, x: float, alpha: float) -> None:
        self.value = (1 - alpha) * self.value + alpha * x
        self.weight = (1 - alpha) * self.weight + alpha

    def mean(self) -> float:
        return self.value / self.weight if self.weight else 0.0


class ShapeController:
    """Picks the next step's shape from token counts and the cost curve.

    Args:
        costs: the model's cost curve (``CostCurve.linear()``, proportional cost, when None).
        adaptive: False pins every step to ``FULL``.
        explore_every: base steps between tries of a shape not currently preferred (a third
            of that for the lean and draft shapes; for the full one, by the window's price:
            see ``window_tokens``).
        alpha: weight of the newest step in the moving averages.
        max_backoff: the most a losing shape's wait grows, as a multiple of its base wait.
        rows: rows decoded together (a batch): the decoder's work per step grows with them.
        draft: weigh the ``draft`` shape instead of the ``lean`` one (the decoder has a draft
            budget).
        window_tokens: the tokens the window adds to a step (``levels x window``): its tries'
            wait is priced from them; 0 (unknown) waits twice ``explore_every``.
        prior_tokens: what a guessing step is assumed to append until measured (its weight
            is one step's): 2 under greedy, so a cold pool's first misses do not send decoding
            to the plain shape; less under sampling, where a guess holds less often and the
            prior's optimism would buy a fresh call's first steps at a loss.
        frugal: tries wait for what they are expected to waste, first tries included (see
            above); for seeded sampling, where tries rarely win.
        full: whether the ``full`` shape competes (a fixed shape is always full). A decoder
            with a draft budget leaves it out: the window's free iterations reach the budget
            as a row whose nodes are fed where they pay, while its levels fed whole are one
            lump of ``levels x window`` tokens (16 by default). Under greedy the lump held
            what the row holds (2.97 tokens per forward against 2.95 on the embedded model
            in bf16) for wider steps, 4% slower; under seeded sampling its levels, advanced by
            the argmax, guess the greedy text, never the sample.
    """

    def __init__(
        self,
        costs: CostCurve | None = None,
        adaptive: bool = True,
        explore_every: int = 12,
        alpha: float = 0.25,
        max_backoff: int = 8,
        rows: int = 1,
        draft: bool = False,
        window_tokens: int = 0,
        prior_tokens: float = 2.0,
        frugal: bool = False,
        full: bool = True,
    ):
        self.costs = costs if costs is not None else CostCurve.linear()
        self.adaptive = adaptive
        self.alpha = alpha
        # each row of a batch plans and walks its own guesses
        self.overhead = self.costs.seconds_in_units(GUESS_OVERHEAD_S * rows)
        # the least a guessed node costs beyond a plain step, in the cheapest step to feed it
        # from: a curve that rises and then levels off (fp32 on this project's CPU) makes a
        # second token dear and the ones after it nearly free
        self._node_price = min((self.costs(1 + n) - 1.0 + self.overhead) / n for n in range(1, GATE_NODES + 1))
        # tried first in this order; with the draft shape, it first and once
        competing = (DRAFT, FULL) if draft else (FULL, LEAN)
        self.guessing = tuple(shape for shape in competing if full or not adaptive or shape != FULL)
        self._first_tries = 1 if draft else 2
        # the window, dearest by far, waits for its first exploration when a cheaper shape competes
        self._tried_first = (DRAFT,) if draft else self.guessing
        self.shapes = self.guessing + (PLAIN,)
        self._tokens = {shape: _Average(prior_tokens, 1.0) for shape in self.guessing}
        self._fed = {shape: _Average() for shape in self.guessing}
        self._since = dict.fromkeys(self.shapes, 0)
        # cheap tries come often: a lean or draft step costs little more than a plain one and
        # finds the moment guesses start to hold (text that begins to repeat); the window
        # costs most
        cheap = max(explore_every // 3, 1)
        base = {LEAN: cheap, DRAFT: cheap, FULL: self._window_wait(explore_every, window_tokens)}
        self._base = {shape: base[shape] for shape in self.guessing}
        self._waits = dict(self._base)
        self._cap = {shape: wait * max_backoff for shape, wait in self._base.items()}
        self.counts = dict.fromkeys(self.shapes, 0)
        self._paid = 0.0  # the call's cost so far, in one-token forwards
        self._wasted = dict.fromkeys(self.guessing, 0.0)  # what each shape's tries cost beyond their tokens
        self._allowance = EXPLORE_SHARE / len(self.guessing)
        self._trying = False  # whether the step being decided is a try
        self.frugal = frugal
        self._rates = {shape: self._rated(shape) for shape in self.guessing} | {PLAIN: 1.0}
        self._empty = 0  # draft steps in a row that fed nothing
        self._quiet = 0  # plain steps left that do not consult the budget
        self._quiet_wait = EMPTY_RUN  # how long the next quiet spell lasts

    def _window_wait(self, explore_every: int, window_tokens: int) -> int:
        """Steps between the window's tries: what one costs beyond a plain step, over
        ``EXPLORE_SHARE``; at least ``explore_every``, and at most ``MAX_WINDOW_WAIT`` times
        that, so a long text still finds a window that starts to pay."""
        if not window_tokens:
            return 2 * explore_every
        premium = self.costs(1 + window_tokens) - 1.0
        return min(max(explore_every, math.ceil(premium / EXPLORE_SHARE)), MAX_WINDOW_WAIT * explore_every)

    def rate(self, shape: str) -> float:
        """Expected tokens per one-token-forward of cost (plain decoding: 1).

        In a batch every quantity is per row and the curve is the batch's own (a forward
        over ``[rows, k]`` against one over ``[rows, 1]``), so the same comparison holds.
        """
        return self._rates[shape]

    def _rated(self, shape: str) -> float:
        fed = self._fed[shape].mean()
        if fed <= 0:
            return 0.0
        return self._tokens[shape].mean() / (self.costs(fed) + self.overhead)

    def best(self) -> str:
        return max(self.shapes, key=self._rates.__getitem__)

    def choose(self) -> str:
        self._trying = False
        if not self.adaptive:
            return FULL
        for shape in self._tried_first:
            if self.counts[shape] < self._first_tries:
                self._trying = self.frugal
                return shape
        best = self.best()
        allowed = self._allowance * self._paid
        stale = [
            shape
            for shape in self.guessing
            if shape != best
            and self._since[shape] >= self._waits[shape]
            and self._wasted[shape] + (self._expected_waste(shape) if self.frugal else 0.0) <= allowed
        ]
        self._trying = bool(stale)
        return stale[0] if stale else best

    def budget_decides(self, ceiling: float) -> bool:
        """Whether a step this controller would run plain goes to the draft budget instead,
        which feeds no node that does not pay by its chances. Under greedy (``ceiling`` 1)
        the chances hold as learnt. Under seeded sampling they are learnt within the call,
        which only a budget consulted every step does (isolated tries never teach it, and
        a draft rate measured from them is the priors', so it cannot gate this); that pays
        where a guessed node, fed in the step size where nodes are cheapest (up to
        ``GATE_NODES``), costs less than a guess's chance of holding
        (``GUESS_HIT_SHARE x ceiling``, about 0.2 at T=0.7). So on a flat curve (a GPU's), on
        this project's CPU in fp32 (a second token costs 0.35 of a forward more, the 3rd to 7th
        nothing) and in bf16 there (two tokens cost 0.92-0.98 of one: a node pays by itself).
        Where ``EMPTY_RUN`` draft steps in a row fed nothing, the next plain steps (as many,
        twice as many after each such run, up to ``QUIET_CAP``) do not consult it; one that
        feeds a node ends that doubling."""
        if self._quiet:
            return False  # it kept finding nothing: a consult costs a guessing step's work
        if ceiling == 1.0:
            return True
        return GUESS_HIT_SHARE * ceiling > self._node_price

    def _expected_waste(self, shape: str) -> float:
        """What a try of ``shape`` wastes by its averages (0 before it fed anything)."""
        fed = self._fed[shape].mean()
        if fed <= 0:
            return 0.0
        return max(self.costs(fed) + self.overhead - self._tokens[shape].mean(), 0.0)

    def record(self, shape: str, accepted: float, fed: float) -> None:
        """A step of ``shape`` fed ``fed`` tokens and appended ``accepted`` (per row)."""
        tried = all(self.counts[s] >= self._first_tries for s in self._tried_first)
        explored = self.adaptive and tried and shape != self.best()
        cost = self.costs(fed) + (self.overhead if shape != PLAIN else 0.0)
        self._paid += cost
        if self._trying:
            self._wasted[shape] += max(cost - accepted, 0.0)
            self._trying = False
        if shape != PLAIN:
            self._tokens[shape].add(float(accepted), self.alpha)
            self._fed[shape].add(float(fed), self.alpha)
            self._rates[shape] = self._rated(shape)  # rates change only here: kept, not recomputed
            if explored:
                lost = self.best() != shape
                self._waits[shape] = min(2 * self._waits[shape], self._cap[shape]) if lost else self._base[shape]
        self._track_consults(shape, fed)
        self.counts[shape] += 1
        for other in self.shapes:
            self._since[other] = 0 if other == shape else self._since[other] + 1

    def _track_consults(self, shape: str, fed: float) -> None:
        """Count the draft steps in a row that fed nothing, and start or run down a quiet
        spell of the budget (see :meth:`budget_decides`)."""
        if shape == PLAIN:
            self._quiet = max(self._quiet - 1, 0)
        elif shape == DRAFT and fed <= 1:
            self._empty += 1
            if self._empty >= EMPTY_RUN:
                self._quiet, self._empty = self._quiet_wait, 0
                self._quiet_wait = min(2 * self._quiet_wait, QUIET_CAP)
        elif shape == DRAFT:
            self._empty, self._quiet_wait = 0, EMPTY_RUN
