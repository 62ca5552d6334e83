"""The verdict on a seeded sample that parts from ``generate``'s, on hand-made scores.

Each case builds scores where the answer is known in closed form: a token a given gap outside
(or inside) the edge of top-k, top-p or min-p (epsilon, eta and typical-p: test_race_edges.py),
and replayed noise that makes it the race's winner once across (or not). At the tolerance
(``race.tolerance``) times ``1 - 1e-3`` a flip is a rounding flip at that boundary, at
``1 + 1e-3`` it is a bug; far away it is a bug; both tokens inside keep the old race-gap rule.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from race_cases import EDGE, IDS, INSIDE, OUTSIDE, WIN, judge, noise, tol
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from lookahead.checking import boundary
from lookahead.checking import verdict as race

# -- top-k: token 3 sits ``gap`` below the k-th largest of the others (2.0), k = 3


def topk_scores(gap: float) -> torch.Tensor:
    return torch.tensor([4.0, 3.0, 2.0, 2.0 - gap, -1.0, -2.0, -3.0, -4.0], dtype=torch.float64)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(("where", "kind"), [(INSIDE, "boundary"), (EDGE, "bug"), (OUTSIDE, "bug")])
def test_top_k_edge(dtype, where, kind):
    t = tol(topk_scores(0.0), dtype)
    scores = topk_scores(where * t)
    v = judge(scores, [TopKLogitsWarper(3)], (0, 3), noise(8, t3=WIN), dtype)
    assert v.kind == kind and v.token == 3 and v.edge == "top-k", v
    assert v.race_gap == math.inf  # the old figure: one token outside generate's support
    assert v.edge_gap == pytest.approx(where * t, rel=1e-6)  # the gap to the k-th largest, exactly
    assert v.tolerance == pytest.approx(t)
    assert ("rounding flip at the top-k boundary" in v.reason) == (kind == "boundary")
    assert "vs the 3th largest of the others 2" in v.reason


@pytest.mark.parametrize(("short", "kind"), [(INSIDE, "boundary"), (EDGE, "bug")])
def test_top_k_token_let_in_must_also_win_the_race(short, kind):
    """Just outside the edge is not enough: let in, the token's race value must come within
    the tolerance of the winner's (token 0: race value 4.0)."""
    t = tol(topk_scores(0.0))
    scores = topk_scores(0.5 * t)
    # race value of token 3 = its score - log q; make it 4.0 - short * t
    log_q3 = float(scores[3]) - (4.0 - short * t)
    v = judge(scores, [TopKLogitsWarper(3)], (0, 3), noise(8, t3=log_q3))
    assert v.kind == kind, v
    assert v.shortfall == pytest.approx(short * t, rel=1e-6)
    if kind == "bug":
        assert "falls" in v.reason and "short of token 0's" in v.reason and "let in across the top-k" in v.reason


@pytest.mark.parametrize(("where", "kind"), [(INSIDE, "boundary"), (EDGE, "bug")])
def test_top_k_cut_lets_the_next_one_overtake(where, kind):
    """Generate's token 1 is the k-th largest (k = 2), winning its race; token 2 sits ``gap``
    below it, so rounding that makes token 2 overtake it cuts it, and leaves lookahead's
    token 0 the winner."""
    t = tol(topk_scores(0.0))
    scores = torch.tensor([4.0, 2.0, 2.0 - where * t, -1.0], dtype=torch.float64)
    v = judge(scores, [TopKLogitsWarper(2)], (1, 0), noise(4, t1=WIN))
    assert v.kind == kind, v
    if kind == "boundary":
        assert v.token == 1 and v.edge == "top-k" and "generate's token 1 was inside" in v.reason
        assert v.edge_gap == pytest.approx(where * t, rel=1e-6)


# -- top-p: masses; token 2 has 0.05, the two below it 0.03 and 0.01 (L = mass at or below it)
# and the two above H = 9 e^g L, so that letting it in with top_p = 0.9 takes a gap of exactly
# g = log(H (1 - p) / (p L)): every score moved by d = g / 2 (none of the above within 2 d of it)


def topp_scores(gap: float) -> torch.Tensor:
    low = torch.tensor([0.05, 0.03, 0.01], dtype=torch.float64)
    high = 9 * math.exp(gap) * float(low.sum())
    return torch.log(torch.cat([torch.tensor([0.6 * high, 0.4 * high], dtype=torch.float64), low]))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(("where", "kind"), [(INSIDE, "boundary"), (EDGE, "bug"), (OUTSIDE, "bug")])
def test_top_p_edge(dtype, where, kind):
    t = tol(topp_scores(0.0), dtype)
    scores = topp_scores(where * t)
    assert not torch.isfinite(TopPLogitsWarper(0.9)(IDS, scores[None].float())[0, 2])  # outside, by construction
    v = judge(scores, [TopPLogitsWarper(0.9)], (0, 2), noise(5, t2=WIN), dtype)
    assert v.kind == kind and v.token == 2 and v.edge == "top-p", v
    if where != OUTSIDE:  # far out, the tokens above it are within 2 d and may sort below it
        assert v.edge_gap == pytest.approx(where * t, rel=1e-6)
    assert "the mass at or below it" in v.reason and "vs 1 - top_p = 0.1" in v.reason


def test_top_p_generate_token_cut_by_a_hair_explains_the_other():
    """The HumanEval/7 case: generate's token (2) lies just inside the nucleus and wins its race;
    rounding that cuts it leaves lookahead's token (0) the winner. Cutting takes
    g = log(p L / ((1 - p) H)) (L: mass at or below token 2, H: above)."""
    for where, kind in ((INSIDE, "boundary"), (EDGE, "bug")):
        t = tol(topp_scores(0.0))
        scores = topp_scores(-where * t)  # H = 9 e^-g L: just inside
        assert torch.isfinite(TopPLogitsWarper(0.9)(IDS, scores[None].float())[0, 2])
        v = judge(scores, [TopPLogitsWarper(0.9)], (2, 0), noise(5, t2=WIN))
        assert v.kind == kind, v
        assert v.race_gap > 10  # inside both, far apart: the old rule called this a bug
        if kind == "boundary":
            assert v.token == 2 and v.edge == "top-p" and "generate's token 2 was inside" in v.reason
            assert v.edge_gap == pytest.approx(where * t, rel=1e-6)


# -- min-p after temperature 0.5: processed scores; token 2 sits ``gap`` below log(min_p)
# relative to the top one, so letting it in takes exactly that gap (it up by d, the top down)


def minp_scores(gap: float) -> torch.Tensor:
    processed = torch.tensor([2.0, 1.0, 2.0 + math.log(0.25) - gap, -3.0], dtype=torch.float64)
    return processed * 0.5  # raw logits: temperature 0.5 doubles them


@pytest.mark.parametrize(("where", "kind"), [(INSIDE, "boundary"), (EDGE, "bug"), (OUTSIDE, "bug")])
def test_min_p_edge_after_temperature(where, kind):
    t = tol(minp_scores(0.0), temperature=0.5)
    processors = [TemperatureLogitsWarper(0.5), MinPLogitsWarper(0.25)]
    v = judge(minp_scores(where * t), processors, (0, 2), noise(4, t2=WIN))
    assert v.kind == kind and v.token == 2 and v.edge == "min-p", v
    assert v.tolerance == pytest.approx(t)  # scale from the processed scores (3.0), not the raw ones
    assert v.edge_gap == pytest.approx(where * t, rel=1e-6)
    assert "vs min_p = 0.25" in v.reason


# -- both inside: the old rule, unchanged


@pytest.mark.parametrize(("gap", "kind"), [(race.TIE_GAP * 0.99, "race"), (race.TIE_GAP * 1.01, "bug")])
def test_inside_the_support_the_race_gap_decides_as_before(gap, kind):
    """In float32 the tolerance is TIE_GAP, and the race gap is what ``race.gap`` gave before."""
    scores = torch.tensor([1.0, 1.0 - gap, -2.0, -3.0], dtype=torch.float64)
    processors = [TopPLogitsWarper(0.99)]
    v = judge(scores, processors, (0, 1), noise(4), "float32")
    processed = LogitsProcessorList(processors)(IDS, scores[None])[0]
    old = race.gap(torch.log_softmax(processed, -1) - noise(4), (0, 1))  # what race_gap computed
    assert v.kind == kind and v.tolerance == race.TIE_GAP and v.edge is None and v.edge_gap in (None, 0.0), v
    assert v.race_gap == pytest.approx(gap, rel=1e-6) and v.race_gap == pytest.approx(old, rel=1e-12)
    assert ("a rounding flip of the race" in v.reason) == (kind == "race")


def test_no_processors_is_the_plain_race():
    v = judge(torch.tensor([0.5, 0.5 - 1e-5, 0.0], dtype=torch.float64), None, (0, 1), noise(3), "float32")
    assert v.kind == "race" and v.flip


def test_a_hard_mask_is_never_a_flip():
    """A token a processor that is not a boundary removed (a suppressed token) lies where no
    rounding reaches, however well the noise favours it."""
    scores = torch.tensor([1.0, 0.9, 0.0, -1.0], dtype=torch.float64)
    processors = [SuppressTokensLogitsProcessor([1]), TopKLogitsWarper(3)]
    v = judge(scores, processors, (0, 1), noise(4, t1=WIN))
    assert v.kind == "bug" and not v.flip and v.edge is None and v.edge_gap == math.inf
    assert "masked before the sampling warpers" in v.reason
    assert v.as_dict()["edge_gap"] is None and v.as_dict()["race_gap"] is None  # strict JSON: no inf


def test_generate_token_no_rounding_explains_is_a_bug():
    """The reference's own winner must be explained too: a 'generate token' far outside."""
    scores = topk_scores(4.5)
    v = judge(scores, [TopKLogitsWarper(3)], (3, 0), noise(8, t3=WIN))
    assert v.kind == "bug" and "generate's token 3" in v.reason


# -- the tolerance


def test_tolerance_by_dtype():
    assert race.tolerance("float32", 10.0) == race.TIE_GAP
    assert race.tolerance(torch.float32, 1e4) == pytest.approx(2 * 16 * torch.finfo(torch.float32).eps * 1e4)
    assert race.tolerance(torch.bfloat16, 10.0) == pytest.approx(2 * 4 * 2**-7 * 10)
    assert race.tolerance("float16", 0.1) == pytest.approx(2 * 4 * 2**-10)  # scales under 1 count as 1
    with pytest.raises(ValueError, match="dtype must be one of"):
        race.tolerance("int8")
    with pytest.raises(ValueError, match="scale must be >= 0"):
        race.tolerance("float32", -1.0)


def test_bad_input_names_the_parameter():
    scores = topk_scores(1.0)
    with pytest.raises(ValueError, match="tokens"):
        race.verdict(IDS, scores, None, (0, 1, 2), noise(8))
    with pytest.raises(ValueError, match="log_noise"):
        race.verdict(IDS, scores, None, (0, 1), noise(7))
    with pytest.raises(ValueError, match="scores must be one row"):
        boundary.run_chain(IDS, scores[None], None)
    with pytest.raises(ValueError, match="processor must be"):
        boundary.measure(TemperatureLogitsWarper(0.5), scores, 0)


# -- the crossing against closed forms on random scores


@given(
    values=st.lists(st.floats(-8, 8), min_size=4, max_size=12, unique=True),
    k=st.integers(1, 3),
    pick=st.integers(0, 11),
)
def test_top_k_crossing_is_the_gap_to_the_kth_largest_of_the_others(values, k, pick):
    scores = torch.tensor(values, dtype=torch.float64)
    order = torch.argsort(scores, descending=True)
    token = int(order[k + pick % (len(values) - k)])  # outside the top k
    kth = float(torch.cat([scores[:token], scores[token + 1 :]]).topk(k).values[-1])
    gap, decider = boundary.crossing(IDS, scores, [TopKLogitsWarper(k)], token, inside=False)
    assert decider == 0 and gap == pytest.approx(kth - float(scores[token]), abs=1e-9)


@given(values=st.lists(st.floats(-8, 8), min_size=3, max_size=12), min_p=st.sampled_from([0.05, 0.2, 0.5]))
def test_min_p_crossing_is_the_log_ratio_to_the_threshold(values, min_p):
    scores = torch.tensor(values, dtype=torch.float64)
    token = int(scores.argmin())
    need = math.log(min_p) - (float(scores[token]) - float(scores.max()))
    gap, _ = boundary.crossing(IDS, scores, [MinPLogitsWarper(min_p)], token, inside=False)
    assert gap == pytest.approx(max(need, 0.0), abs=1e-9)
