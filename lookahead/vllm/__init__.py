"""Lookahead's drafts inside vLLM: a ``custom_class`` speculative proposer.

    from vllm import LLM
    llm = LLM(model=..., speculative_config={
        "method": "custom_class",
        "model": "lookahead.vllm.LookaheadProposer",
        "num_speculative_tokens": 16,
    })

Modules, one job each: ``proposer`` (the class vLLM calls), ``drafting`` (its work per call:
each request's planner, the one ``lookahead.generate`` plans with, cut to a chain; the kept
state), ``requests`` (rows matched to requests by their texts), ``options`` (settings). None
imports vLLM or torch, and importing this package loads no numba either (``drafting`` is
loaded when vLLM builds the proposer). See ``docs/vllm.md``.
"""

from lookahead.vllm.options import ProposerOptions
from lookahead.vllm.proposer import LookaheadProposer

__all__ = ["LookaheadProposer", "ProposerOptions"]
