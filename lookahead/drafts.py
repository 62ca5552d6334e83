"""The copy guess as a scored draft: what followed the text's end where it occurred before
(in this request, in earlier requests, in a corpus), a tree with a probability per node,
fed as far as it pays.

Each scope proposes its best tree (``suffix_kernels``); the one that expects the most
tokens wins. Its nodes' count-based probabilities are calibrated by what such nodes did in
this decoding (:class:`Calibration`), and the draft is cut to the prefix that maximises
expected tokens per unit of the calibrated forward cost, against plain decoding's 1.
"""

from __future__ import annotations

import numpy as np

from lookahead import suffix_kernels
from lookahead.costmodel import CostCurve
from lookahead.suffix import SuffixIndex

# occurrences a draft is grown from (the newest of the text's own), and how deep it may grow
# for a match of m tokens: m * SPEC_FACTOR + SPEC_OFFSET
MAX_OCCURRENCES = 64
SPEC_FACTOR, SPEC_OFFSET = 2.0, 2.0


class Calibration:
    """How often a drafted node held when its parent did, by its share of the parent's
    occurrences (``count(node) / count(parent)``, in ``buckets`` bins).

    A bin starts at ``prior`` observations of ``PRIOR_SCALE x share``: counts from a handful
    of occurrences promise more than the model keeps.
    """

    PRIOR_SCALE = 0.8

    def __init__(self, buckets: int = 10, prior: float = 2.0):
        self.buckets = buckets
        self.prior = prior
        self.fed = np.zeros(buckets)
        self.held = np.zeros(buckets)

    def _bins(self, shares: np.ndarray) -> np.ndarray:
        return np.minimum((shares * self.buckets).astype(np.int64), self.buckets - 1)

    def rates(self, shares: np.ndarray) -> np.ndarray:
        """P(node holds | parent holds) for each share in ``shares`` (float ``[n]``): the path
        rates of nodes that are all children of the root."""
        shares = np.asarray(shares, dtype=np.float64)
        return self.path_rates(np.full(shares.shape[0], -1, dtype=np.int64), shares)

    def record(self, shares: np.ndarray, fed: np.ndarray, held: np.ndarray) -> None:
        """Nodes with ``shares`` whose parents held (``fed``, bool) and which held (``held``)."""
        b = self._bins(shares[fed])
        self.fed += np.bincount(b, minlength=self.buckets)
        self.held += np.bincount(b, weights=held[fed].astype(np.float64), minlength=self.buckets)

    def path_rates(self, parents: np.ndarray, probs: np.ndarray) -> np.ndarray:
        """Each draft node's chance that its whole path holds (parents before children)."""
        out = np.empty(parents.shape[0])
        suffix_kernels.path_rates(
            parents, probs, parents.shape[0], self.fed, self.held, self.prior, self.PRIOR_SCALE, out
        )
        return out


def best_prefix(rates: np.ndarray, costs: np.ndarray, overhead: float) -> int:
    """How many of the draft's first nodes to feed: the n >= 1 maximising
    ``(1 + sum(rates[:n])) / (costs[n] + overhead)`` when that beats plain decoding's 1, else 0.
    ``rates``: each node's probability of holding, parents before children; ``costs[k - 1]``:
    a forward over k tokens (``costs[n]`` prices the root and n nodes)."""
    n = rates.shape[0]
    if not n:
        return 0
    value = (1.0 + np.cumsum(rates)) / (costs[1 : n + 1] + overhead)
    best = int(np.argmax(value))
    return best + 1 if value[best] > 1.0 else 0


class CopyDrafter:
    """Proposes one step's copy guess and learns from what the step accepted.

    Args:
        max_nodes: the most draft nodes fed in one step (``LookaheadConfig.copy_length``).
        max_match: the longest suffix of the text matched (``LookaheadConfig.copy_match``).
        min_prob: nodes whose share of the occurrences is below this are not drafted.
        costs, overhead: the forward's cost curve and the decoder's own work per guessing
            step (in one-token forwards), which the draft's length is weighed against;
            ``costs=None`` feeds every node drafted (a fixed step shape).
        history: earlier requests' indexes (a callable returning ``SuffixIndex`` objects:
            the pool's, rebuilt as it remembers texts); ``corpus``: a static one.
    """

    def __init__(
        self,
        max_nodes: int,
        max_match: int,
        min_prob: float,
        costs: CostCurve | None = None,
        overhead: float = 0.0,
        history=None,
        corpus: SuffixIndex | None = None,
    ):
        self.max_nodes, self.max_match, self.min_prob = max_nodes, max_match, min_prob
        # what a forward over 1 .. max_nodes + 1 tokens costs, looked up every step
        self.costs = None if costs is None else np.array([costs(k) for k in range(1, max_nodes + 2)])
        self.overhead = overhead
        self.history = history
        self.corpus = corpus
        self.calibration = Calibration()
        self._out = [np.empty(max_nodes, dtype=np.int64), np.empty(max_nodes, dtype=np.int64), np.empty(max_nodes)]
        self._best = [a.copy() for a in self._out]
        self._fed = 0
        self.scope = None  # where the last draft came from: "text", "history" or "corpus"

    def _indexes(self):
        history = self.history() if self.history is not None else ()
        return [("history", index) for index in history] + [("corpus", self.corpus)]

    def _search(self, text: np.ndarray) -> int:
        """The best scope's tree in ``self._best``; returns its node count."""
        args = (MAX_OCCURRENCES, self.max_nodes, self.max_nodes, SPEC_FACTOR, SPEC_OFFSET, self.min_prob)
        count, expected, _ = suffix_kernels.text_draft(text, 1, self.max_match, *args, *self._best)
        self.scope = "text" if count else None
        for name, index in self._indexes():
            if index is None or not len(index):
                continue
            n, e, _ = suffix_kernels.index_draft(index.text, index.sa, text, 1, self.max_match, *args, *self._out)
            if e > expected:
                count, expected, self.scope = n, e, name
                for best, out in zip(self._best, self._out):
                    best[:n] = out[:n]
        return count

    def propose(self, text: np.ndarray) -> np.ndarray:
        """The draft's rows (int64 ``[rows, depth]``, -1 padded; ``[0, 0]`` for none) for the
        text so far (int64 ``[n]``)."""
        count = self._search(text)
        tokens, parents, probs = (a[:count] for a in self._best)
        if self.costs is None:
            self._fed = count
        else:
            self._fed = best_prefix(self.calibration.path_rates(parents, probs), self.costs, self.overhead)
        depths = np.empty(self._fed, dtype=np.int64)
        return suffix_kernels.tree_rows(tokens, parents, self._fed, depths)

    @staticmethod
    def _shares(parents: np.ndarray, probs: np.ndarray) -> np.ndarray:
        above = np.where(parents >= 0, probs[np.maximum(parents, 0)], 1.0)
        return probs / above

    def learn(self, appended: list[int]) -> None:
        """Credit the last draft's nodes with what the step appended (its tokens, in order)."""
        n = self._fed
        if not n:
            return
        tokens, parents, probs = (a[:n] for a in self._best)
        held = np.zeros(n, dtype=np.bool_)
        suffix_kernels.held_nodes(tokens, parents, n, np.asarray(appended, dtype=np.int64), held)
        fed = np.where(parents >= 0, held[np.maximum(parents, 0)], True)
        self.calibration.record(self._shares(parents, probs), fed, held)
        self._fed = 0
