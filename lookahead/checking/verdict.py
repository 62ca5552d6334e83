"""Where a seeded sample differs from ``model.generate``'s: a rounding flip, or a bug.

Under one seed, lookahead's sampled tokens are ``generate``'s (``lookahead.sampling.noise``), except
where rounding of a many-token forward moves a token across a near-tie: at the first differing
token, ``generate`` and lookahead both ran the race ``log p(x) - log q_x`` with the same ``q``
(block t of the seeded stream) over their own support (what top-k, top-p, min-p, typical-p,
epsilon and eta left), so each winner must be explained by rounding of the same scores. Two
ways can do that:

- a flip of the race: both tokens inside the support, their race values within rounding;
- a flip at a boundary: a token within rounding of the edge of the support (``checking.boundary``)
  crosses it, and with it across, the other decoding's token wins the race within rounding.

Anything wider is a bug. ``race_verdict`` recomputes that position the plain way (one forward
over the row's prompt and the common prefix, the processors, the replayed noise) and, like
``verdict`` from given scores, says which of the three it is, with the gap between the two
tokens' race values (``inf`` when one is outside the support), against a tolerance that
depends on the dtype the model ran in (``tolerance``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lookahead.checking import boundary

# fp32 logits of a many-token forward differ from a one-token forward's by ~1e-6 (REFERENCE.md);
# a race gap under 1e-4 (nats) is within that rounding, as the greedy benchmarks' logit ties are
TIE_GAP = 1e-4

# How far one logit of a many-token forward may sit from the one-token forward's, in rounding
# steps of the largest score (eps * max |score|). Measured on the embedded model (8 HumanEval
# prompts, 128 sampled tokens each, adaptive=False so that steps are many-token forwards;
# lookahead's step logits against generate's at the same positions): at most 14.8 steps in
# float32 (1.6e-5), 2.04 in float16, 1.54 in bfloat16 (0.125). Half-precision logits are stored
# in their dtype, so a shape change moves one by a step or two of its own, which the fp32
# accumulation below them hardly adds to. Every figure judged here (a race gap, a logit gap to
# an edge) is a difference of two such logits, so it moves by up to twice that: 2 x 16 steps
# covers float32 (and TIE_GAP, ~3x the worst measured gap there, stays its floor); 2 x 4 steps
# leaves float16 ~2x and bfloat16 ~2.6x over the worst measured, for models deeper than the
# 6-layer one measured. That is wide (about 0.9 nats at a top logit of 10 and temperature 0.7):
# in half precision a single flip within it cannot be told from a bug; only a count of flips
# and anything wider can.
ROUNDING_STEPS = {"float64": 16, "float32": 16, "bfloat16": 4, "float16": 4}
MAX_CUTS = 8  # beaten by more tokens than this, a token is not explained by cutting them


def warpers(temperature: float = 1.0, top_p: float = 1.0):
    """The processors ``generate`` builds for ``temperature`` and ``top_p`` (none at 1.0):
    the distribution a sampled token is drawn from."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    processors = LogitsProcessorList()
    if temperature != 1.0:
        processors.append(TemperatureLogitsWarper(temperature))
    if top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    return processors


def replay_noise(seed: int, step: int, rows: int, row: int, vocab: int, device="cpu") -> torch.Tensor:
    """Row ``row`` of block ``step`` of ``generate``'s noise after ``torch.manual_seed(seed)``,
    for a batch of ``rows`` (``[V]`` float32): the ``q`` its step ``step`` divided by."""
    generator = torch.Generator(device=device).manual_seed(seed)
    block = torch.empty((rows, vocab), dtype=torch.float32, device=device)
    for _ in range(step + 1):
        block.exponential_(generator=generator)
    return block[row]


def race(scores: torch.Tensor, seed: int, step: int, rows: int = 1, row: int = 0) -> torch.Tensor:
    """The race values ``log p(x) - log q_x`` (``[V]``) of processed ``scores`` (``[V]``) at the
    new token ``step`` of row ``row`` of a batch of ``rows`` under ``torch.manual_seed(seed)``:
    the token sampled there is their argmax."""
    logp = torch.log_softmax(scores.float(), dim=-1)
    return logp - replay_noise(seed, step, rows, row, logp.shape[-1], logp.device).log()


def gap(values: torch.Tensor, tokens: tuple[int, int]) -> float:
    """``|values[a] - values[b]|``; ``inf`` when either is outside the support (no rounding reaches it)."""
    a, b = (values[t] for t in tokens)
    if not (torch.isfinite(a) and torch.isfinite(b)):
        return float("inf")
    return float((a - b).abs())


def tolerance(dtype, scale: float = 1.0) -> float:
    """The widest gap (nats) that rounding of a forward in ``dtype`` (a ``torch.dtype`` or its
    name) moves, for scores of magnitude ``scale`` (the largest ``|score|``; under 1 counts as
    1): ``2 * ROUNDING_STEPS * eps * scale``, at least ``TIE_GAP``."""
    name = str(dtype).removeprefix("torch.")
    if name not in ROUNDING_STEPS:
        raise ValueError(f"dtype must be one of {sorted(ROUNDING_STEPS)}, got {dtype!r}")
    if not scale >= 0:
        raise ValueError(f"scale must be >= 0, got {scale!r}")
    eps = torch.finfo(getattr(torch, name)).eps
    return max(TIE_GAP, 2 * ROUNDING_STEPS[name] * eps * max(scale, 1.0))


def generate_processors(model, input_ids: torch.Tensor, **kwargs):
    """The ``LogitsProcessorList`` that ``model.generate(input_ids, **kwargs)`` builds (its
    processors and warpers, in its order), without decoding: the list a ``custom_generate``
    receives."""

    def processors(model, input_ids, logits_processor, *args, **kw):
        return logits_processor

    return model.generate(input_ids, custom_generate=processors, **kwargs)


@dataclass(frozen=True)
class Verdict:
    """What parted ``generate``'s token from lookahead's at one position.

    ``kind``: ``"race"`` (both inside the support, race values within rounding), ``"boundary"``
    (a token within rounding of an edge of the support crossed it) or ``"bug"``. ``race_gap``:
    the two tokens' race gap over ``generate``'s support, ``inf`` when one is outside (what
    ``gap`` returns). ``tolerance``: the widest gap rounding reaches here (nats).
    ``token``, ``edge``, ``edge_gap``: the token that crossed an edge (or that nothing explains),
    the edge (``boundary.NAMES``: ``"top-k"``, ..., ``"eta"``) and the rounding gap that moves it
    across (``inf``: none does); ``shortfall``: how far the explained token's race value falls short of
    the best one it had to beat, the edge crossed (negative: it wins outright; ``-inf``: no rival
    is left; ``inf``: it stays outside). ``reason``: one line.
    """

    kind: str
    race_gap: float
    tolerance: float
    reason: str
    token: int | None = None
    edge: str | None = None
    edge_gap: float | None = None
    shortfall: float | None = None

    @property
    def flip(self) -> bool:
        """A rounding flip (of the race or at a boundary), not a bug."""
        return self.kind != "bug"

    def as_dict(self) -> dict:
        """The JSON form (infinities as ``None``: strict JSON has none)."""
        finite = lambda x: x if x is None or math.isfinite(x) else None  # noqa: E731
        return {
            "kind": self.kind,
            "race_gap": finite(self.race_gap),
            "tolerance": self.tolerance,
            "token": self.token,
            "edge": self.edge,
            "edge_gap": finite(self.edge_gap),
            "shortfall": finite(self.shortfall),
            "reason": self.reason,
        }


def is_flip(judged: dict | None) -> bool:
    """:attr:`Verdict.flip` of a verdict in its JSON form (``Verdict.as_dict``); False for none."""
    return judged is not None and judged["kind"] != "bug"


@dataclass
class _Why:
    """How one token is explained as the race's winner: ``ok``, and the edge crossed on the way."""

    ok: bool
    shortfall: float
    token: int | None = None
    edge: int = -1  # index of the deciding processor
    edge_gap: float = 0.0
    beaten_by: int | None = None


def verdict(
    input_ids: torch.Tensor,
    scores: torch.Tensor,
    processors,
    tokens: tuple[int, int],
    log_noise: torch.Tensor,
    dtype="float32",
) -> Verdict:
    """Judge the first differing position from ``generate``'s view of it.

    Args:
        input_ids: the row's tokens before the position, ``[1, n]`` (what the processors see).
        scores: the model's logits there, ``[V]``, before any processor (rounding is judged on
            what the first truncating warper sees: after temperature and penalties).
        processors: the ``LogitsProcessorList`` generate ran (``generate_processors``,
            ``warpers``), or ``None``.
        tokens: ``(generate's token, lookahead's token)``.
        log_noise: ``log q``, ``[V]``: the replayed noise of that step (``replay_noise``).
        dtype: the dtype the model ran in, which fixes the tolerance (``tolerance``).

    Each token must be a possible winner: inside the support, or within the tolerance of its
    edge and let in; its race value within the tolerance of every rival that stays in (a rival
    within the tolerance of the edge may be cut instead, if the token stays in).
    """
    if len(tokens) != 2:
        raise ValueError(f"tokens must be (generate's, lookahead's), got {tokens!r}")
    if log_noise.shape != scores.shape:
        raise ValueError(f"log_noise must have the shape of scores {tuple(scores.shape)}, got {tuple(log_noise.shape)}")
    processors = list(processors or ())
    # rounding is judged on the scores the first truncating warper sees (after temperature and
    # penalties), the units of the race and of the tolerance's scale
    first = next((i for i, p in enumerate(processors) if boundary.boundary_name(p)), len(processors))
    scores, _ = boundary.run_chain(input_ids, scores, processors[:first])
    processors = processors[first:]
    final, _ = boundary.run_chain(input_ids, scores, processors)
    opened, _ = boundary.run_chain(input_ids, scores, [p for p in processors if boundary.boundary_name(p) is None])
    finite = torch.isfinite(opened)
    tol = tolerance(dtype, float(opened[finite].abs().max()) if finite.any() else 1.0)
    values = opened - log_noise.double()  # the race; log_softmax's constant cancels in every gap
    old = gap(torch.log_softmax(final, -1) - log_noise.double(), tokens)
    a, b = tokens
    context = (input_ids, scores, processors, torch.isfinite(final), values, tol)
    why_b, why_a = _explain(b, *context), _explain(a, *context)
    for who, why in (("lookahead's", why_b), ("generate's", why_a)):
        if not why.ok:
            return _bug(who, why, context, old)
    crossed = next((w for w in (why_b, why_a) if w.token is not None), None)
    if crossed is None:
        reason = f"a rounding flip of the race: the two tokens' race values are {old:.3g} apart"
        reason += f" (rounding reaches {tol:.3g})"
        return Verdict("race", old, tol, reason, shortfall=why_b.shortfall)
    edge = boundary.boundary_name(processors[crossed.edge]) if crossed.edge >= 0 else None
    winner = "lookahead's" if crossed is why_b else "generate's"
    side = "outside" if crossed.token == (b if crossed is why_b else a) else "inside"  # inside: a rival cut
    owner = {a: "generate's token", b: "lookahead's token"}.get(crossed.token, "token")
    by = f"by {-crossed.shortfall:.3g}" if crossed.shortfall <= 0 else f"within {crossed.shortfall:.3g}"
    by = "the only token left" if crossed.shortfall == -math.inf else by
    reason = (
        f"a rounding flip at the {edge} boundary: {owner} {crossed.token} was {side} the {edge} support "
        f"({_measure(context, crossed)}), {crossed.edge_gap:.3g} from its edge; across it the race picks "
        f"{winner} token ({by}); rounding reaches {tol:.3g}"
    )
    return Verdict("boundary", old, tol, reason, crossed.token, edge, crossed.edge_gap, crossed.shortfall)


def _explain(x, input_ids, scores, processors, inside, values, tol) -> _Why:
    """Whether ``x`` can win the race under rounding within ``tol`` (see ``verdict``)."""
    members = inside.clone()
    if inside[x]:
        gap_in, edge = 0.0, -1
    else:
        found = boundary.cross(input_ids, scores, processors, x, inside=False)
        gap_in, edge = found.gap, found.decider
        if gap_in > tol:
            return _Why(False, math.inf, x, edge, gap_in)
        # the tokens let in with x race it too: none for a top set (those above x are inside
        # already), but typical-p's and eta's edges move for others as well
        members |= torch.isfinite(boundary.run_chain(input_ids, found.scores, processors)[0])
    members[x] = False
    rivals = torch.where(members, values, -math.inf)
    beaters = [int(t) for t in torch.argsort(rivals, descending=True)[: MAX_CUTS + 1] if rivals[t] > values[x] + tol]
    cut = None
    if beaters and gap_in == 0.0 and len(beaters) <= MAX_CUTS:
        cut = _cut(x, beaters, input_ids, scores, processors, tol)
        if cut is not None:
            rivals[beaters] = -math.inf
    shortfall = float(rivals.max() - values[x])
    if shortfall > tol:
        return _Why(False, shortfall, x, edge, gap_in, beaten_by=int(rivals.argmax()))
    if cut is not None:
        return _Why(True, shortfall, cut[0], cut[1], cut[2])
    return _Why(True, shortfall, None if gap_in == 0.0 else x, edge, gap_in)


def _cut(x, beaters, input_ids, scores, processors, tol) -> tuple[int, int, float] | None:
    """``(token, processor index, gap)`` of one cut within ``tol`` that takes every token in
    ``beaters`` out of the support and keeps ``x`` in, or ``None``. The cut tried is that of the
    highest-scoring beater: in a top set it takes those below it along; elsewhere (typical-p) it
    must be seen to, at the shift that cuts it."""
    top = max(beaters, key=lambda t: float(scores[t]))
    found = boundary.cross(input_ids, scores, processors, top, inside=True, keep=x)
    if found.gap > tol:
        return None
    out, _ = boundary.run_chain(input_ids, found.scores, processors)
    if bool(torch.isfinite(out[beaters]).any()):
        return None
    return top, found.decider, found.gap


def _measure(context, why: _Why) -> str:
    """The deciding warper's own comparison for the token that crossed (``boundary.measure``)."""
    input_ids, scores, processors = context[:3]
    if why.edge < 0:
        return "masked before the sampling warpers, which no rounding moves"
    if boundary.boundary_name(processors[why.edge]) is None:
        return f"masked by {type(processors[why.edge]).__name__}, which no rounding moves"
    seen = boundary.warper_input(input_ids, scores, processors, why.edge, why.token)
    return boundary.measure(processors[why.edge], seen, why.token)


def _bug(who: str, why: _Why, context, old: float) -> Verdict:
    """The verdict for a token that no rounding explains."""
    processors, tol = context[2], context[-1]
    edge = boundary.boundary_name(processors[why.edge]) if why.edge >= 0 else None
    if why.shortfall == math.inf:
        where = f"{why.edge_gap:.3g} outside the {edge} support" if edge else "outside the support"
        reason = f"likely a bug: {who} token {why.token} lies {where} ({_measure(context, why)})"
    else:
        across = f", even let in across the {edge} edge ({why.edge_gap:.3g})" if why.edge_gap else ""
        reason = (
            f"likely a bug: {who} token {why.token}'s race value falls {why.shortfall:.3g} short of token "
            f"{why.beaten_by}'s{across}"
        )
    reason += f"; rounding reaches {tol:.3g}"
    return Verdict("bug", old, tol, reason, why.token, edge, why.edge_gap, why.shortfall)


@torch.inference_mode()
def race_verdict(
    model,
    prefix: torch.Tensor,
    tokens: tuple[int, int],
    seed: int,
    step: int,
    rows: int = 1,
    row: int = 0,
    processors=None,
    dtype=None,
) -> Verdict:
    """``verdict`` at the position after ``prefix`` for ``tokens = (generate's, lookahead's)``,
    recomputed the plain way (one forward over ``prefix``).

    Args:
        prefix: the row's real tokens (no padding) and the tokens both outputs share, ``[n]``.
        seed, step, rows, row: the seed both ran under, the new token's index, the batch size
            and the row's slot in it (what fixes its noise).
        processors: the processed distribution's ``LogitsProcessorList`` (temperature, top-p,
            ...), or ``None`` for the raw softmax.
        dtype: the model's (default: its parameters'), which fixes the tolerance.
    """
    ids = prefix[None].to(model.device)
    logits = model(input_ids=ids).logits[0, -1].float()
    dtype = dtype if dtype is not None else next(model.parameters()).dtype
    noise = replay_noise(seed, step, rows, row, logits.shape[-1], logits.device).log()
    return verdict(ids, logits, processors, tokens, noise, dtype)
