"""Hand-made cases for the verdict on a seeded sample that parts from ``generate``'s: the ids,
the replayed noise and the tolerance the race tests share (tests/unit/test_race*.py)."""

import torch
from transformers import LogitsProcessorList

from lookahead.checking import verdict as race

IDS = torch.tensor([[5, 6, 7]])
WIN = -30.0  # log q of a token the noise favours: once in the support it wins the race
INSIDE, EDGE, OUTSIDE = 1 - 1e-3, 1 + 1e-3, 10.0  # multiples of the tolerance


def noise(v: int, **favoured: float) -> torch.Tensor:
    """``log q`` (``[v]``): 0 (q = 1) except the tokens named ``t<id>``, set to their value."""
    out = torch.zeros(v, dtype=torch.float64)
    for name, value in favoured.items():
        out[int(name[1:])] = value
    return out


def judge(scores, processors, tokens, log_noise, dtype="bfloat16") -> race.Verdict:
    processors = None if processors is None else LogitsProcessorList(processors)
    return race.verdict(IDS, scores, processors, tokens, log_noise, dtype)


def tol(scores, dtype="bfloat16", temperature: float = 1.0) -> float:
    """The verdict's tolerance for these (raw) scores: scale = the largest processed |score|."""
    return race.tolerance(dtype, float((scores / temperature).abs().max()))
