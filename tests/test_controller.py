"""The shape controller backs off to the lean shape when the window stops paying."""

from __future__ import annotations

import torch

import lookahead
from lookahead.controller import FULL, LEAN, PLAIN, ShapeController
from tiny_models import tiny_model


def run(controller, steps, outcome):
    shapes = []
    for _ in range(steps):
        shape = controller.choose()
        shapes.append(shape)
        controller.record(shape, *outcome[shape])
    return shapes


def test_prefers_the_faster_shape_and_keeps_exploring():
    controller = ShapeController(explore_every=5)
    shapes = run(controller, 60, {FULL: (1, 0.02), LEAN: (1, 0.01), PLAIN: (1, 0.015)})
    assert shapes[:6] == [FULL, FULL, LEAN, LEAN, PLAIN, PLAIN]
    tail = shapes[10:]
    assert tail.count(LEAN) > 0.6 * len(tail)
    assert FULL in tail and PLAIN in tail  # still tried now and then
    assert controller.rate(LEAN) > controller.rate(PLAIN) > controller.rate(FULL)


def test_window_wins_back_when_it_pays_again():
    controller = ShapeController(explore_every=12)
    run(controller, 20, {FULL: (1, 0.02), LEAN: (1, 0.01), PLAIN: (1, 0.01)})
    shapes = run(controller, 40, {FULL: (4, 0.02), LEAN: (1, 0.01), PLAIN: (1, 0.01)})
    assert shapes[-20:].count(FULL) >= 12


def test_not_adaptive_is_always_full():
    controller = ShapeController(adaptive=False)
    assert set(run(controller, 10, {FULL: (1, 1.0), LEAN: (9, 0.1), PLAIN: (1, 0.1)})) == {FULL}


def test_random_prompt_backs_off_and_stays_exact():
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[7, 30, 12, 41, 3, 19, 25, 8, 44, 16]])
    kwargs = dict(max_new_tokens=48, eos_token_id=None, pad_token_id=0)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_stats=stats, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    assert 0 < stats.lean_steps < stats.steps
