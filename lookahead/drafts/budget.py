"""One budget over every guess source: a step feeds the candidate nodes most likely to hold,
as many as pay for their forward.

Sources propose candidates (``drafts.source``):

- scored trees (the copy guess, ``drafts.CopyDrafter``): each node's share of its parent's
  occurrences;
- rows of tokens: the n-gram pool's (its context pair's rows, then its key's), the recycled
  successors' and the Jacobi window's.

Each candidate gets a chance of holding when its parent holds, learned online in bins. A
scored node's bin is its share (ten bins) within its context: the tokens of the text its
occurrences match once its parents hold (the step's match length plus its depth less one,
in groups ending at ``CONTEXTS``), for a copy holds more the longer the text it agrees
with; every scored source learns in a block of such bins of its own. A row node's bin is its
source's at its depth. A bin starts at ``prior`` observations of its prior rate: a row
source's own rates for its first token and for the later ones; a scored bin's
``CONTEXT_PRIORS[group] x share``, times one ratio per scored source of what its nodes held
to what those rates promised (so that where nothing holds every bin learns it at once).
Under sampling every prior rate is scaled by the rule's ceiling (``verify.rules.Rule``):
where the model's choices are nearly flat, a guess holds far less often than greedy text
promised. A row merges into the tree where it agrees with it: the shared node keeps its bin
and learns into the row source's *shared* bin too, which knows what the source's nodes held
where another source proposed them as well; the node takes that bin's chance where better
(agreement is evidence), while the source's own bins know what its nodes alone hold (a source
whose rows always agree with another's, as the pool's pair rows do with copies of a text
that repeats at random, learns that in its shared bins instead of lending them its prior
forever). Every candidate is scored against the
tokens the step appended, fed or not (they are the model's own whatever was fed). The step
feeds the nodes of highest path chance (the chances multiplied along the path; on a tie the
earlier node, so a parent before its child), as many as maximise
``(1 + their chances summed) / (cost(1 + n) + overhead)``, when that beats plain decoding's
1; else none. A step that feeds any node also buys the next one a guess from the Jacobi
window (the free iteration after its first miss: the ``free`` bin's rows, ``drafts.jacobi``),
worth what that guess gains the next step fed alone (``DraftBudget.window_worth``) where this
step misses: without it, where two tokens cost about what one does (bf16 on an AVX-512 CPU)
and every source is weak (sampling at T=1), a step feeds its root alone, the next step has no
window guess either, and so on.

Worked example (costs 1, 1.3, 1.35, 1.4 for forwards of 1-4 tokens, no overhead)::

    copy tree   a (0.9) -> b (0.8)        path chances: a 0.9, b 0.72
    pool row    a c                       c: the depth-2 pool bin's 0.5, path 0.45
    by chance   a 0.9, b 0.72, c 0.45
    value       n=1: 1.9/1.3 = 1.46   n=2: 2.62/1.35 = 1.94   n=3: 3.07/1.4 = 2.19
    feed        a, b, c (a tree: every prefix by chance is one, parents come first)

The kernels (``budget_kernels.py``) are pure functions over numpy arrays; :class:`DraftBudget`
holds the bins.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lookahead.drafts.budget_kernels import (
    COPY_BINS,
    add_tree,
    chances_of,
    choose,
    compact,
    merge_rows,
    off_the_chain,
    record,
)
from lookahead.drafts.source import Bin
from lookahead.drafts.suffix_kernels import tree_rows

# a scored source's ratio starts as if this many tokens had held as promised: a few misses
# move it, a single one does not halve it (docs/benchmarks.md, "The constants and what set them")
RATIO_PRIOR = 4.0
# the most observations a bin carries into a later request (``DraftBudget.carry``): enough to
# start from what held before, few enough that a request unlike the last ones relearns soon
KEPT_WEIGHT = 32.0
# observations each bin starts with: two, so that one miss halves a prior but no more
PRIOR_WEIGHT = 2.0
_NO_ROWS = np.zeros((0, 0), dtype=np.int64)


class DraftBudget:
    """Chooses one step's draft nodes from every source and learns what held.

    Args:
        max_nodes: the most nodes one step feeds (``LookaheadConfig.draft_nodes``).
        costs, overhead: the forward's cost curve and the decoder's own work per guessing
            step, in one-token forwards.
        row_sources: one :class:`~lookahead.drafts.source.Bin` per array of rows the sources
            propose, in order (a name may repeat: the pool's context-pair rows and key rows
            learn apart); at most one is ``free`` (the window's).
        depth: the longest row.
        scored: the names of the scored sources, in the order :meth:`plan` takes their trees.
        prior: observations each bin starts with.
        chain: feed a prefix of the likeliest chain only (a draft verified as one chain, as
            vLLM verifies; ``off_the_chain``), not a tree.
    """

    def __init__(
        self,
        max_nodes: int,
        costs: Callable[[int], float],
        overhead: float,
        row_sources: tuple,
        depth: int,
        scored: tuple[str, ...] = ("copy",),
        prior: float = PRIOR_WEIGHT,
        chain: bool = False,
    ):
        self.costs = np.array([costs(k) for k in range(1, max_nodes + 2)])
        self.overhead = overhead
        self.row_sources = tuple(Bin(*b) for b in row_sources)
        self.scored = tuple(scored)
        self.depth = depth
        self.prior = prior
        self.chain = chain
        self.prior_scale = 1.0
        # bins: each scored source's block, then each row source's depths for the nodes it
        # proposed first, then the same for its nodes another source proposed too (shared)
        first_row = COPY_BINS * len(self.scored)
        self._shared = len(self.row_sources) * depth
        self.fed, self.held = np.zeros(first_row + 2 * self._shared), np.zeros(first_row + 2 * self._shared)
        self.promised = np.zeros(len(self.scored))  # the prior rates of each scored source's nodes counted as fed
        rates = [np.array([b.first] + [b.later] * (depth - 1)) for b in self.row_sources]
        self.prior_rates = np.concatenate([np.zeros(first_row), *rates, *rates])
        names = tuple(b.name for b in self.row_sources for _ in range(depth))
        self._names = tuple(n for n in self.scored for _ in range(COPY_BINS)) + names + names
        # the window's first guessed token, scored at every step that had one, fed or not:
        # what a fed node buys the next step (see ``choose``), from ``prior`` observations of
        # the window row's prior rate; no ceiling scales it, for a few misses in a row at a
        # flat stretch must not end the window's guesses (then it would never be scored again)
        free = [i for i, b in enumerate(self.row_sources) if b.free]
        self._free = free[0] if free else -1
        self._window_prior = self.row_sources[self._free].first if free else 0.0
        self.window_seen, self.window_held = np.zeros(1), np.zeros(1)
        self._window_firsts: list[int] = []  # the first tokens of this step's window rows
        self._n = self._count = 0
        self._arrays = None
        self._where = np.empty(max_nodes, dtype=np.int64)
        self._chances = np.empty(self.fed.shape[0])
        self._update()

    @property
    def key(self) -> tuple:
        """What a budget learnt is carried only to one with the same bins (a literal tuple: a
        pool file stores it, ``drafts.learnt``)."""
        return (tuple(tuple(b[:3]) for b in self.row_sources), self.depth, self.costs.shape[0] - 1)

    def carry(self, store: dict, key) -> None:
        """Start from what a budget with the same bins learnt in an earlier request, kept in
        ``store[key]`` (a kept state's), each bin's counts scaled down to at most
        ``KEPT_WEIGHT`` observations; and keep this budget there for the next request."""
        old = store.get(key)
        if old is not None and old.fed.shape == self.fed.shape and old.promised.shape == self.promised.shape:
            scale = np.minimum(1.0, KEPT_WEIGHT / np.maximum(old.fed, 1.0))
            self.fed[:], self.held[:] = old.fed * scale, old.held * scale
            for s in range(self.promised.shape[0]):
                block = slice(s * COPY_BINS, (s + 1) * COPY_BINS)
                copies = old.held[block].sum()
                # a ratio's two sides shrink alike, so it carries over as it was
                shrink = (
                    self.held[block].sum() / copies if copies else min(1.0, KEPT_WEIGHT / max(old.promised[s], 1.0))
                )
                self.promised[s] = old.promised[s] * shrink
            keep = min(1.0, KEPT_WEIGHT / max(old.window_seen[0], 1.0))
            self.window_seen[:], self.window_held[:] = old.window_seen * keep, old.window_held * keep
            self._update()
        store[key] = self

    def _update(self) -> None:
        """Each row bin's chance, from its counts and its prior."""
        chances_of(self.fed, self.held, self.prior, self.prior_rates, self.prior_scale, self._chances)

    def ratio(self, scored: int = 0) -> float:
        """What a scored source's nodes held over what their prior rates promised, from
        ``RATIO_PRIOR`` tokens that held as promised."""
        block = self.held[scored * COPY_BINS : (scored + 1) * COPY_BINS]
        return (block.sum() + RATIO_PRIOR) / (self.promised[scored] + RATIO_PRIOR)

    @property
    def copy_ratio(self) -> float:
        """The first scored source's :meth:`ratio` (the copy guess's)."""
        return self.ratio(0)

    def scale_priors(self, scale: float) -> None:
        """Scale every bin's prior rate by ``scale`` (in [0, 1]): the rule's ceiling, the chance
        that a guess of the likeliest token holds (1 under greedy; ``verify.rules.Rule``).
        Counts already learnt stand as they are."""
        if scale != self.prior_scale:
            self.prior_scale = scale
            self._update()

    def _room(self, cap: int):
        """Candidates (tokens, parents, bins, rates, chance, keep, also) and the fed nodes
        (tokens, parents, bins, rates, depths, leaves), each array of at least ``cap``."""
        if self._arrays is None or self._arrays[0][0].shape[0] < cap:

            def ints():
                return np.empty(cap, dtype=np.int64)

            candidates = (ints(), ints(), ints(), np.empty(cap), np.empty(cap), np.empty(cap, dtype=np.bool_), ints())
            self._arrays = (candidates, (ints(), ints(), ints(), np.empty(cap), ints(), ints()))
        return self._arrays

    def plan(self, trees, rows: list[tuple[int, np.ndarray]], fill: int = 0) -> tuple[np.ndarray, tuple[str, ...]]:
        """The step's draft as root-to-leaf rows (int64 ``[leaves, depth]``, -1 padded; ``[0, 0]``
        for none) and the source of each row.

        Args:
            trees: per scored source, in order, its tree ``(tokens, parents, probs, match)``
                (see ``drafts.CopyDrafter.tree``) or None.
            rows: ``(row bin index, int64 [r, d] rows)`` per array a source found.
            fill: feed at least this many nodes where there are as many (see :meth:`refill`).
        """
        size = sum(t[0].shape[0] for t in trees if t is not None) + sum(r.size for _, r in rows)
        (tokens, parents, bins, rates, cond, _, also), _ = self._room(size)
        count = 0
        for s, tree in enumerate(trees):
            if tree is not None and tree[0].shape[0]:
                t, p, probs, match = tree
                if self._where.shape[0] < t.shape[0]:
                    self._where = np.empty(t.shape[0], dtype=np.int64)
                ratio = self.ratio(s) * self.prior_scale
                learnt = (self.fed, self.held, self.prior, ratio)
                out = (tokens, parents, cond, bins, rates, also, self._where)
                count = add_tree(t, p, probs, t.shape[0], match, s * COPY_BINS, *learnt, count, *out)
        self._window_firsts = []
        first_row = COPY_BINS * len(self.scored)
        for source, part in rows:
            if source == self._free:
                self._window_firsts = part[:, 0].tolist()
            first = first_row + source * self.depth
            count = merge_rows(
                part, first, self._shared, self._chances, count, tokens, parents, cond, bins, rates, also
            )
        if self.chain:
            off_the_chain(parents, cond, count)
        self._count = count
        return self.refill(fill)

    def refill(self, fill: int) -> tuple[np.ndarray, tuple[str, ...]]:
        """The last plan's draft chosen again, at least ``fill`` nodes where its candidates
        have as many: a batch row whose step is padded to a wider row's feeds them for free."""
        (tokens, parents, bins, rates, cond, keep, _), fed = self._room(0)
        count = self._count
        n = choose(parents, cond, count, self.costs, self.overhead, fill, self.window_worth, keep) if count else 0
        self._n = n = compact(keep, count, tokens, parents, bins, rates, *fed[:4]) if n else 0
        if not n:
            return _NO_ROWS, ()
        out_t, out_p, out_b, _, depths, leaves = (a[:n] for a in fed)
        rows = tree_rows(out_t, out_p, n, depths, leaves)
        return rows, tuple(self._names[b] for b in out_b[leaves[: rows.shape[0]]].tolist())

    @property
    def window_value(self) -> float:
        """The chance the window's first guessed token holds, as scored (0 without a window)."""
        prior = self.prior * self._window_prior
        return float((self.window_held[0] + prior) / (self.window_seen[0] + self.prior)) if prior else 0.0

    @property
    def window_worth(self) -> float:
        """What the window's guess is worth to the next step, at least: what it gains there fed
        alone, its chance less a second token's price (none where a second token is dear: fp32
        on a CPU, where it pays only beside guesses that pay by themselves)."""
        return max(self.window_value - (self.costs[1] + self.overhead - 1.0), 0.0)

    def score_window(self, held: bool) -> None:
        """Score the window's first guessed token at a step that had one: ``held`` or not."""
        self.window_seen[0] += 1.0
        self.window_held[0] += float(held)

    def learn(self, appended) -> None:
        """Score the last plan's candidates, fed or not, in their bins against what the step
        appended (in order; ``record``), and the window's guess where the step had one."""
        if self._window_firsts:
            self.score_window(int(appended[0]) in self._window_firsts)
            self._window_firsts = []
        if not self._count:
            return
        tokens, parents, bins, rates, _, _, also = self._arrays[0]
        appended = np.asarray(appended, dtype=np.int64)
        record(tokens, parents, bins, also, rates, self._count, appended, self.fed, self.held, self.promised)
        self._update()

    def price(self, costs: Callable[[int], float], overhead: float) -> None:
        """Weigh later steps against ``costs`` and ``overhead`` (inside vLLM a step's price per
        row moves with the batch's size)."""
        self.costs = np.array([costs(k) for k in range(1, self.costs.shape[0] + 1)])
        self.overhead = overhead
