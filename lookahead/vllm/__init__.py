"""Lookahead's drafts inside vLLM: a ``custom_class`` speculative proposer.

    from vllm import LLM
    llm = LLM(model=..., speculative_config={
        "method": "custom_class",
        "model": "lookahead.vllm.LookaheadProposer",
        "num_speculative_tokens": 16,
    })

Modules, one job each: ``proposer`` (the class vLLM calls), ``requests`` (rows matched to
requests by their texts), ``chain`` (the copy tree's likeliest path), ``chances`` (learnt
acceptance, how many tokens to draft), ``history`` (earlier requests' texts, bounded),
``options`` (settings). None imports vLLM or torch: the proposer's tests run without them.
See ``docs/vllm.md``.
"""

from lookahead.vllm.options import ProposerOptions
from lookahead.vllm.proposer import LookaheadProposer

__all__ = ["LookaheadProposer", "ProposerOptions"]
