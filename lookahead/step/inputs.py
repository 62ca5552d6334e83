"""A step's inputs, and the forward that runs them, as the single and the batch decoder share them."""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import torch

from lookahead.stats import LookaheadStats
from lookahead.step.host import wait
from lookahead.verify.tree import GuessTree

NO_CHAIN = np.zeros(0, dtype=np.int64)  # a step without the classic window's level 0
ROOT_ONLY = GuessTree(NO_CHAIN, 1, NO_CHAIN, NO_CHAIN, NO_CHAIN, NO_CHAIN, np.zeros((0, 0), dtype=bool))


class StepInputs(NamedTuple):
    """One step's inputs: the guess tree, ids long ``[1, q]``, positions long ``[1, q]``, the
    mask(s), the guess rows merged into the tree and each row's source, whether the window's
    levels were fed (the classic shape), and the ids as int64 ``[q]`` on the host."""

    tree: GuessTree
    ids: torch.Tensor | None
    positions: torch.Tensor | None
    mask: object
    cands: np.ndarray | None
    origins: tuple[str, ...]
    windowed: bool
    host_ids: np.ndarray | None = None

    def source_of(self, held: list[int]) -> str:
        """The source whose guess matched the most of ``held`` (the guessed tokens the step
        accepted): ``"window"`` for the classic window's level 0, else the first row's among
        the longest."""
        chain = self.tree.chain if self.windowed else NO_CHAIN
        best, best_len = "window", _common(chain, held)
        for name, row in zip(self.origins, self.cands if self.cands is not None else ()):
            n = _common(row, held)
            if n > best_len:
                best, best_len = name, n
        return best


def _common(row, held: list[int]) -> int:
    """Length of the common prefix of a guess row and ``held``."""
    n = 0
    while n < len(held) and n < len(row) and int(row[n]) == held[n]:
        n += 1
    return n


def timed(stats: LookaheadStats, run, rows: int = 1) -> torch.Tensor:
    """``run()`` (a forward's logits) once the device is done, counted and timed in ``stats``
    as one forward over ``rows`` rows."""
    started = time.perf_counter()
    logits = wait(run())
    stats.forward_s += time.perf_counter() - started
    stats.forwards += 1
    stats.row_forwards += rows
    return logits
