"""Per-call statistics: how many forwards a generation took and where its time went."""

from __future__ import annotations

from dataclasses import dataclass, field


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
        }
