"""``generate``'s logits processors, applied to one row at less cost, bit for bit the same.

A rule processes one ``[1, V]`` row per emitted token, as ``generate`` does. Two costs there
have nothing to do with the scores:

- ``LogitsProcessorList.__call__`` reads every processor's signature on every call;
- ``TopPLogitsWarper`` sorts the whole row with ``torch.sort``, about 0.3 ms at V = 8192 on
  a CPU (more than the rest of the sampling step), though after ``TopKLogitsWarper``
  (``generate``'s default ``top_k`` is 50) all but k entries are ``-inf``, and though the
  top-p needs the sorted values only, not their ids.

:func:`chain` calls the processors one by one, as the list does when none takes extra
arguments, and runs the top-p on the same sorted values, made for less:

    the warper's sorted row   [v1 <= v2 <= ... <= vV]                   (torch.sort of V)
    a top-p after a top-k     [-inf ... -inf | f1 <= f2 <= ... <= fk]   (torch.topk, k + 1 of V)
    a top-p alone             [v1 <= v2 <= ... <= vV]                   (a radix sort of V)

The top-p's softmax, cumsum and threshold then run on a tensor identical to the warper's, so
the cumsum is the same bits and so is the number m of sorted entries it removes: the m
lowest, which are the entries below the (m+1)-th value. Entries tied with a top-k's k-th
value, which the top-k keeps too, are taken in. Where the bits cannot be promised (a tie
split by the top-p boundary, whose side depends on the order ``torch.sort`` leaves ties in,
a NaN or +inf, more than ``SMALL`` entries kept by a top-k) the warpers run as they are.
"""

from __future__ import annotations

import inspect
import math

import torch

from lookahead.sampling.sort_kernels import cut_values, sort_rows

SMALL = 1024  # the largest top-k handled here (past it the sort of the row costs little more)


def chain(processors):
    """A callable ``(input_ids, scores) -> scores`` giving what ``processors`` (a
    ``LogitsProcessorList`` or a list) give, or ``processors`` itself where one of them takes
    arguments beyond those two (the list then checks they are passed) or there are none."""
    if not processors or any(len(inspect.signature(p.__call__).parameters) > 2 for p in processors):
        return processors
    processors = list(processors)
    steps, i = [], 0
    while i < len(processors):
        pair = processors[i : i + 2]
        if [type(p).__name__ for p in pair] == ["TopKLogitsWarper", "TopPLogitsWarper"] and all(map(_neg_inf, pair)):
            steps.append(_TopKTopP(*pair))
            i += 2
        elif type(processors[i]).__name__ == "TopPLogitsWarper":
            steps.append(_TopP(processors[i]))
            i += 1
        else:
            steps.append(processors[i])
            i += 1
    return _Chain(steps)


class _Chain:
    def __init__(self, steps):
        self.steps = steps

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for step in self.steps:
            scores = step(input_ids, scores)
        return scores


class _TopKTopP:
    """A ``TopKLogitsWarper`` then a ``TopPLogitsWarper``, both filtering to ``-inf``."""

    def __init__(self, top_k, top_p):
        self.top_k, self.top_p = top_k, top_p

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = top_k_top_p(scores, self.top_k.top_k, self.top_p.top_p, self.top_p.min_tokens_to_keep)
        return out if out is not None else self.top_p(input_ids, self.top_k(input_ids, scores))


class _TopP:
    """A ``TopPLogitsWarper`` over the radix-sorted row (:func:`top_p`)."""

    def __init__(self, warper):
        self.warper = warper

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        w = self.warper
        out = top_p(scores, w.top_p, w.min_tokens_to_keep, w.filter_value)
        return out if out is not None else w(input_ids, scores)


def top_p(scores: torch.Tensor, top_p: float, min_tokens_to_keep: int, filter_value: float) -> torch.Tensor | None:
    """``TopPLogitsWarper(top_p, filter_value, min_tokens_to_keep)`` on float32 CPU rows
    ``[n, V]``, its softmax and cumsum run over the rows' values sorted by
    :func:`~lookahead.sampling.sort_kernels.sort_rows` instead of ``torch.sort``; None where
    this cannot promise the warper's bits: a row with a NaN, an infinite maximum (its
    softmax is NaN, and the cumsum no longer counts a prefix), or a boundary that splits a tie.

    Per row, the cumsum never falls, so the warper removes the ``m`` lowest sorted entries
    (``m`` counted after ``min_tokens_to_keep``); where the m-th value is below the
    (m+1)-th ``b``, those are exactly the entries below ``b``, whatever order the sort left
    equal values in."""
    if scores.dim() != 2 or scores.dtype != torch.float32 or scores.device.type != "cpu" or not scores.shape[1]:
        return None
    rows = scores.detach().contiguous()
    ascending = torch.empty_like(rows)
    if not sort_rows(rows.numpy(), ascending.numpy()):
        return None
    remove = ascending.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)  # the warper's own ops, on its values
    # a prefix of each row, since the cumsum never falls; min_tokens_to_keep caps it
    removed = remove.sum(dim=-1).clamp_(max=max(rows.shape[1] - min_tokens_to_keep, 0))
    cut = torch.empty(rows.shape[0], dtype=torch.float32)
    if not cut_values(ascending.numpy(), removed.numpy(), cut.numpy()):
        return None  # a tie the boundary splits: torch.sort's order of equal values decides
    return scores.masked_fill(scores < cut[:, None], filter_value)


def top_k_top_p(scores: torch.Tensor, top_k: int, top_p: float, min_tokens_to_keep: int) -> torch.Tensor | None:
    """``TopPLogitsWarper(top_p, min_tokens_to_keep)`` after ``TopKLogitsWarper`` (its
    ``top_k`` attribute) on a float32 row ``[1, V]``, from the row's top k alone (and the
    entries tied with the k-th, which the top-k keeps too); None where this cannot promise
    the warpers' bits: more rows, over ``SMALL`` entries kept, a NaN, or a tie the top-p
    boundary splits.

    The warpers sort the whole row: ``[-inf ... -inf | f1 <= ... <= fk]`` once the top-k has
    filtered it. The same tensor is built here from ``torch.topk``, and the top-p's softmax,
    cumsum and threshold run on it as written in the warper, so they give its bits.
    """
    if scores.dim() != 2 or scores.shape[0] != 1 or scores.dtype != torch.float32:
        return None
    size = scores.shape[1]
    k = min(top_k, size)
    if k > SMALL:
        return None
    # one more than k: a (k+1)-th value equal to the k-th is a tie the top-k keeps too
    values, index = torch.topk(scores[0], min(k + 1, size))  # descending; a NaN would rank first
    top = values.tolist()
    if math.isnan(top[0]):
        return None
    if len(top) > k and top[k] == top[k - 1]:  # (common in bfloat16) the top-k keeps every tie
        k = int((scores >= top[k - 1]).sum())
        if k > SMALL:
            return None
        values, index = torch.topk(scores[0], k)
        top = values.tolist()
    ascending = values[:k].flip(0)  # as the warper's sort leaves them
    sorted_row = torch.full_like(scores, -math.inf)
    sorted_row[0, size - k :] = ascending
    remove = sorted_row.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
    remove[..., -min_tokens_to_keep:] = 0
    # the cumsum never falls, so the removed entries are the lowest ``cut`` of the k
    cut = int(remove[0, size - k :].sum())
    if 0 < cut < k and top[k - cut] == top[k - cut - 1]:
        return None  # a tie the boundary splits: the warper's sort order of ties decides
    return torch.full_like(scores, -math.inf).index_copy_(1, index[: k - cut], values[None, : k - cut])


def temperature(processors) -> float:
    """The temperature ``processors`` divide the scores by (1 without a temperature warper)."""
    t = 1.0
    for p in processors or ():
        if type(p).__name__ == "TemperatureLogitsWarper":
            t *= p.temperature
    return t


def _neg_inf(processor) -> bool:
    return getattr(processor, "filter_value", None) == -math.inf
