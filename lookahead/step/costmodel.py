"""What a forward over k tokens costs, relative to a forward over one.

The draft budget weighs each step's expected accepted tokens against the cost of its
forward, read from a ``CostCurve``: measured once per model and machine by
:mod:`lookahead.runtime.calibration` (every decision then depends only on token counts and
that curve), or proportional (``CostCurve.linear()``) where none is given.
"""

from __future__ import annotations

from dataclasses import dataclass

# the decoder's per-row work in a guessing step beyond a plain step's (the trie, the mask, the
# walk, learning what the step fed), in seconds, where no calibration measured it on the
# machine at hand (a curve given by the caller): benchmarks/overhead.py on an AVX2 Xeon
GUESS_OVERHEAD_S = 4e-4


@dataclass(frozen=True)
class CostCurve:
    """``cost(k)``: a forward over k query tokens in units of a one-token forward.

    Attributes:
        sizes: increasing query lengths, the first 1.
        costs: measured relative costs at ``sizes`` (``costs[0] == 1``), non-decreasing
            from the second size on; that one may cost less than 1 (see :meth:`from_times`).
        unit_s: seconds of a one-token forward where measured (0.0: unknown); it prices the
            decoder's own per-step work in forward units.
        overhead_s: the decoder's own work in a guessing step beyond a plain step's, in
            seconds (measured with the curve by ``runtime.calibration``; else the default).
    """

    sizes: tuple[int, ...]
    costs: tuple[float, ...]
    unit_s: float = 0.0
    overhead_s: float = GUESS_OVERHEAD_S

    def __post_init__(self) -> None:
        if len(self.sizes) != len(self.costs) or len(self.sizes) < 2:
            raise ValueError(f"CostCurve needs >= 2 sizes with one cost each, got {self.sizes!r}, {self.costs!r}")
        if self.sizes[0] != 1 or any(b <= a for a, b in zip(self.sizes, self.sizes[1:])):
            raise ValueError(f"CostCurve.sizes must increase from 1, got {self.sizes!r}")
        if any(not c > 0 for c in self.costs):
            raise ValueError(f"CostCurve.costs must be > 0, got {self.costs!r}")
        if not 0 <= self.overhead_s < float("inf"):
            raise ValueError(f"CostCurve.overhead_s must be a number >= 0, got {self.overhead_s!r}")

    @classmethod
    def linear(cls, per_token: float = 1.0) -> CostCurve:
        """A forward over k tokens costs ``1 + per_token * (k - 1)`` (1.0: proportional)."""
        return cls((1, 2), (1.0, 1.0 + per_token))

    @classmethod
    def from_times(cls, sizes, seconds) -> CostCurve:
        """From measured seconds per size, relative to the one-token forward and made
        non-decreasing from the second size on (noise cannot make more tokens cheaper).

        The one-token forward is no floor: it may run other kernels than wider ones. On an
        AVX-512 CPU in bfloat16, PyTorch's sdpa attends one query with a slower kernel than
        two (140 against 55 microseconds a layer, 6 heads of 64 over 300 keys, torch 2.13),
        and the embedded model's two-token forward costs 0.92-0.98 of its one-token one. A
        guessed node there is cheaper than free, and the draft budget feeds it."""
        unit = float(seconds[0])
        costs, top = [1.0], 0.0
        for s in seconds[1:]:
            top = max(top, float(s))
            costs.append(top / unit)
        return cls(tuple(int(k) for k in sizes), tuple(costs), unit)

    def __call__(self, k: float) -> float:
        sizes, costs = self.sizes, self.costs
        if k <= 1:
            return 1.0
        for i in range(1, len(sizes)):
            if k <= sizes[i]:
                a, b = sizes[i - 1], sizes[i]
                return costs[i - 1] + (costs[i] - costs[i - 1]) * (k - a) / (b - a)
        slope = (costs[-1] - costs[-2]) / (sizes[-1] - sizes[-2])
        return costs[-1] + slope * (k - sizes[-1])

    def bucketed(self, buckets: tuple[int, ...]) -> CostCurve:
        """The cost of steps padded to ``buckets`` (increasing): k tokens cost what the smallest
        bucket holding them costs; past the largest, what this curve says."""
        sizes, costs = [1], [1.0]
        for lower, upper in zip((1, *buckets), buckets):
            if upper > lower:
                sizes += [lower + 1] + ([upper] if upper > lower + 1 else [])
                costs += [self(upper)] * (len(sizes) - len(costs))
        tail = buckets[-1] + 1
        sizes.append(tail)
        costs.append(self(tail))
        return CostCurve(tuple(sizes), tuple(costs), self.unit_s, self.overhead_s)

    @property
    def overhead(self) -> float:
        """The decoder's own work in a guessing step, in one-token forwards (0.0 when the unit
        is unknown)."""
        return self.overhead_s / self.unit_s if self.unit_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "sizes": list(self.sizes),
            "costs": list(self.costs),
            "unit_s": self.unit_s,
            "overhead_s": self.overhead_s,
        }

    @classmethod
    def from_dict(cls, data: dict) -> CostCurve:
        sizes, costs = tuple(int(k) for k in data["sizes"]), tuple(float(c) for c in data["costs"])
        return cls(sizes, costs, float(data.get("unit_s", 0.0)), float(data.get("overhead_s", GUESS_OVERHEAD_S)))
