"""Per-call statistics: how many forwards a generation took and where its time went."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# a decode's stages, in a step's order: what ``LookaheadStats.stages`` times
STAGES = ("prefill", "plan", "inputs", "forward", "fetch", "verify", "learn", "commit", "stop")


@dataclass
class LookaheadStats:
    """Filled in by ``lookahead.generate`` (pass one in as ``lookahead_stats=``); passing the
    same object to several calls adds them up.

    Attributes:
        forwards: model forward passes, the prompt's prefill included.
        row_forwards: forwards counted once per batch row they ran (``forwards`` at batch
            size 1).
        new_tokens: tokens appended to the prompt (all rows of a batch).
        steps: decoding steps (forwards after the prefill; in a batch, per row).
        accepted: histogram, ``accepted[k]`` = number of steps that appended k tokens.
        pool_lookups / pool_hits: steps that asked the pool / that got at least one guess.
        guess_tokens: tokens fed as guesses (window + candidates), summed over steps.
        source_tokens: accepted guessed tokens by the source whose guess matched them
            (``window``, ``copy``, ``pool``, ``successors``; ties go to the window,
            then to the first row's source).
        window_steps: steps that fed a guess of the Jacobi window (the classic shape's level 0,
            or the draft budget's choice of its free-iteration row).
        plain_steps: steps that fed the last token alone, as plain decoding (a shape that
            found no guess included).
        draft_steps: steps that fed a draft the budget chose.
        forward_s: seconds spent inside the model's forward (prefill included; on CUDA up to
            the end of the forward's kernels, not their launch).
        total_s: seconds of the whole call; ``total_s - forward_s`` is the decoder's overhead.
        fallback: True when the call ran plain ``model.generate`` instead.
        compiled_graphs: on a compiled static cache, the bucket sizes this call traced (and
            timed) before its prefill: none when an earlier call on the same cache did.
        warmup_s: seconds spent before the prefill making sure no step waits for a compile:
            the numba kernels on a process's first call (``lookahead.warmup``) and the
            compiled buckets above (outside ``forward_s``, inside ``total_s``).
        stages: seconds per stage of the decode (``STAGES``): the prefill (the prompt's
            forward, the first token, the sources started), then each step's planning (every
            source and the budget, the tree), building its inputs and mask, the forward
            (``forward_s`` less the prefill's), reading the logits, verifying (the walk, the
            tokens appended), learning (the stats, every source, the budget), the commit and
            the stopping criteria. ``total_s`` less their sum is the call's set-up (checks, the
            cost curve, a compile).
    """

    forwards: int = 0
    row_forwards: int = 0
    new_tokens: int = 0
    steps: int = 0
    accepted: list[int] = field(default_factory=list)
    pool_lookups: int = 0
    pool_hits: int = 0
    guess_tokens: int = 0
    source_tokens: dict = field(default_factory=dict)
    window_steps: int = 0
    plain_steps: int = 0
    draft_steps: int = 0
    forward_s: float = 0.0
    total_s: float = 0.0
    fallback: bool = False
    compiled_graphs: list[int] = field(default_factory=list)
    warmup_s: float = 0.0
    stages: dict = field(default_factory=dict)

    @property
    def tokens_per_forward(self) -> float:
        """Step compression: new tokens per forward pass and row (1.0 for plain greedy
        decoding, whatever the batch size)."""
        forwards = self.row_forwards or self.forwards
        return self.new_tokens / forwards if forwards else 0.0

    @property
    def overhead_s(self) -> float:
        return max(self.total_s - self.forward_s, 0.0)

    @property
    def overhead_share(self) -> float:
        return self.overhead_s / self.total_s if self.total_s else 0.0

    def record_step(self, appended: int) -> None:
        if appended >= len(self.accepted):
            self.accepted.extend([0] * (appended + 1 - len(self.accepted)))
        self.accepted[appended] += 1

    def credit(self, source: str, tokens: int) -> None:
        self.source_tokens[source] = self.source_tokens.get(source, 0) + tokens

    def as_dict(self) -> dict:
        return {
            "forwards": self.forwards,
            "row_forwards": self.row_forwards,
            "new_tokens": self.new_tokens,
            "steps": self.steps,
            "tokens_per_forward": self.tokens_per_forward,
            "accepted": list(self.accepted),
            "pool_lookups": self.pool_lookups,
            "pool_hits": self.pool_hits,
            "guess_tokens": self.guess_tokens,
            "source_tokens": dict(self.source_tokens),
            "window_steps": self.window_steps,
            "plain_steps": self.plain_steps,
            "draft_steps": self.draft_steps,
            "forward_s": self.forward_s,
            "total_s": self.total_s,
            "overhead_share": self.overhead_share,
            "fallback": self.fallback,
            "stages": dict(self.stages),
        }


class Laps:
    """A stopwatch that adds the time since its last mark to ``stages[name]`` at each
    ``mark(name)`` (a decode's stages, ``LookaheadStats.stages``): one clock read a stage."""

    def __init__(self, stages: dict):
        self.stages = stages
        self.last = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.stages[name] = self.stages.get(name, 0.0) + now - self.last
        self.last = now

    def move(self, seconds: float, source: str, target: str) -> None:
        """Count ``seconds`` of what was marked ``source`` as ``target`` (a forward timed
        inside a stage that also built its inputs)."""
        self.stages[source] -= seconds
        self.stages[target] = self.stages.get(target, 0.0) + seconds
