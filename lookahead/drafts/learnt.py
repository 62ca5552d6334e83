"""What a kept state learnt besides its n-grams and texts, as a pool file's arrays: the recycled successors
(``successors.SuccessorTable``) and the draft budget's counts per rule and bins
(``budget.DraftBudget.carry``), so that a server restarted from its ``--pool`` file starts
where it stopped.

A budget's key (whether it samples, its bins, the row depth, the node cap) is a tuple of
literals, stored as its ``repr`` and read back with ``ast.literal_eval``, which evaluates
literals only: a file is input, and never runs code. The counts are read back as
:class:`KeptCounts`, which ``DraftBudget.carry`` starts a new budget from.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from lookahead import files
from lookahead.drafts.successors import SuccessorTable

COUNTS = ("fed", "held", "promised", "window_seen", "window_held")


@dataclass
class KeptCounts:
    """A budget's counts as a file held them (each float64 ``[n]``)."""

    fed: np.ndarray
    held: np.ndarray
    promised: np.ndarray
    window_seen: np.ndarray
    window_held: np.ndarray


def learnt_arrays(successors: SuccessorTable | None, budgets: dict) -> dict[str, np.ndarray]:
    """The arrays ``KeptState.save`` adds: the successor table, and each budget's key and counts."""
    out: dict[str, np.ndarray] = {}
    if successors is not None:
        out["successor_table"], out["successor_scores"] = successors.arrays()
        out["successor_shape"] = np.array(successors.shape[1:])  # (k, length)
    out["budget_keys"] = np.array([repr(key) for key in budgets], dtype=str)
    for i, budget in enumerate(budgets.values()):
        for name in COUNTS:
            out[f"budget_{i}_{name}"] = np.asarray(getattr(budget, name), dtype=np.float64)
    return out


def read_learnt(path, data: dict) -> tuple[SuccessorTable | None, dict]:
    """``(successors, budgets)`` from a pool file's arrays (none where a file has none: older
    files, or a pool that never decoded); ``ValueError`` naming the array for anything amiss."""
    successors = None
    if "successor_table" in data:
        table, scores = data["successor_table"], data.get("successor_scores")
        k, length = files.read_ints(path, "successor_shape", data.get("successor_shape"), 2, 1, "k, length")
        if table.ndim != 2 or table.shape[1] != k:
            raise ValueError(f"{path}: 'successor_table' must be [vocab, {k}], got {table.shape}")
        successors = SuccessorTable(table.shape[0], k, length)
        held_table, held_scores = successors.arrays()
        files.check_like(path, "successor_table", table, held_table)
        if scores is None:
            raise ValueError(f"{path}: holds 'successor_table' without 'successor_scores'")
        files.check_like(path, "successor_scores", scores, held_scores)
        files.check_bounds(path, "successor_table", table, -1, table.shape[0] - 1)
        successors.restore(table, scores)
    budgets = {}
    for i, text in enumerate(data.get("budget_keys", np.zeros(0, dtype=str)).tolist()):
        try:
            key = ast.literal_eval(text)
        except (ValueError, SyntaxError) as err:
            raise ValueError(f"{path}: budget key {i} is not a tuple of literals: {text[:80]!r}") from err
        counts = [np.asarray(data.get(f"budget_{i}_{name}", np.zeros(0)), dtype=np.float64) for name in COUNTS]
        if any(c.ndim != 1 or not c.size or not np.isfinite(c).all() or c.min() < 0 for c in counts):
            raise ValueError(f"{path}: budget {i}'s counts must be non-empty, finite and >= 0")
        if counts[0].shape != counts[1].shape:
            raise ValueError(f"{path}: budget {i}'s fed and held counts differ in shape")
        budgets[key] = KeptCounts(*counts)
    return successors, budgets
