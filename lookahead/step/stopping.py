"""Checking the stopping criteria after every appended token, cheaply where it is safe.

``generate`` builds a ``StoppingCriteriaList``; lookahead must check it after each token a
step appends (a step may accept many). For the lists ``generate`` builds by default, only
a length limit and EOS tokens, the same answer is computed from the length and the new
token in Python, without tensors; any other criterion runs the list as given.
"""

from __future__ import annotations

from collections.abc import Callable

from transformers.generation.stopping_criteria import (
    EosTokenCriteria,
    MaxLengthCriteria,
)

Check = Callable[[int, int], bool]


def fast_check(criteria) -> Check | None:
    """``(length, newest token) -> stop`` equivalent to ``criteria``, or None when the list
    holds anything besides ``MaxLengthCriteria`` and ``EosTokenCriteria``."""
    max_length, eos = None, set()
    for criterion in criteria:
        if type(criterion) is MaxLengthCriteria:
            max_length = criterion.max_length if max_length is None else min(max_length, criterion.max_length)
        elif type(criterion) is EosTokenCriteria:
            eos.update(int(t) for t in criterion.eos_token_id.reshape(-1).tolist())
        else:
            return None
    if max_length is None:
        return lambda length, token: token in eos
    return lambda length, token: length >= max_length or token in eos
