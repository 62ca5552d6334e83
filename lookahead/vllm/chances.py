"""Learnt acceptance: how likely each drafted token is to hold, and how many to draft.

A chain node's chance of holding once its parent held is its bin's rate times its request's
ratio:

- bins: the node's share (its occurrences' vote, ``SHARE_BINS`` bins) within its context
  (the tokens of text its occurrences agree with, ``match + depth - 1``, in the groups
  ``CONTEXT_ENDS`` close), learnt over every request of the engine. A bin starts at
  ``PRIOR_WEIGHT`` observations of ``CONTEXT_RATES[group] x share``: one token of agreement
  is weak evidence, eight nearly proof.
- the request's ratio: what its scored nodes held over what their bins promised, per context
  group, from ``PRIOR_WEIGHT`` tokens that held as promised. A request whose drafts keep failing (free
  text, sampling at a high temperature) drives it down until it drafts nothing; the nodes it
  then withholds are still scored against the tokens that come (see ``requests.Pending``), so
  it drafts again once its text turns predictable.

How many tokens to draft is decided for the whole step at once (:func:`choose_lengths`): a
step over T tokens costs ``1 + token_cost x T`` (vLLM's fixed work per step, then each token's
share), and the step drafts the nodes of highest path chance, as many as maximise the
expected tokens per cost; a node no better than that rate is not drafted.
"""

from __future__ import annotations

import numpy as np

SHARE_BINS = 10
CONTEXT_ENDS = (1, 3, 7)  # groups of context length: 1, 2-3, 4-7, 8 and more
CONTEXT_RATES = (0.5, 0.7, 0.85, 0.95)  # a node's prior chance per unit of share, by group
GROUPS = len(CONTEXT_RATES)
BINS = SHARE_BINS * GROUPS
PRIOR_WEIGHT = 2.0
MAX_WEIGHT = 512.0  # a bin halves its counts past this: the engine's workload may change
TOP_CHANCE = 0.99  # no guess is certain


def node_bins(shares: np.ndarray, match: int) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``[d]`` bins and float ``[d]`` prior rates of a chain's nodes (``shares`` ``[d]``,
    the chain's first node agreeing with ``match`` tokens of text)."""
    depth = np.arange(1, shares.shape[0] + 1)
    group = np.searchsorted(np.array(CONTEXT_ENDS), match + depth - 1, side="left")
    share_bin = np.minimum((shares * SHARE_BINS).astype(np.int64), SHARE_BINS - 1)
    rates = np.array(CONTEXT_RATES)[group] * shares
    return group * SHARE_BINS + share_bin, rates


class Acceptance:
    """The bins' counts, learnt over every request (one per engine)."""

    def __init__(self):
        self.fed = np.zeros(BINS)
        self.held = np.zeros(BINS)

    def chances(self, bins: np.ndarray, rates: np.ndarray, ratio: float) -> np.ndarray:
        """float ``[d]``: each node's chance of holding once its parent held (nodes of ``bins``
        and prior ``rates``, ``[d]`` each, in a request of ``ratio``)."""
        rate = (self.held[bins] + PRIOR_WEIGHT * rates) / (self.fed[bins] + PRIOR_WEIGHT)
        return np.minimum(rate * ratio, TOP_CHANCE)

    def learn(self, bins: np.ndarray, held: int, fed: int) -> None:
        """The chain's first ``fed`` nodes were scored, its first ``held`` held (``held <= fed``;
        the node at ``held``, when scored, failed)."""
        for depth in range(fed):
            b = bins[depth]
            self.fed[b] += 1.0
            self.held[b] += 1.0 if depth < held else 0.0
            if self.fed[b] > MAX_WEIGHT:
                self.fed[b] *= 0.5
                self.held[b] *= 0.5


def request_ratios(held: np.ndarray, promised: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """float ``[d]``: the request's ratio for nodes of ``bins``, in their context groups: what
    its scored nodes of the group held (``held[group]``) over what their bins promised
    (``promised[group]``), from ``PRIOR_WEIGHT`` tokens that held as promised. Per group, for
    a request's long matches may hold where its one-token ones fail."""
    group = bins // SHARE_BINS
    return (held[group] + PRIOR_WEIGHT) / (promised[group] + PRIOR_WEIGHT)


def learn_ratios(held: np.ndarray, promised: np.ndarray, bins: np.ndarray, chances: np.ndarray, n_held: int, fed: int):
    """Count a scored chain in the request's ``held`` and ``promised`` (``[GROUPS]`` each): its
    first ``fed`` nodes (of ``bins``, promised ``chances``) were scored, the first ``n_held`` held."""
    np.add.at(held, bins[:n_held] // SHARE_BINS, 1.0)
    np.add.at(promised, bins[:fed] // SHARE_BINS, chances[:fed])


def choose_lengths(paths: list[np.ndarray], rows: int, token_cost: float) -> list[int]:
    """How many tokens each chain drafts this step.

    Args:
        paths: per chain, float ``[d]`` path chances (the chances multiplied along it, never
            increasing).
        rows: the requests in the step (each feeds its sampled token whatever it drafts).
        token_cost: one token's cost over the step's fixed cost.

    Returns: per chain, the length of its drafted prefix. The drafted nodes are the n of highest
    path chance (a parent before its child) for the n that maximises
    ``(rows + their chances summed) / (1 + token_cost x (rows + n))``, none where no n beats
    drafting nothing.
    """
    nodes = [(-float(p), depth, c) for c, path in enumerate(paths) for depth, p in enumerate(path)]
    nodes.sort()
    best, best_n, total = rows / (1.0 + token_cost * rows), 0, float(rows)
    for n, (minus_p, _, _) in enumerate(nodes, start=1):
        total -= minus_p
        value = total / (1.0 + token_cost * (rows + n))
        if value > best:
            best, best_n = value, n
    lengths = [0] * len(paths)
    for _, _, c in nodes[:best_n]:
        lengths[c] += 1
    return lengths
