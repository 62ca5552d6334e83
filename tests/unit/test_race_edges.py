"""The verdict at the edges of epsilon, eta and typical-p supports, on hand-made scores.

As in test_race.py: each case puts a token a known gap (in closed form where one exists)
across the edge, with noise that makes it the race's winner once across; at the tolerance
times ``1 - 1e-3`` the flip is a rounding flip at that boundary, at ``1 + 1e-3`` a bug. Where no
closed form exists (typical-p with neighbours free to change sides) the crossing is checked
against every corner of the shift.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from race_cases import EDGE, IDS, INSIDE, OUTSIDE, WIN, judge, noise, tol
from transformers import EpsilonLogitsWarper, EtaLogitsWarper, TopKLogitsWarper, TypicalLogitsWarper

from lookahead.checking import boundary

# -- epsilon: token 3 has p_3, with eight tokens below it (mass that lowers p_3 too, which a top
# set's worst case would leave where it is); epsilon is set so that letting it in takes exactly
# g = logit(epsilon) - logit(p_3) (it up by d, every other score down), cutting it the reverse


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


EPS_SCORES = torch.tensor([3.0, 2.0, 1.0, -1.0, *[-1.2 - 0.2 * i for i in range(8)]], dtype=torch.float64)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(("where", "kind"), [(INSIDE, "boundary"), (EDGE, "bug"), (OUTSIDE, "bug")])
def test_epsilon_edge(dtype, where, kind):
    t = tol(EPS_SCORES, dtype)
    p3 = float(torch.softmax(EPS_SCORES, -1)[3])
    epsilon = sigmoid(logit(p3) + where * t)
    v = judge(EPS_SCORES, [EpsilonLogitsWarper(epsilon)], (0, 3), noise(12, t3=WIN), dtype)
    assert v.kind == kind and v.token == 3 and v.edge == "epsilon", v
    assert v.edge_gap == pytest.approx(where * t, rel=1e-6)  # exact at any distance
    assert f"its probability {p3:.6g} vs epsilon = {epsilon:g}" in v.reason


@pytest.mark.parametrize(("where", "kind"), [(INSIDE, "boundary"), (EDGE, "bug")])
def test_epsilon_generate_token_cut_by_a_hair_explains_the_other(where, kind):
    """Generate's token 3 lies just inside (p_3 = epsilon e^g in odds) and wins its race; the
    rounding that cuts it leaves lookahead's token 0 the winner."""
    t = tol(EPS_SCORES)
    epsilon = sigmoid(logit(float(torch.softmax(EPS_SCORES, -1)[3])) - where * t)
    v = judge(EPS_SCORES, [EpsilonLogitsWarper(epsilon)], (3, 0), noise(12, t3=WIN))
    assert v.kind == kind and v.race_gap > 10, v
    if kind == "boundary":
        assert v.token == 3 and v.edge == "epsilon" and "generate's token 3 was inside" in v.reason
        assert v.edge_gap == pytest.approx(where * t, rel=1e-6)


# -- eta keeps p >= min(epsilon, sqrt(epsilon) e^-H): p >= epsilon, or s - mu >= log(epsilon) / 2
# (mu = sum p_j s_j, since log p + H = s - mu). At low entropy the first decides (epsilon's closed
# form); at high entropy the second, whose worst case raises token 6 and every score below
# mu - 1 (lowering mu) and lowers the rest; no score is within reach of mu - 1 here, so that
# corner is the exact worst case, and epsilon is set so that it lets token 6 in at exactly g


def mean_score(scores: torch.Tensor) -> float:
    return float((torch.softmax(scores, -1) * scores).sum())


ETA_PEAKED = torch.tensor([6.0, 2.0, 1.0, 0.0, *[-0.5 - 0.3 * i for i in range(6)]], dtype=torch.float64)
ETA_FLAT = torch.cat([torch.linspace(0.0, 1.0, 30), torch.full((8,), -2.0), torch.tensor([-2.3])]).double()


def eta_epsilon(scores: torch.Tensor, token: int, gap: float) -> float:
    """The epsilon whose ``s - mu >= log(epsilon) / 2`` lets ``token`` in at ``gap``, no less."""
    d, mu = gap / 2, mean_score(scores)
    moved = scores + d * torch.where(scores < mu - 1, 1.0, -1.0)
    moved[token] = scores[token] + d
    return math.exp(2 * (float(moved[token]) - mean_score(moved)))


@pytest.mark.parametrize("branch", ["epsilon", "entropy"])
@pytest.mark.parametrize(("where", "kind"), [(INSIDE, "boundary"), (EDGE, "bug"), (OUTSIDE, "bug")])
def test_eta_edge(branch, where, kind):
    scores, token = (ETA_PEAKED, 3) if branch == "epsilon" else (ETA_FLAT, 38)
    t, v = tol(scores), scores.numel()
    p = float(torch.softmax(scores, -1)[token])
    entropy = float(torch.distributions.Categorical(logits=scores).entropy())
    if branch == "epsilon":
        epsilon = sigmoid(logit(p) + where * t)
        assert math.sqrt(epsilon) * math.exp(-entropy) > 2 * epsilon  # eta = epsilon, far from the other
    else:
        epsilon = eta_epsilon(scores, token, where * t)
        assert math.sqrt(epsilon) * math.exp(-entropy) < 0.5 * epsilon  # eta = sqrt(epsilon) e^-H
        assert logit(epsilon) - logit(p) > 3 * t  # p >= epsilon lies farther than the tolerance
    warper = EtaLogitsWarper(epsilon)
    epsilon = float(warper.epsilon)  # as the warper keeps it: a float32 tensor
    top = int(scores.argmax())  # generate's token: the race's winner without token ``token``
    verdict = judge(scores, [warper], (top, token), noise(v, **{f"t{token}": WIN}))
    assert verdict.kind == kind and verdict.token == token and verdict.edge == "eta", verdict
    if branch == "epsilon":  # exact at any distance, and of the float32 epsilon
        assert verdict.edge_gap == pytest.approx(logit(epsilon) - logit(p), rel=1e-6)
    if where != OUTSIDE:  # far out, p >= epsilon comes first
        assert verdict.edge_gap == pytest.approx(where * t, rel=1e-5)
    eta = min(epsilon, math.sqrt(epsilon) * math.exp(-entropy))
    assert f"its probability {p:.6g} vs eta = {eta:.6g}" in verdict.reason


def test_eta_token_let_in_with_a_better_one_is_a_bug():
    """Lowering mu lets in every score near the edge: token 38 (0.1 above token 39, more than
    the ``d`` that lets 39 in) comes in whenever 39 does, and beats it in the race, so 39
    cannot have won (a top set never lets in a token above it: those are inside already)."""
    scores = torch.cat([ETA_FLAT[:38], torch.tensor([-2.3, -2.4])]).double()
    t = tol(scores)
    warper = EtaLogitsWarper(eta_epsilon(scores, 39, INSIDE * t))
    assert not torch.isfinite(warper(IDS, scores[None])[0, 38:]).any()  # both outside
    gap, _ = boundary.crossing(IDS, scores, [warper], 39, inside=False)
    assert gap < t and 0.1 > gap / 2
    v = judge(scores, [warper], (29, 39), noise(40, t38=WIN - 1, t39=WIN))
    assert v.kind == "bug" and v.token == 39 and "short of token 38's" in v.reason, v


def test_eta_after_top_k_is_measured_on_what_it_sees():
    """Top-k (49) first cuts 100 tokens just below token 48, a sixth of the mass: eta's mean
    and entropy are those of the 49 left (mu - 1 = -0.5 there, -0.9 over all), so the ten
    scores at -0.7 go up, not down, in the worst case, and the closed form is that of the 49."""
    kept = torch.cat([ETA_FLAT[:30], torch.full((10,), -0.7), ETA_FLAT[30:]]).double()
    scores = torch.cat([kept, torch.full((100,), -2.35, dtype=torch.float64)])
    t = tol(scores)
    assert mean_score(kept) - 1 > -0.7 > mean_score(scores) - 1
    epsilon = eta_epsilon(kept, 48, INSIDE * t)
    entropy = float(torch.distributions.Categorical(logits=kept).entropy())
    assert math.sqrt(epsilon) * math.exp(-entropy) < 0.5 * epsilon  # eta = sqrt(epsilon) e^-H
    assert logit(epsilon) - logit(float(torch.softmax(kept, -1)[48])) > 3 * t
    processors = [TopKLogitsWarper(49), EtaLogitsWarper(epsilon)]
    v = judge(scores, processors, (29, 48), noise(149, t48=WIN))
    assert v.kind == "boundary" and v.token == 48 and v.edge == "eta", v
    assert v.edge_gap == pytest.approx(INSIDE * t, rel=1e-5)  # epsilon is kept in float32


# -- typical-p keeps the tokens nearest mu (|surprisal - entropy| = |s - mu|) up to a mass: a token
# is in iff the mass P of those strictly nearer is under typical_p. It is no top set: token 0 is
# cut as too likely (above mu), token 31 as too unlikely (below it). With no token within reach
# of its distance, letting it in takes exactly g = logit(P) - logit(typical_p) (those nearer
# down, the rest up), cutting it logit(typical_p) - logit(P); typical_p is set from g


TYPICAL = torch.cat([torch.tensor([2.2]), torch.linspace(0.0, 0.2, 30), torch.tensor([-1.5, -3.5])]).double()


def nearer_mass(scores: torch.Tensor, token: int) -> float:
    """P: the mass of the tokens strictly nearer the mean score than ``token``."""
    q = torch.softmax(scores, -1)
    distance = (scores - float((q * scores).sum())).abs()
    return float(q[distance < distance[token]].sum())


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("token", [0, 31])  # above mu, below it
@pytest.mark.parametrize(("where", "kind"), [(INSIDE, "boundary"), (EDGE, "bug"), (OUTSIDE, "bug")])
def test_typical_edge_from_above_and_below(dtype, token, where, kind):
    t = tol(TYPICAL, dtype)
    mass = sigmoid(logit(nearer_mass(TYPICAL, token)) - where * t)
    warper = TypicalLogitsWarper(mass)
    top = int(warper(IDS, TYPICAL[None])[0].argmax())  # generate's token: the best one left in
    v = judge(TYPICAL, [warper], (top, token), noise(33, **{f"t{token}": WIN}), dtype)
    assert v.kind == kind and v.token == token and v.edge == "typical-p", v
    if where != OUTSIDE:  # far out, tokens change sides
        assert v.edge_gap == pytest.approx(where * t, rel=1e-6)
    assert f"{nearer_mass(TYPICAL, token):.6g} vs typical_p = {mass:g}" in v.reason
    assert "the mass of the tokens more typical than it" in v.reason


@pytest.mark.parametrize(("where", "kind"), [(INSIDE, "boundary"), (EDGE, "bug")])
def test_typical_neighbour_carried_across(where, kind):
    """Tokens 0 and 1 lie on the same side of mu, token 1 (nearer) ``g`` below token 0, and
    without token 1 the mass nearer than token 0 is under typical_p (0.7): shifting them ``d``
    apart (token 0 toward mu) lets token 0 in at ``2 d = g`` exactly (their distances to mu
    differ by ``s_0 - s_1`` whatever mu does), far before the mass alone would (0.5 nats)."""
    t = tol(torch.tensor([2.0]))
    scores = torch.cat([torch.tensor([2.0, 2.0 - where * t]), torch.linspace(-0.1, 0.1, 22)]).double()
    assert logit(nearer_mass(scores, 0)) - logit(0.7) > 3 * t
    v = judge(scores, [TypicalLogitsWarper(0.7)], (1, 0), noise(24, t0=WIN))
    assert v.kind == kind and v.token == 0 and v.edge == "typical-p", v
    assert v.edge_gap == pytest.approx(where * t, rel=1e-6)


@pytest.mark.parametrize("token", [0, 31])
@pytest.mark.parametrize(("where", "kind"), [(INSIDE, "boundary"), (EDGE, "bug")])
def test_typical_generate_token_cut_by_a_hair_explains_the_other(token, where, kind):
    """Generate's token just inside typical-p wins its race; the rounding that cuts it leaves
    lookahead's token 1 (among the most typical, the noise's second favourite) the winner."""
    t = tol(TYPICAL)
    mass = sigmoid(logit(nearer_mass(TYPICAL, token)) + where * t)
    v = judge(TYPICAL, [TypicalLogitsWarper(mass)], (token, 1), noise(33, t1=-15.0, **{f"t{token}": WIN}))
    assert v.kind == kind and v.race_gap > 10, v
    if kind == "boundary":
        assert v.token == token and v.edge == "typical-p" and f"generate's token {token} was inside" in v.reason
        assert v.edge_gap == pytest.approx(where * t, rel=1e-6)


def corner_minimum(scores: torch.Tensor, warper, token: int, inside: bool) -> float:
    """The smallest gap ``2 d`` at which some corner of the box (every score moved by ``+-d``)
    moves ``token`` across ``warper``: each corner's first crossing, doubling from 1e-4, then
    bisected (a corner that does not cross at the best gap so far is passed over)."""
    best = 64.0 * (1 + 1e-9)  # past the search's reach
    for signs in itertools.product([-1.0, 1.0], repeat=scores.numel()):
        sign = torch.tensor(signs, dtype=torch.float64)

        def crosses(gap: float, sign=sign) -> bool:
            return bool(torch.isfinite(warper(IDS, (scores + gap / 2 * sign)[None])[0, token])) != inside

        low, high = 0.0, 1e-4
        while high < best and not crosses(high):
            low, high = high, 2 * high
        if high >= best and not crosses(best):
            continue
        high = min(high, best)
        for _ in range(40):
            mid = (low + high) / 2
            low, high = (low, mid) if crosses(mid) else (mid, high)
        best = high
    return best


@pytest.mark.parametrize(
    ("scores", "mass", "token"),
    [  # random cases: cuts that need the carry, the mass lever, following mu; a token let in
        ([-0.26, 0.42, 0.86, 0.0], 0.3, 2),
        ([-1.12, 0.79, 0.27, 0.52], 0.7, 1),
        ([-1.11, -2.06, 0.15, 0.48, 0.14], 0.7, 2),
        ([-0.52, -1.92, 1.11, 0.8, -0.27, -0.81, 0.64], 0.5, 3),
        ([0.46, 0.59, -0.99, 2.58, 0.83, 1.8, -0.93], 0.3, 4),
    ],
)
def test_typical_crossing_is_the_best_corner(scores, mass, token):
    """Where no closed form holds (tokens change sides, mu moves), the crossing is still the
    smallest over every corner of the box, found by trying them all."""
    scores, warper = torch.tensor(scores, dtype=torch.float64), TypicalLogitsWarper(mass)
    inside = bool(torch.isfinite(warper(IDS, scores[None])[0, token]))
    gap, _ = boundary.crossing(IDS, scores, [warper], token, inside)
    assert 0 < gap < 1 and gap == pytest.approx(corner_minimum(scores, warper, token, inside), rel=1e-6)
