"""The proposer's settings, and what it reads from vLLM's config.

vLLM builds the proposer from ``vllm_config`` alone, so the settings are a class attribute:
subclass ``LookaheadProposer`` with other ``options`` to change them, and name the subclass in
``speculative_config["model"]`` (its module must be importable by vLLM's engine process; see
docs/vllm.md). Nothing here imports numba, torch or vLLM, so a module that defines such a
subclass can be imported before the engine starts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ProposerOptions:
    """Settings of ``LookaheadProposer``.

    Attributes:
        history_tokens: the most tokens of earlier requests kept for drafting (16 bytes each
            with their indexes: the default keeps 16 MiB); 0 keeps none.
        max_absent: requests kept after they left the batch (preempted ones come back); each
            keeps its text (4 bytes a token), so the states take at most
            ``(max_num_seqs + max_absent) x max_model_len x 4`` bytes.
        token_cost: one more token's cost in a step over the step's fixed cost: drafting pays
            where a node's chance beats it (about; the draft budget weighs it per row, by the
            batch's size).
        max_match: the longest end of the text matched against earlier text.
        min_share: tree nodes whose share of the matched occurrences is lower are not drafted.
        guesses: continuations kept per key in the n-gram pool of every request's text (the
            pool's rows are candidates beside the copy tree); 0 turns the pool off.
    """

    history_tokens: int = 1 << 20
    max_absent: int = 256
    token_cost: float = 0.05
    max_match: int = 16
    min_share: float = 0.1
    guesses: int = 2

    def __post_init__(self):
        for name, low in (("history_tokens", 0), ("max_absent", 0), ("max_match", 1), ("guesses", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"ProposerOptions.{name} must be an int >= {low}, got {value!r}")
        cost, share = self.token_cost, self.min_share
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not 0 <= cost < float("inf"):
            raise ValueError(f"ProposerOptions.token_cost must be a number >= 0, got {cost!r}")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ValueError(f"ProposerOptions.min_share must be a number in (0, 1], got {share!r}")

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class EngineLimits:
    """What the proposer takes from ``vllm_config``: the most tokens a draft may have
    (``num_speculative_tokens``) and a request may reach (``max_model_len``)."""

    k: int
    max_model_len: int

    @classmethod
    def from_vllm_config(cls, vllm_config) -> EngineLimits:
        spec = getattr(vllm_config, "speculative_config", None)
        k = getattr(spec, "num_speculative_tokens", None)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"speculative_config.num_speculative_tokens must be an int >= 1, got {k!r}")
        length = getattr(getattr(vllm_config, "model_config", None), "max_model_len", None)
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"model_config.max_model_len must be an int >= 1, got {length!r}")
        return cls(k, length)
