"""The edges of ``generate``'s support: how much rounding moves a token across top-k, top-p or min-p.

A sampled token is drawn from what the truncating warpers leave (``TopKLogitsWarper``,
``TopPLogitsWarper``, ``MinPLogitsWarper``, after temperature). Each keeps a top set of the
scores, so a token just outside it is one rounding step from being let in, and one just inside
from being cut. When a many-token forward rounds every logit a little differently from
``generate``'s one-token forward, such a token is in one decoding's support and out of the
other's, and the two samples part although neither decoder is wrong.

``crossing`` measures that rounding: the smallest shift ``d`` of every score (each by at most
``d``, in the direction that helps) under which transformers' own warpers put the token on
the other side. It is reported as ``2 d``, a gap in nats like the race gap of two tokens
(``lookahead.verify.race``): for top-k it is the token's logit gap to the k-th largest, for
min-p ``log(min_p * p_top / p_token)``, for top-p about ``log((1 - top_p) / mass at or below
the token)``, ties with the tokens around it taken into account. ``measure`` gives those
figures as the warper computes them, for the report.
"""

from __future__ import annotations

import math

import torch

NAMES = {"TopKLogitsWarper": "top-k", "TopPLogitsWarper": "top-p", "MinPLogitsWarper": "min-p"}
SEARCH_GAP = 64.0  # nats: a token farther than this from every edge counts as unreachable (inf)
SEARCH_STEPS = 40  # bisection steps: SEARCH_GAP / 2**40 ~ 6e-11 nats, far below any tolerance


def boundary_name(processor) -> str | None:
    """``"top-k"``, ``"top-p"`` or ``"min-p"`` for the warpers measured here, else ``None``."""
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
    """The gap (nats, ``2 d``) of the smallest rounding ``d`` that moves ``token`` across the
    support's edge: in (``inside=False``: it is outside now) or out (``inside=True``), and the
    index in ``processors`` of the one that decides it there (``-1`` if none does).

    ``scores``: ``[V]`` before ``processors``; ``input_ids``: ``[1, n]``. Every score moves by at
    most ``d`` the way that helps (``shifted``), which is the worst case for each of top-k,
    top-p and min-p and for any chain of them, because all three keep a top set of the scores.
    ``keep``: a token that must stay in when cutting (the one whose win is being explained); a
    cut that takes it too does not count. The gap is ``0.0`` when the token is on that side
    already, ``inf`` when no shift up to ``SEARCH_GAP`` gets it there (a hard mask such as a
    banned n-gram never moves).
    """
    base = scores.detach().double()

    def crossed(gap: float) -> tuple[bool, int]:
        out, removed = run_chain(input_ids, shifted(base, token, gap / 2, let_in=not inside), processors)
        ok = bool(torch.isfinite(out[token])) != inside
        ok = ok and (keep is None or bool(torch.isfinite(out[keep])))
        return ok, int(removed[token])

    # letting in: the processor that cut it as generate ran; cutting: the one that cuts it there
    cut_by = -1 if inside else int(run_chain(input_ids, base, processors)[1][token])
    if crossed(0.0)[0]:
        return 0.0, cut_by
    if not crossed(SEARCH_GAP)[0]:
        return math.inf, cut_by
    low, high = 0.0, SEARCH_GAP
    for _ in range(SEARCH_STEPS):
        mid = (low + high) / 2
        low, high = (low, mid) if crossed(mid)[0] else (mid, high)
    return high, crossed(high)[1] if inside else cut_by


def shifted(scores: torch.Tensor, token: int, d: float, let_in: bool) -> torch.Tensor:
    """``scores`` (``[V]``) with every entry moved by ``d`` the way that helps ``token`` into a
    top set (``let_in``) or out of it.

    Letting in: the token and every score below it go up by ``d``, the rest down (those within
    ``2 d`` above it then sort below it, and count in top-p's mass below it). Cutting: the
    token and every score more than ``2 d`` below it go down, the rest up (those within ``2 d``
    below it then sort above it).
    """
    s = scores[token]
    raised = scores < s if let_in else scores >= s - 2 * d
    raised[token] = let_in
    return torch.where(raised, scores + d, scores - d)


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
        raise ValueError(f"processor must be a TopK, TopP or MinP warper, got {type(processor).__name__}")
    s = scores.detach().double()
    x = float(s[token])
    others = torch.cat([s[:token], s[token + 1 :]])
    if name == "top-k":
        k = min(processor.top_k, others.numel())
        kth = float(others.topk(k).values[-1])
        return f"its score {x:.6g} vs the {k}th largest of the others {kth:.6g}"
    if name == "min-p":
        ratio = math.exp(x - max(float(others.max()), x))
        return f"its probability / the top one's {ratio:.6g} vs min_p = {processor.min_p:g}"
    below = torch.cat([others[others <= x], s[token : token + 1]])
    mass = math.exp(float(torch.logsumexp(below, 0) - torch.logsumexp(s, 0)))
    return f"the mass at or below it {mass:.6g} vs 1 - top_p = {1 - processor.top_p:.6g}"
