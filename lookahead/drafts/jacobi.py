"""Free Jacobi iterations: the next guess of the window, read off the forward a step already ran.

A step feeds draft branches and the model predicts the token after every node it was fed.
Past the last node the walk accepted (``node``), its branches hold tokens that turned out
wrong, and the prediction after each of their nodes is one Jacobi iteration over that tail:
the model's next token given the text so far plus the guesses before it. So a branch under
``node`` yields, for nothing, a guess of the tokens after the one the step emitted there::

    accepted  root -> a -> b        (the model picked x at b, where the draft had c)
    branch    b -> c -> d -> e      (c, d, e fed, wrong from c on)
    picks     at c: p1, at d: p2, at e: p3
    guess     x -> p1 -> p2 -> p3   (p1 follows x as Jacobi guesses it: c stood where x is)

Each child of ``node`` starts a branch (the deepest below it), and each branch gives a
guess. The window keeps those of its likeliest children by the model's own scores there: the
likelier the wrong token, the nearer its context to the text's, and the more often the
prediction after it is the one after the token emitted. Greedily the picks are the fetched
argmaxes; under seeded sampling, the race each position will run with its known noise
(``sampling.noise.NoiseStream.peek``), so the guesses follow the sampled text, whose fixed point
under that noise it is.
"""

from __future__ import annotations

import numpy as np

from lookahead.drafts.source import Bin

_NONE = np.zeros((0, 0), dtype=np.int64)


def free_iterations(tree, node: int, picks, depth: int, scores=None, most: int = 1) -> np.ndarray:
    """The guesses of the (at most ``depth``) tokens after the one emitted at ``node``, one per
    branch below it (``GuessTree.branches``: with ``scores``, the step's at ``node``, up to
    ``most`` that start at its likeliest children; else the deepest): the tokens picked at
    the branch's nodes, the k-th read as the k-th token after ``node``'s. ``picks``: the
    step's pick at every node (int64 ``[q]``: greedy's argmaxes), or ``picks(nodes)`` for a
    branch's nodes (a list). Int64 ``[r, <= depth]``, -1 padded (``[0, 0]`` for a leaf)."""
    if isinstance(picks, np.ndarray):
        out = tree.branches(node, depth, scores, most, picks)
        return out if out.size else _NONE
    nodes = tree.branches(node, depth, scores, most)
    if not nodes.size:
        return _NONE
    out = np.full(nodes.shape, -1, dtype=np.int64)
    for row, branch in zip(out, nodes.tolist()):
        branch = [v for v in branch if v >= 0]
        row[: len(branch)] = picks(branch)
    return out


class WindowSource:
    """The Jacobi window as a guess source: each step's free iterations (one row per fed
    sibling of the new root, up to ``most``, likeliest first; without any, the old first row
    moved on) are the next step's guesses of the tokens after the root. Its bin is ``free``:
    any node a step feeds buys the next step such a row, which the budget counts.

    Args:
        depth: tokens per row (``ngram - 1``).
        most: the most rows kept (``LookaheadConfig.window``).
        pool: where a full first row is filed as a trajectory n-gram, keyed by the root alone:
            under the root and the token before it, it would learn in the text's context-pair
            bins, whose chances it does not have (docs/benchmarks.md); or None.
    """

    name = "window"
    scored = False
    top_k = 0
    reads_noise = False
    # right after one wrong token the model's next prediction held 23% of the time on the
    # embedded model (docs/benchmarks.md, "The constants and what set them")
    bins = (Bin("window", 0.25, 0.5, free=True),)

    def __init__(self, depth: int, most: int, pool=None):
        self.depth, self.most, self.pool = depth, most, pool
        self.rows = _NONE

    def propose(self, context) -> list[np.ndarray]:
        return [self.rows]

    def learn(self, outcome) -> None:
        text, accepted = outcome.text, outcome.accepted
        node = outcome.path[-1]
        scores = outcome.scores_at(node) if outcome.scores_at is not None else None
        guesses = free_iterations(outcome.tree, node, outcome.picks, self.depth, scores, self.most)
        if not guesses.size:
            self.rows = moved_on(self.rows, accepted)
            return
        self.rows = guesses
        first = guesses[0]
        if self.pool is not None and first.size == self.depth and first[-1] >= 0:
            self.pool.insert(np.concatenate([text[-1:], first])[None])


def moved_on(guesses: np.ndarray, accepted: int) -> np.ndarray:
    """The first of the window's ``guesses`` (int64 ``[r, d]``, -1 padded) past the ``accepted``
    tokens a step appended, as a ``[1, <= d]`` row (``[0, 0]`` where nothing of it is left)."""
    rest = guesses[:1, accepted:]
    return rest if rest.size and rest[0, 0] >= 0 else _NONE
