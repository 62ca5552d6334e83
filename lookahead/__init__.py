"""Exact lookahead decoding for Hugging Face causal language models.

``lookahead.generate(model, input_ids, ...)`` takes what ``model.generate`` takes and returns
what it returns, token for token, in fewer forward passes.
"""

from lookahead.config import LookaheadConfig
from lookahead.stats import LookaheadStats

__all__ = ["LookaheadConfig", "LookaheadStats"]
__version__ = "0.1.0"
