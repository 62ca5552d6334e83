"""The shape controller: expected tokens per unit of calibrated cost, no clocks."""

from __future__ import annotations

import math

import pytest
import torch

import lookahead
from lookahead.step.controller import DRAFT, FULL, LEAN, PLAIN, ShapeController
from lookahead.step.costmodel import CostCurve

from tiny_models import tiny_model

# a forward over k tokens costs 1 + 0.1 (k - 1) one-token forwards
CHEAP = CostCurve.linear(0.1)


def run(controller, steps, outcome):
    """Drive ``controller`` for ``steps`` steps; ``outcome[shape] = (accepted, fed)``."""
    shapes = []
    for _ in range(steps):
        shape = controller.choose()
        shapes.append(shape)
        controller.record(shape, *outcome.get(shape, (1, 1)))
    return shapes


def test_rate_is_tokens_over_calibrated_cost():
    controller = ShapeController(CHEAP)
    for _ in range(30):
        controller.record(LEAN, 3, 11)
    assert controller.rate(PLAIN) == 1.0
    assert abs(controller.rate(LEAN) - 3 / CHEAP(11)) < 1e-3  # the 2-token prior has all but faded


def test_prefers_the_best_shape_and_keeps_exploring():
    controller = ShapeController(CHEAP, explore_every=6)
    shapes = run(controller, 80, {FULL: (1, 21), LEAN: (2, 5)})
    assert shapes[:4] == [FULL, FULL, LEAN, LEAN]
    tail = shapes[10:]
    assert tail.count(LEAN) > 0.8 * len(tail)
    assert FULL in tail  # still tried now and then
    assert PLAIN not in tail  # 2 tokens for 1.4 units beats plain's 1 for 1
    assert controller.rate(LEAN) > controller.rate(PLAIN) > controller.rate(FULL)


def test_where_nothing_holds_decoding_is_plain_and_tries_are_rare():
    controller = ShapeController(CHEAP, explore_every=6)
    shapes = run(controller, 400, {FULL: (1, 21), LEAN: (1, 5)})
    first, last = shapes[20:120], shapes[300:400]
    assert first.count(PLAIN) > 0.9 * len(first)
    assert last.count(PLAIN) > 0.9 * len(last)
    assert FULL in shapes[200:] and LEAN in shapes[200:]  # never gives up on either


@pytest.mark.parametrize("curve", [CHEAP, CostCurve((1, 2, 32), (1.0, 1.43, 2.15)), CostCurve.linear(1.0)])
@pytest.mark.parametrize("draft", [False, True])
@pytest.mark.parametrize("steps", [128, 2000])
def test_tries_that_lose_waste_at_most_the_explore_share(curve, draft, steps):
    """Where no guess ever holds, a call pays at most ``EXPLORE_SHARE`` over plain decoding
    for its tries, besides the first tries of a fresh call; on a curve where a second token
    costs 43% of a forward (seeded sampling on an AVX2 CPU) as where tokens are nearly free.
    (Sampling's prior: greedy's buys a fresh call a few more steps of guesses.)"""
    from lookahead.step.controller import EXPLORE_SHARE, SAMPLED_PRIOR_TOKENS

    controller = ShapeController(
        curve, explore_every=12, draft=draft, window_tokens=16, prior_tokens=SAMPLED_PRIOR_TOKENS
    )
    outcome = {FULL: (1, 17), LEAN: (1, 5), DRAFT: (1, 5)}
    shapes = run(controller, steps, outcome)
    first = 1 if draft else 4
    cost = sum(curve(outcome[s][1]) + controller.overhead if s != PLAIN else 1.0 for s in shapes[first:])
    tries = len(shapes) - first
    # each shape may overrun its part by the one try that starts within it
    overrun = curve(17) + curve(5) - 2
    assert cost <= tries * (1 + EXPLORE_SHARE) + overrun, (cost / tries, controller.counts)
    if steps > 1000:
        assert controller.counts[FULL] > (0 if draft else 2)  # the window is still tried


def test_window_wins_back_when_it_pays_again():
    controller = ShapeController(CHEAP, explore_every=12)
    run(controller, 20, {FULL: (1, 21), LEAN: (1, 3)})
    shapes = run(controller, 120, {FULL: (6, 21), LEAN: (1, 3)})
    assert shapes[-40:].count(FULL) >= 30


def test_decisions_depend_on_tokens_only():
    """Same token counts, same choices: what lets distributed ranks agree without talking."""
    outcome = {FULL: (2, 17), LEAN: (3, 9)}
    assert run(ShapeController(CHEAP), 100, outcome) == run(ShapeController(CHEAP), 100, outcome)


def test_not_adaptive_is_always_full():
    controller = ShapeController(CHEAP, adaptive=False)
    assert set(run(controller, 10, {FULL: (1, 30), LEAN: (9, 2)})) == {FULL}


def test_cost_curve_interpolates_and_extrapolates():
    curve = CostCurve.from_times((1, 4, 8), (0.01, 0.02, 0.015))  # noise: 8 measured below 4
    assert curve.costs == (1.0, 2.0, 2.0) and curve.unit_s == 0.01
    assert curve(1) == 1.0 and abs(curve(2.5) - 1.5) < 1e-9 and curve(16) == 2.0
    assert CostCurve.from_dict(curve.as_dict()) == curve


def test_a_wider_forward_may_cost_less_than_one_token():
    """Two tokens measured cheaper than one stay so (a one-query attention kernel can be the
    slower one); from two tokens on, noise still cannot make more tokens cheaper."""
    curve = CostCurve.from_times((1, 2, 4, 8), (0.010, 0.009, 0.0085, 0.011))
    assert curve.costs == pytest.approx((1.0, 0.9, 0.9, 1.1)) and curve(1) == 1.0 and curve(3) == pytest.approx(0.9)


def test_random_prompt_backs_off_and_stays_exact():
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[7, 30, 12, 41, 3, 19, 25, 8, 44, 16]])
    kwargs = dict(max_new_tokens=48, eos_token_id=None, pad_token_id=0)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_stats=stats, lookahead_costs=CHEAP, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    # steps without the window: the draft shape is tried before it (the window's first try
    # waits by its price, 80 steps on this curve), and the budget feeds drafts on some steps,
    # none on others
    assert stats.steps - stats.lean_steps <= 1 and 0 < stats.draft_steps < stats.steps and stats.plain_steps > 0


def test_draft_shape_is_tried_first_and_wins_where_the_budget_pays():
    """With a draft budget: the draft shape is tried first and once, the window only when its
    exploration comes; a draft that holds for little fed beats a window that holds a bit
    more, and the window is still re-tried; no lean shape competes."""
    controller = ShapeController(CostCurve.linear(0.2), draft=True)
    shapes = run(controller, 120, {DRAFT: (3, 5), FULL: (4, 25)})
    assert shapes[0] == DRAFT and FULL not in shapes[:20] and FULL in shapes and LEAN not in shapes
    tail = shapes[40:]
    assert tail.count(DRAFT) > 0.8 * len(tail) and FULL in tail and PLAIN not in tail
    assert controller.best() == DRAFT


def test_without_a_budget_the_draft_shape_never_runs():
    controller = ShapeController(CostCurve.linear(0.2))
    assert DRAFT not in run(controller, 60, {LEAN: (3, 5)})


def test_the_windows_tries_wait_by_what_one_costs():
    """Where the window's tokens are nearly free its tries come every ``explore_every``
    steps; where they cost most of a forward more, the wait keeps a losing window's share of
    the forward cost at ``EXPLORE_SHARE``, up to ``MAX_WINDOW_WAIT`` times the base wait; with
    its size unknown, twice the base wait."""
    from lookahead.step.controller import EXPLORE_SHARE, MAX_WINDOW_WAIT

    def first_full(controller, steps=200):
        shapes = run(controller, steps, {FULL: (1, 17), DRAFT: (3, 5)})
        return [i for i, shape in enumerate(shapes) if shape == FULL][:1]

    flat = ShapeController(CostCurve.linear(0.001), draft=True, explore_every=12, window_tokens=16)
    dear = CostCurve((1, 2, 17), (1.0, 1.3, 1.75))
    priced = ShapeController(dear, draft=True, explore_every=12, window_tokens=16)
    unknown = ShapeController(dear, draft=True, explore_every=12)
    wait = math.ceil(0.75 / EXPLORE_SHARE)  # 38: the window's 16 tokens cost 0.75 more than a plain step
    assert first_full(flat) == [12]
    assert first_full(priced) == [wait]
    assert first_full(unknown) == [24]
    proportional = ShapeController(CostCurve.linear(1.0), draft=True, explore_every=12, window_tokens=16)
    assert first_full(proportional) == [MAX_WINDOW_WAIT * 12]  # 16 / 0.02 steps, capped


def test_a_frugal_controller_counts_first_tries_and_waits_for_expected_waste():
    """Seeded sampling's controller: where nothing holds, a fresh 128-step call pays for no
    more than its first tries and its share, and less than a controller that is not frugal;
    where guesses pay, it still finds them."""
    from lookahead.step.controller import EXPLORE_SHARE, SAMPLED_PRIOR_TOKENS

    curve = CostCurve((1, 2, 32), (1.0, 1.43, 2.15))
    outcome = {FULL: (1, 17), DRAFT: (1, 9)}

    def cost(frugal, steps=128):
        controller = ShapeController(
            curve, draft=True, window_tokens=16, prior_tokens=SAMPLED_PRIOR_TOKENS, frugal=frugal
        )
        shapes = run(controller, steps, outcome)
        return sum(curve(outcome[s][1]) if s != PLAIN else 1.0 for s in shapes), shapes

    frugal, shapes = cost(True)
    loose, _ = cost(False)
    first_try = curve(9) - 1
    assert frugal <= 128 * (1 + EXPLORE_SHARE) + first_try, shapes
    assert frugal < loose
    controller = ShapeController(curve, draft=True, window_tokens=16, prior_tokens=SAMPLED_PRIOR_TOKENS, frugal=True)
    assert run(controller, 60, {DRAFT: (4, 9)})[10:].count(DRAFT) > 40  # 4 tokens for 1.6: drafts win


@pytest.mark.parametrize("sampled", [False, True])
def test_a_budget_never_feeds_the_window_whole(sampled):
    """With a draft budget (which takes the window's free iterations as a row, fed where its
    nodes pay) the full shape never runs, however well it would do, greedy or sampled; without
    a budget it still competes. Sampling also starts from a lower prior and tries frugally."""
    from lookahead.step.controller import SAMPLED_PRIOR_TOKENS, rule_settings

    assert rule_settings(False, True) == {"full": False} and rule_settings(False, False) == {"full": True}
    assert rule_settings(True, True) == {"prior_tokens": SAMPLED_PRIOR_TOKENS, "frugal": True, "full": False}
    outcome = {FULL: (6, 17), DRAFT: (1, 9), LEAN: (1, 5)}
    budgeted = ShapeController(CHEAP, draft=True, window_tokens=16, **rule_settings(sampled, True))
    assert FULL not in budgeted.shapes and FULL not in run(budgeted, 300, outcome)
    alone = ShapeController(CHEAP, draft=False, window_tokens=16, **rule_settings(sampled, False))
    assert run(alone, 300, outcome)[-100:].count(FULL) > 90


def test_the_budget_decides_sampled_steps_only_where_a_guessed_node_is_cheap():
    """Greedy steps always go to the budget; seeded sampling's where a guessed node, fed in
    the step size where nodes cost least, costs less than ``GUESS_HIT_SHARE`` of the ceiling:
    where forwards level off after a dear second token (fp32 on this project's CPU), not where
    every token costs a fifth of a forward more (bf16 there), nor when the text is nearly flat."""
    from lookahead.step.controller import GATE_NODES, GUESS_HIT_SHARE

    levelling = ShapeController(CostCurve((1, 2, 4, 8, 16), (1.0, 1.355, 1.53, 1.53, 1.58), 0.008), draft=True)
    rising = ShapeController(CostCurve((1, 2, 4, 8), (1.0, 1.18, 1.71, 2.8), 0.006), draft=True)
    assert levelling.budget_decides(1.0) and rising.budget_decides(1.0)
    assert levelling.budget_decides(0.5) and not rising.budget_decides(0.5)
    assert not levelling.budget_decides(0.05)
    # linear: n nodes cost n * c more, so the price is least at the largest step
    c = 0.005
    linear = ShapeController(CostCurve((1, 1 + GATE_NODES), (1.0, 1.0 + GATE_NODES * c), 0.008), draft=True)
    assert linear.overhead > 0
    price = c + linear.overhead / GATE_NODES
    assert not linear.budget_decides(0.99 * price / GUESS_HIT_SHARE)
    assert linear.budget_decides(1.01 * price / GUESS_HIT_SHARE)


def test_a_budget_that_keeps_feeding_nothing_is_left_unconsulted_for_a_while():
    """``EMPTY_RUN`` draft steps in a row that fed nothing start a quiet spell: that many plain
    steps decide without the budget. The next run of empty consults doubles the spell (up to
    ``QUIET_CAP``); a draft step that feeds a node ends the doubling."""
    from lookahead.step.controller import EMPTY_RUN, QUIET_CAP

    controller = ShapeController(CostCurve.linear(), draft=True)

    def empty_run() -> None:
        for _ in range(EMPTY_RUN):
            assert controller.budget_decides(1.0)
            controller.record(DRAFT, 1.0, 1.0)

    def quiet_steps() -> int:
        n = 0
        while not controller.budget_decides(1.0):
            controller.record(PLAIN, 1.0, 1.0)
            n += 1
        return n

    empty_run()
    assert quiet_steps() == EMPTY_RUN
    empty_run()
    assert quiet_steps() == 2 * EMPTY_RUN
    for _ in range(4):
        empty_run()
        quiet_steps()
    empty_run()
    assert quiet_steps() == QUIET_CAP
    controller.record(DRAFT, 2.0, 3.0)  # a consult that fed a node
    empty_run()
    assert quiet_steps() == EMPTY_RUN
    for _ in range(EMPTY_RUN - 1):
        controller.record(DRAFT, 1.0, 1.0)
    controller.record(DRAFT, 1.0, 2.0)  # fed one node: the run of empty consults restarts
    assert controller.budget_decides(1.0)
