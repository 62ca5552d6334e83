"""The edges of ``generate``'s support: how much rounding moves a token across top-k, top-p,
min-p, typical-p, epsilon or eta.

A sampled token is drawn from what the truncating warpers leave (``TopKLogitsWarper``,
``TopPLogitsWarper``, ``MinPLogitsWarper``, ``TypicalLogitsWarper``, ``EpsilonLogitsWarper``,
``EtaLogitsWarper``, after temperature). A token just outside a support is one rounding step
from being let in, and one just inside from being cut. When a many-token forward rounds every
logit a little differently from ``generate``'s one-token forward, such a token is in one
decoding's support and out of the other's, and the two samples part although neither decoder
is wrong.

``crossing`` measures that rounding: the smallest shift ``d`` of every score (each by at most
``d``, in the direction that helps) under which transformers' own warpers put the token on
the other side. It is reported as ``2 d``, a gap in nats like the race gap of two tokens
(``lookahead.checking.verdict``): for top-k it is the token's logit gap to the k-th largest, for
min-p ``log(min_p * p_top / p_token)``, for top-p about ``log((1 - top_p) / mass at or below
the token)``, for epsilon ``logit(epsilon) - logit(p_token)``, ties with the tokens around it
taken into account; ``lookahead.checking.shifts`` says which shifts are tried for each warper,
and where (eta's entropy term, typical-p) the figure is the smallest they find rather than a
proven minimum. ``measure`` gives the compared figures as the warper computes them, for the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lookahead.checking.shifts import TOP_SETS, distinct, plan_for

NAMES = {
    "TopKLogitsWarper": "top-k",
    "TopPLogitsWarper": "top-p",
    "MinPLogitsWarper": "min-p",
    "TypicalLogitsWarper": "typical-p",
    "EpsilonLogitsWarper": "epsilon",
    "EtaLogitsWarper": "eta",
}
SEARCH_GAP = 64.0  # nats: a token farther than this from every edge counts as unreachable (inf)
# The first gap searched is SEARCH_GAP / 2**SEARCH_GRID (~4e-6 nats), doubling up to SEARCH_GAP:
# the smallest that crosses is refined by bisection from the one before it (a shift need not
# cross at every gap past its edge: typical-p's interval and eta's entropy move with it)
SEARCH_GRID = 24
SEARCH_STEPS = 40  # bisection steps: 2**-41 of the gap, far below any tolerance


@dataclass(frozen=True)
class Crossing:
    """What ``cross`` found: ``gap`` (nats, ``2 d``; ``0.0`` on that side already, ``inf``
    out of reach), ``decider`` (index in the processors of the one that decides it, ``-1``
    none) and ``scores`` (``[V]``, float64: the shifted scores at which it crossed, the
    unshifted ones at gap 0, ``None`` at ``inf``)."""

    gap: float
    decider: int
    scores: torch.Tensor | None


def boundary_name(processor) -> str | None:
    """The edge's name (``NAMES``: ``"top-k"``, ..., ``"eta"``) of a measured warper, else ``None``."""
    return NAMES.get(type(processor).__name__)


def run_chain(input_ids: torch.Tensor, scores: torch.Tensor, processors) -> tuple[torch.Tensor, torch.Tensor]:
    """``scores`` (``[V]``) through ``processors`` as ``generate`` runs them, for one row.

    Returns the processed scores (``[V]``, float64) and which processor removed each token
    (``[V]`` long): the index in ``processors`` of the one that first set it to ``-inf``, ``-1``
    where none did (or it was ``-inf`` already). ``input_ids``: the row's tokens so far, ``[1, n]``.
    """
    if scores.dim() != 1:
        raise ValueError(f"scores must be one row [V], got shape {tuple(scores.shape)}")
    out = scores.detach().double()[None]
    removed = torch.full(out.shape[-1:], -1, dtype=torch.long, device=out.device)
    for i, processor in enumerate(processors or ()):
        before = torch.isfinite(out[0])
        out = processor(input_ids, out.clone())  # some processors write into their input
        removed[before & ~torch.isfinite(out[0])] = i
    return out[0], removed


def crossing(
    input_ids: torch.Tensor, scores: torch.Tensor, processors, token: int, inside: bool, keep: int | None = None
) -> tuple[float, int]:
    """``(gap, decider)`` of ``cross``: the gap (nats, ``2 d``) of the smallest rounding ``d``
    that moves ``token`` across the support's edge, and the index of the processor that decides it."""
    found = cross(input_ids, scores, processors, token, inside, keep)
    return found.gap, found.decider


def cross(
    input_ids: torch.Tensor, scores: torch.Tensor, processors, token: int, inside: bool, keep: int | None = None
) -> Crossing:
    """The smallest rounding ``d`` found that moves ``token`` across the support's edge: in
    (``inside=False``: it is outside now) or out (``inside=True``).

    ``scores``: ``[V]`` before ``processors``; ``input_ids``: ``[1, n]``. Every score moves by at
    most ``d``: each measured warper in ``processors`` proposes the shifts that work against what
    it compares (``shifts``), the chain runs on each, and the token has crossed at ``d`` when
    transformers' own warpers put it on the other side for one of them. ``d`` doubles from
    ``SEARCH_GAP / 2**SEARCH_GRID`` to the first that crosses, then bisection between that one
    and the one before. So the gap is always that of a real shift. It is the minimum where one
    proposal is the worst case for the whole chain (top-k, top-p and min-p together, epsilon
    alone; for top-p, ties aside), else the smallest the proposals reach (eta, typical-p, or a
    top set and one of those together: ``shifts``), which may overstate the minimum: a flip may
    then be called a bug, never the reverse. ``keep``: a token that must stay in when cutting
    (the one whose win is being explained); a cut that takes it too does not count. The decider
    is, letting in, the processor that cut the token as ``generate`` ran, cutting, the one that
    cuts it at the shift found (``-1`` if none does: a hard mask such as a banned n-gram never
    moves, and its gap is ``inf``).
    """
    base = scores.detach().double()
    processors = list(processors or ())
    plans = _plans(input_ids, base, processors, token, not inside)

    last: list[torch.Tensor] = []  # the shift that crossed last, tried first: it most likely does again

    def crossed(gap: float) -> tuple[int, torch.Tensor] | None:
        d = gap / 2
        signs = [torch.zeros_like(base)] if d == 0 else distinct(last + [s for plan in plans for s in plan(d)])
        for sign in signs:
            moved = base + d * sign
            out, removed = run_chain(input_ids, moved, processors)
            if bool(torch.isfinite(out[token])) != inside and (keep is None or bool(torch.isfinite(out[keep]))):
                last[:] = [sign]
                return int(removed[token]), moved
        return None

    # letting in: the processor that cut it as generate ran; cutting: the one that cuts it there
    cut_by = -1 if inside else int(run_chain(input_ids, base, processors)[1][token])
    if crossed(0.0) is not None:
        return Crossing(0.0, cut_by, base)
    low = 0.0
    for k in range(SEARCH_GRID, -1, -1):
        high = SEARCH_GAP / 2**k
        found = crossed(high)
        if found is not None:
            break
        low = high
    else:
        return Crossing(math.inf, cut_by, None)
    for _ in range(SEARCH_STEPS):
        mid = (low + high) / 2
        hit = crossed(mid)
        low, high, found = (low, mid, hit) if hit is not None else (mid, high, found)
    return Crossing(high, found[0] if inside else cut_by, found[1])


def _plans(input_ids, base: torch.Tensor, processors, token: int, let_in: bool) -> list:
    """One function ``d -> [sign vectors [V]]`` per measured warper in ``processors`` (a top set
    once for all: one shift is the worst case for each).

    A top set is decided by the order of ``base`` (the scores ``cross`` shifts). The others
    compare probabilities, so their shifts are worked out on what that warper sees
    (``warper_input``: after the warpers before it, the token let in), and the tokens cut
    before it move down, staying out of the way of the warper that cut them."""
    out, top = [], False
    for i, processor in enumerate(processors):
        name = boundary_name(processor)
        if name is None or (name in TOP_SETS and top):
            continue
        if name in TOP_SETS:
            top = True
            out.append(plan_for(name, processor, base, token, let_in))
            continue
        view = warper_input(input_ids, base, processors, i, token)
        dropped = torch.isfinite(base) & ~torch.isfinite(view)
        plan = plan_for(name, processor, view, token, let_in)
        out.append(lambda d, plan=plan, dropped=dropped: [torch.where(dropped, -1.0, sign) for sign in plan(d)])
    return out


def warper_input(input_ids: torch.Tensor, scores: torch.Tensor, processors, index: int, token: int) -> torch.Tensor:
    """The scores (``[V]``, float64) ``processors[index]`` sees, with ``token`` let in: the
    processors before it as ``generate`` runs them, except that no measured warper cuts
    ``token`` (its entry is what the others alone make of it)."""
    before = list(processors)[:index]
    cut, _ = run_chain(input_ids, scores, before)
    opened, _ = run_chain(input_ids, scores, [p for p in before if boundary_name(p) is None])
    cut[token] = opened[token]
    return cut


def measure(processor, scores: torch.Tensor, token: int) -> str:
    """What ``processor`` (a measured warper) compares for ``token`` at its input ``scores``
    (``[V]``, from ``warper_input``), as the warper computes it: the text of a report line."""
    name = boundary_name(processor)
    if name is None:
        raise ValueError(f"processor must be a measured warper ({', '.join(NAMES)}), got {type(processor).__name__}")
    s = scores.detach().double()
    x = float(s[token])
    others = torch.cat([s[:token], s[token + 1 :]])
    logp = torch.log_softmax(s, -1)
    p = math.exp(float(logp[token]))
    if name == "top-k":
        k = min(processor.top_k, others.numel())
        kth = float(others.topk(k).values[-1])
        return f"its score {x:.6g} vs the {k}th largest of the others {kth:.6g}"
    if name == "min-p":
        ratio = math.exp(x - max(float(others.max()), x))
        return f"its probability / the top one's {ratio:.6g} vs min_p = {processor.min_p:g}"
    if name == "epsilon":
        return f"its probability {p:.6g} vs epsilon = {processor.epsilon:g}"
    # the entropy as the warpers take it: -inf scores add nothing
    entropy = -float(torch.where(torch.isfinite(logp), logp.exp() * logp, 0.0).sum())
    if name == "eta":
        eps = float(processor.epsilon)
        eta = min(eps, math.sqrt(eps) * math.exp(-entropy))
        return (
            f"its probability {p:.6g} vs eta = {eta:.6g}, the least of epsilon = {eps:g} and "
            f"sqrt(epsilon) e^-entropy (entropy {entropy:.6g})"
        )
    if name == "typical-p":
        typicality = (-logp - entropy).abs()  # |surprisal - entropy|, the warper's sort key
        closer = float(logp.exp()[typicality < typicality[token]].sum())
        return (
            f"the mass of the tokens more typical than it (|surprisal - entropy| under its "
            f"{float(typicality[token]):.6g}) {closer:.6g} vs typical_p = {processor.mass:g}"
        )
    below = torch.cat([others[others <= x], s[token : token + 1]])
    mass = math.exp(float(torch.logsumexp(below, 0) - torch.logsumexp(s, 0)))
    return f"the mass at or below it {mass:.6g} vs 1 - top_p = {1 - processor.top_p:.6g}"
