"""The one configuration object of the decoder: shapes of the window, pool and guesses."""

from __future__ import annotations

import warnings
from dataclasses import InitVar, dataclass

# the decoding methods lookahead.generate runs: the draft budget's choice each step, the
# published fixed shape (the window's levels and every source's whole guesses), plain Jacobi
ENGINE_METHODS = ("lookahead", "classic", "jacobi")
ON_UNSUPPORTED = ("error", "fallback")


def _check_int(name: str, value, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"LookaheadConfig.{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"LookaheadConfig.{name} must be {allowed}, got {value!r}")


@dataclass(frozen=True)
class LookaheadConfig:
    """Shape of one lookahead decoding step.

    Each step feeds the model ``1 + (ngram - 1) * window + (at most guesses * (ngram - 1))``
    tokens in one forward pass (fewer when guesses share prefixes: they are merged into a trie).

    Attributes:
        window: W, columns of the Jacobi window: how many future positions are guessed and
            refined in parallel each step. 0 turns the window off (then only the pool and the
            prompt propose guesses).
        ngram: N, length of the n-grams read off the window's trajectories; the window keeps
            N - 1 levels (Jacobi iterations) and every guess is N - 1 tokens long.
        guesses: G, the most candidate continuations verified per step, and the most kept per
            key in the n-gram pool. 0 turns verification of pool guesses off.
        method: ``"lookahead"`` (the default: each step feeds the draft budget's choice of
            nodes from every source, the window's free-iteration row among them, as many as
            pay for their forward by the tokens they are expected to add per unit of
            calibrated forward cost on this model and machine, possibly none: a plain step),
            ``"classic"`` (the published fixed shape every step: the window's levels and every
            source's whole guesses, no budget; ``lookahead/classic.py``) or ``"jacobi"``
            (plain Jacobi decoding: one level of guesses iterated to its fixed point, no pool).
        pool_capacity: how many distinct keys the n-gram pool holds (rounded up to a power of
            two). A full neighbourhood evicts its least recently touched key, so memory stays
            bounded at ``pool_capacity * guesses * (ngram - 1)`` int32 tokens.
        context_tokens: 1 keys the pool by the last token alone; 2 also by the last two
            tokens, whose continuations are tried first (more precise on code and text).
        prompt_ngrams: also fill the pool with the n-grams of the prompt and of the accepted
            text.
        copy_length: the most nodes of the copy guess: a draft tree of what followed the
            text's end where it occurred before (in the prompt and output so far, in earlier
            requests kept by a pool, in a corpus index), each node scored by the share of the
            occurrences that continued with it, and fed as far as it pays for its forward
            cost (``lookahead/drafts/copy_drafter.py``). 0 turns it off.
        copy_match: the longest suffix of the text the copy guess matches; every match
            length up to it is tried and the draft expecting the most tokens wins.
        copy_min_prob: nodes followed by less than this share of their match's occurrences
            are not drafted (SuffixDecoding's ``min_token_prob``). In (0, 1].
        successors: recycled guesses: the top-k next tokens the model predicted at every
            token it was fed are kept per token (a ``vocab x k`` table), and each step
            proposes k rows of ``ngram - 1`` tokens grown from the last token by following
            them. They cost no extra forward work to gather, only a top-k over the vocabulary
            each step; the draft budget feeds their nodes where they hold often enough, the
            first row (the likeliest chain) learning apart from the others. Under seeded
            sampling the first row follows the stored successors that win each position's
            race with its known noise. 0 = off. The default 4 is the best measured on the
            embedded model (docs/benchmarks.md).
        adaptive: deprecated, the old switch for the same choice: ``adaptive=False`` is
            ``method="classic"``.
        static_buckets: on a ``StaticCache`` (``cache_implementation="static"``) every step is
            padded to the smallest of these sizes that holds it, so a compiled forward meets one
            shape per bucket (wider steps run uncompiled). Increasing ints in [1, 1024].
        on_unsupported: what to do with a model whose attention cannot take the lookahead mask:
            ``"error"`` raises ``NotImplementedError``; ``"fallback"`` warns and runs plain
            ``model.generate``.
        cudnn_attention: on CUDA, let ``sdpa`` run cuDNN's attention kernel where PyTorch
            would pick it (half precision on recent GPUs). PyTorch builds a cuDNN plan for
            every new pair of query and key lengths, and a decode meets a new one every step,
            so each step pays a plan (measured in docs/benchmarks.md). False (the default) runs
            lookahead's forwards on sdpa's other kernels (flash, memory-efficient, math); the
            setting is restored when the call returns. Greedy fp32 outputs are unaffected
            (cuDNN's attention takes half precision only).
    """

    window: int = 4
    ngram: int = 5
    guesses: int = 2
    method: str = "lookahead"
    pool_capacity: int = 1 << 14
    context_tokens: int = 2
    prompt_ngrams: bool = True
    copy_length: int = 16
    copy_match: int = 16
    copy_min_prob: float = 0.1
    successors: int = 4
    adaptive: InitVar[bool | None] = None
    static_buckets: tuple[int, ...] = (1, 4, 8, 16, 32, 64)
    on_unsupported: str = "error"
    cudnn_attention: bool = False

    def __post_init__(self, adaptive: bool | None = None) -> None:
        if adaptive is not None:
            if not isinstance(adaptive, bool):
                raise TypeError(f"LookaheadConfig.adaptive must be a bool, got {adaptive!r}")
            warnings.warn(
                "LookaheadConfig(adaptive=...) is deprecated: adaptive=False is method='classic'",
                DeprecationWarning,
                stacklevel=3,
            )
            if not adaptive and self.method == "lookahead":
                object.__setattr__(self, "method", "classic")
        _check_int("window", self.window, 0, 256)
        _check_int("ngram", self.ngram, 2, 32)
        _check_int("guesses", self.guesses, 0, 256)
        _check_int("pool_capacity", self.pool_capacity, 1, 1 << 26)
        _check_int("context_tokens", self.context_tokens, 1, 2)
        _check_int("copy_length", self.copy_length, 0, 256)
        _check_int("copy_match", self.copy_match, 1, 64)
        _check_int("successors", self.successors, 0, 16)
        prob = self.copy_min_prob
        if isinstance(prob, bool) or not isinstance(prob, (int, float)) or not 0 < prob <= 1:
            raise ValueError(f"LookaheadConfig.copy_min_prob must be a number in (0, 1], got {prob!r}")
        if self.method not in ENGINE_METHODS:
            raise ValueError(f"LookaheadConfig.method must be one of {ENGINE_METHODS}, got {self.method!r}")
        if self.on_unsupported not in ON_UNSUPPORTED:
            raise ValueError(
                f"LookaheadConfig.on_unsupported must be one of {ON_UNSUPPORTED}, got {self.on_unsupported!r}"
            )
        for flag in ("prompt_ngrams", "cudnn_attention"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"LookaheadConfig.{flag} must be a bool, got {getattr(self, flag)!r}")
        buckets = self.static_buckets
        if not isinstance(buckets, tuple) or not buckets:
            raise TypeError(f"LookaheadConfig.static_buckets must be a non-empty tuple of ints, got {buckets!r}")
        for b in buckets:
            _check_int("static_buckets item", b, 1, 1024)
        if list(buckets) != sorted(set(buckets)):
            raise ValueError(f"LookaheadConfig.static_buckets must be strictly increasing, got {buckets!r}")
        if self.method == "jacobi" and self.window == 0:
            raise ValueError("LookaheadConfig.window must be >= 1 with method='jacobi', got 0")

    @property
    def levels(self) -> int:
        """Levels of the Jacobi window: 1 for plain Jacobi decoding, else ngram - 1."""
        return 1 if self.method == "jacobi" else self.ngram - 1

    @property
    def widest_step(self) -> int:
        """The most tokens one step can feed: root, window, and every guess row unmerged."""
        if self.method == "jacobi":
            return 1 + self.window
        rows = self._row_guesses
        return 1 + self.levels * self.window + rows * (self.ngram - 1) + (self.copy_length if self.uses_copy else 0)

    @property
    def classic(self) -> bool:
        """Whether steps take a fixed shape (``classic`` or ``jacobi``,
        ``lookahead/classic.py``) instead of the draft budget's choice."""
        return self.method != "lookahead"

    @property
    def draft_nodes(self) -> int:
        """The most draft nodes a budgeted step feeds: ``copy_length``, or without the copy
        guess every other source's rows (``ngram - 1`` tokens each)."""
        if self.uses_copy:
            return self.copy_length
        return max(self.window + self._row_guesses, 1) * (self.ngram - 1)

    @property
    def _row_guesses(self) -> int:
        """The rows the pool and the successors propose at most per step."""
        return (self.guesses if self.uses_pool else 0) + (self.successors if self.uses_successors else 0)

    @property
    def uses_pool(self) -> bool:
        return self.method != "jacobi" and self.guesses > 0

    @property
    def uses_successors(self) -> bool:
        return self.method != "jacobi" and self.successors > 0

    @property
    def uses_copy(self) -> bool:
        return self.method != "jacobi" and self.copy_length > 0
