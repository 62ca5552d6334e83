"""The oracle of benchmarks/ceilings.py (lookahead.bench.ceilings): the least cost of decoding a
text whose guessable positions are known, against a brute force over every way of cutting the
text into steps."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead.bench import ceilings
from lookahead.step.costmodel import CostCurve


def brute_force(hits: list[bool], curve) -> float:
    """Every cut of the n new tokens into steps: a step making s tokens feeds the last known
    token and s - 1 guesses, all of which must be hits, and costs ``curve(s)``."""
    n, best = len(hits), float(len(hits))
    for cuts in itertools.product((False, True), repeat=n - 1):
        sizes, size = [], 1
        for cut in cuts:
            if cut:
                sizes.append(size)
                size = 0
            size += 1
        sizes.append(size)
        start, cost = 0, 0.0
        for s in sizes:
            if not all(hits[start : start + s - 1]):
                break
            cost, start = cost + curve(s), start + s
        else:
            best = min(best, cost)
    return best


curves = st.lists(st.floats(0.0, 1.5), min_size=3, max_size=3).map(
    lambda rises: CostCurve((1, 2, 4, 8), tuple(itertools.accumulate([1.0, *rises])))
)


@given(hits=st.lists(st.booleans(), min_size=1, max_size=10), curve=curves)
def test_oracle_cost_is_the_cheapest_cut_into_steps(hits, curve):
    assert ceilings.oracle_cost(hits, curve) == pytest.approx(brute_force(hits, curve))


def test_the_docstring_example():
    curve = CostCurve((1, 2, 3), (1.0, 1.5, 1.6))
    assert ceilings.oracle_cost([False, True, True, False], curve) == pytest.approx(2.6)


def test_no_hits_cost_plain_decoding_and_free_nodes_cost_one_step_per_run():
    assert ceilings.oracle_cost([False] * 7, CostCurve.linear(0.0)) == 7
    # free nodes: runs of hits end in a miss, which ends a step: F T T F | T F -> 3 steps
    assert ceilings.oracle_cost([False, True, True, False, True, False], CostCurve.linear(0.0)) == 3
