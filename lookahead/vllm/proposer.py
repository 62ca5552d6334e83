"""``LookaheadProposer``: lookahead's drafts as a vLLM ``custom_class`` speculative proposer.

    LLM(model=..., speculative_config={"method": "custom_class",
        "model": "lookahead.vllm.LookaheadProposer", "num_speculative_tokens": 16})

Each step vLLM's model runner calls :meth:`LookaheadProposer.propose` on the host with every
batch row's sampled tokens and text; the proposer answers one draft chain per row, which vLLM
verifies (its rejection sampler: greedy output is unchanged, sampled output keeps its
distribution). Per row (``drafting.Drafting``):

1. match the row to its request's state by the text (``requests``: no request ids);
2. let the request's planner learn from the tokens that came (what its last plan drafted or
   withheld, scored against them);
3. plan the next draft: the copy tree over the request's text and the finished requests'
   history, the n-gram pool, one draft budget over them, priced by the batch's size and cut
   to a chain.

Requests that left the batch go to the history (their texts, bounded in tokens). Importing
this module imports neither vLLM nor torch nor numba: the planner is loaded when vLLM builds
the proposer, so a user's module may define a subclass and be imported before ``LLM(...)``
(vLLM's kernel registration scans every loaded module, and numba's library wrapper breaks it).
"""

from __future__ import annotations

import numpy as np

from lookahead.vllm.options import EngineLimits, ProposerOptions


class LookaheadProposer:
    """A ``custom_class`` speculative proposer for vLLM (see the module's docstring).

    Args:
        vllm_config: vLLM's ``VllmConfig`` (read: ``speculative_config.num_speculative_tokens``,
            ``model_config.max_model_len``).
    """

    options = ProposerOptions()

    def __init__(self, vllm_config):
        limits = EngineLimits.from_vllm_config(vllm_config)
        if not isinstance(self.options, ProposerOptions):
            raise TypeError(
                f"{type(self).__name__}.options must be a ProposerOptions, got {type(self.options).__name__}"
            )
        from lookahead.vllm.drafting import Drafting  # numba: only now, once the engine is built
        from lookahead.warmup import warm_kernels

        self.drafting = Drafting(limits, self.options)
        warm_kernels()  # compile (or load) the kernels now, not at the first step

    @property
    def requests(self):
        """The requests' states, live and absent (``requests.RequestTable``)."""
        return self.drafting.requests

    @property
    def history(self):
        """The finished requests' texts (``drafts.history.History``)."""
        return self.drafting.kept.history

    @property
    def counts(self) -> dict:
        """Calls, rows drafted for, tokens drafted and drafted tokens that held."""
        return self.drafting.counts

    def load_model(self, model) -> None:
        """Nothing: the drafts need no model (vLLM's CPU runner calls this)."""

    def propose(
        self,
        sampled_token_ids: list[list[int]],
        num_tokens_no_spec: np.ndarray,
        token_ids_cpu: np.ndarray,
        slot_mappings=None,
    ) -> list[list[int]]:
        """One draft per batch row (a list of at most ``num_speculative_tokens`` ids, empty
        for none).

        Args:
            sampled_token_ids: per row, the tokens this step appended (empty: the row sampled
                nothing, a prefill chunk).
            num_tokens_no_spec: int ``[>= rows]``: each row's text length, those tokens included.
            token_ids_cpu: int ``[>= rows, max_model_len]``: the rows' texts.
            slot_mappings: unused.
        """
        return self.drafting.propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)

    @property
    def acceptance_rate(self) -> float:
        """The share of drafted tokens that held so far."""
        counts = self.counts
        return counts["held"] / counts["drafted"] if counts["drafted"] else 0.0
