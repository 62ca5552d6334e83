"""Backing off when guesses stop paying: choose each step's shape by measured tokens per second.

Three shapes compete:

- ``full``: root + Jacobi window + guesses (the window keeps producing n-grams);
- ``lean``: root + guesses from the pool and the copy lookup only;
- ``plain``: the root alone, i.e. plain decoding (one token, the cheapest forward).

Each keeps an exponential moving average of tokens accepted per step and of the step's
forward time, both measured on this model and machine. The controller runs the shape with
the best tokens-per-second and tries each other one every ``explore_every`` steps, so a
prompt where guesses start to hold again wins them back.
"""

from __future__ import annotations

FULL, LEAN, PLAIN = "full", "lean", "plain"
SHAPES = (FULL, LEAN, PLAIN)


class _Average:
    __slots__ = ("value", "weight")

    def __init__(self, prior: float = 0.0, weight: float = 0.0):
        self.value = prior * weight
        self.weight = weight

    def add(self, x: float, alpha: float) -> None:
        self.value = (1 - alpha) * self.value + alpha * x
        self.weight = (1 - alpha) * self.weight + alpha

    def mean(self) -> float:
        return self.value / self.weight if self.weight else 0.0


class ShapeController:
    """Picks the next step's shape from the measured rates.

    Args:
        adaptive: False pins every step to ``FULL``.
        explore_every: steps between tries of a shape not currently preferred (a third of
            that for the lean shape, twice that for the full one).
        alpha: weight of the newest step in the moving averages.
    """

    def __init__(self, adaptive: bool = True, explore_every: int = 12, alpha: float = 0.25):
        self.adaptive = adaptive
        self.explore_every = explore_every
        self.alpha = alpha
        # a step with guesses is assumed to yield two tokens until measured otherwise, so a
        # cold pool's first misses do not send decoding to the plain shape
        self._tokens = {shape: _Average(1.0 if shape == PLAIN else 2.0, 1.0) for shape in SHAPES}
        self._seconds = {shape: _Average() for shape in SHAPES}
        self._since = dict.fromkeys(SHAPES, 0)
        # cheap tries come often: a lean step costs little more than a plain one and finds the
        # moment guesses start to hold (text that begins to repeat); the window costs most
        self._waits = {LEAN: max(explore_every // 3, 1), PLAIN: explore_every, FULL: 2 * explore_every}
        self.counts = dict.fromkeys(SHAPES, 0)

    def rate(self, shape: str) -> float:
        """Measured tokens per second of ``shape`` (0 before it ran)."""
        seconds = self._seconds[shape].mean()
        return self._tokens[shape].mean() / seconds if seconds > 0 else 0.0

    def choose(self) -> str:
        if not self.adaptive:
            return FULL
        for shape in SHAPES:
            if self.counts[shape] < 2:
                return shape
        best = max(SHAPES, key=self.rate)
        stale = [shape for shape in SHAPES if shape != best and self._since[shape] >= self._waits[shape]]
        return stale[0] if stale else best

    def record(self, shape: str, accepted: int, seconds: float) -> None:
        self._tokens[shape].add(float(accepted), self.alpha)
        self._seconds[shape].add(seconds, self.alpha)
        self.counts[shape] += 1
        for other in SHAPES:
            self._since[other] = 0 if other == shape else self._since[other] + 1
