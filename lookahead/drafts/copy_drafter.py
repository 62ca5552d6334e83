"""The copy guess as a scored draft: what followed the text's end where it occurred before
(in this request, in earlier requests, in a corpus), a tree with a probability per node.

Each scope proposes its best tree (``suffix_kernels``); the one that expects the most
tokens wins. How much of it a step feeds is the budget's choice (``budget.DraftBudget``),
which calibrates the count-based probabilities by what such nodes did in this decoding.
"""

from __future__ import annotations

import numpy as np

from lookahead.drafts import suffix_kernels
from lookahead.drafts.suffix import SuffixIndex

# occurrences a draft is grown from (the newest of the text's own): a bound on a frequent
# match's work per step; 16 to 128 drafted alike on HumanEval (docs/benchmarks.md, constants)
MAX_OCCURRENCES = 64
# how deep a match of m tokens may draft, m * SPEC_FACTOR + SPEC_OFFSET: deeper than
# SuffixDecoding's m, for the budget cuts what does not pay (docs/benchmarks.md, constants)
SPEC_FACTOR, SPEC_OFFSET = 2.0, 2.0


class CopyDrafter:
    """Proposes one step's copy guess: the best scope's tree (a scored source,
    ``drafts.source``).

    Args:
        max_nodes: the most nodes of a draft tree (``LookaheadConfig.copy_length``).
        max_match: the longest suffix of the text matched (``LookaheadConfig.copy_match``).
        min_prob: nodes whose share of the occurrences is below this are not drafted.
        history: earlier requests' indexes (a callable returning ``SuffixIndex`` objects:
            the pool's, rebuilt as it remembers texts); ``corpus``: a static one.
    """

    name = "copy"
    scored = True  # its nodes carry their own probabilities (the budget calibrates them)
    bins = ()
    top_k = 0
    reads_noise = False

    def __init__(
        self, max_nodes: int, max_match: int, min_prob: float, history=None, corpus: SuffixIndex | None = None
    ):
        self.max_nodes, self.max_match, self.min_prob = max_nodes, max_match, min_prob
        self.history = history
        self.corpus = corpus
        self._out = [np.empty(max_nodes, dtype=np.int64), np.empty(max_nodes, dtype=np.int64), np.empty(max_nodes)]
        self._best = [a.copy() for a in self._out]
        self.scope = None  # where the last draft came from: "text", "history" or "corpus"

    def _indexes(self):
        history = self.history() if self.history is not None else ()
        return [("history", index) for index in history] + [("corpus", self.corpus)]

    def tree(self, text: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The best scope's tree for the text so far (int64 ``[n]``): ``(tokens, parents,
        probs)`` of its nodes, best first (see ``suffix_kernels.grow_tree``; views valid
        until the next call), and the match length it grew from (the text's last tokens that
        precede each occurrence)."""
        text = text.astype(np.int32, copy=False)  # the indexes' dtype: one compiled kernel serves every scope
        args = (MAX_OCCURRENCES, self.max_nodes, self.max_nodes, SPEC_FACTOR, SPEC_OFFSET, self.min_prob)
        count, expected, match = suffix_kernels.text_draft(text, 1, self.max_match, *args, *self._best)
        self.scope = "text" if count else None
        for name, index in self._indexes():
            if index is None or not len(index):
                continue
            n, e, m = suffix_kernels.index_draft(index.text, index.sa, text, 1, self.max_match, *args, *self._out)
            if e > expected:
                count, expected, match, self.scope = n, e, m, name
                for best, out in zip(self._best, self._out):
                    best[:n] = out[:n]
        return (*(a[:count] for a in self._best), match)

    def propose(self, context) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The copy guess as a source: its scored :meth:`tree` of the text so far."""
        return self.tree(context.text)

    def learn(self, outcome) -> None:
        """Nothing: the text it matches is the step's own; the budget learns its chances."""

    def rows(self, text: np.ndarray) -> np.ndarray:
        """The whole tree as rows (int64 ``[rows, depth]``, -1 padded; ``[0, 0]`` for none)."""
        tokens, parents, _, _ = self.tree(text)
        n = tokens.shape[0]
        return suffix_kernels.tree_rows(tokens, parents, n, np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64))
