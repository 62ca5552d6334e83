"""Exact lookahead decoding for Hugging Face causal language models.

``lookahead.generate(model, input_ids, ...)`` takes what ``model.generate`` takes and returns
what it returns, token for token, in fewer forward passes.
"""

from lookahead.api import LookaheadDecoderOnlyOutput, custom_generate, generate
from lookahead.config import LookaheadConfig
from lookahead.default_model import default_model_path, load_default_model
from lookahead.drafts.pool import NgramPool
from lookahead.drafts.suffix import SuffixIndex
from lookahead.export import export_custom_generate
from lookahead.stats import LookaheadStats
from lookahead.step.attention import register_attention
from lookahead.step.costmodel import CostCurve
from lookahead.support import Unsupported

__all__ = [
    "CostCurve",
    "LookaheadConfig",
    "LookaheadDecoderOnlyOutput",
    "LookaheadStats",
    "NgramPool",
    "SuffixIndex",
    "Unsupported",
    "custom_generate",
    "default_model_path",
    "export_custom_generate",
    "generate",
    "load_default_model",
    "register_attention",
]
__version__ = "0.1.0"
