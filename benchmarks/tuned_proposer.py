"""A user's own settings for lookahead's vLLM proposer: a subclass with other options, in a
module imported before vLLM's engine is built, as a user's code would (``vllm_check.py
--methods tuned`` runs it). Importing it loads no numba, which vLLM's kernel registration
would trip over (docs/vllm.md)."""

from lookahead.vllm import LookaheadProposer, ProposerOptions


class TunedProposer(LookaheadProposer):
    """Dearer tokens, no n-gram pool, a smaller history: settings other than the default's."""

    options = ProposerOptions(token_cost=0.1, guesses=0, history_tokens=1 << 16)
