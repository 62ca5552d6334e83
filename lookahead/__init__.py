"""Exact lookahead decoding for Hugging Face causal language models.

``lookahead.generate(model, input_ids, ...)`` takes what ``model.generate`` takes and returns
what it returns, token for token, in fewer forward passes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lookahead.api import LookaheadDecoderOnlyOutput, custom_generate, generate
    from lookahead.config import LookaheadConfig
    from lookahead.default_model import default_model_path, load_default_model
    from lookahead.drafts.kept import KeptState
    from lookahead.drafts.pool import NgramPool
    from lookahead.drafts.suffix import SuffixIndex
    from lookahead.export import export_custom_generate
    from lookahead.runtime.attention import register_attention
    from lookahead.stats import LookaheadStats
    from lookahead.step.costmodel import CostCurve
    from lookahead.support import Unsupported

# Each name loads its module on first use, so that importing a light submodule (the kernels'
# compile helper, ``python -m lookahead.warmup``) does not import torch and transformers.
_HOMES = {
    "CostCurve": "lookahead.step.costmodel",
    "KeptState": "lookahead.drafts.kept",
    "LookaheadConfig": "lookahead.config",
    "LookaheadDecoderOnlyOutput": "lookahead.api",
    "LookaheadStats": "lookahead.stats",
    "NgramPool": "lookahead.drafts.pool",
    "SuffixIndex": "lookahead.drafts.suffix",
    "Unsupported": "lookahead.support",
    "custom_generate": "lookahead.api",
    "default_model_path": "lookahead.default_model",
    "export_custom_generate": "lookahead.export",
    "generate": "lookahead.api",
    "load_default_model": "lookahead.default_model",
    "register_attention": "lookahead.runtime.attention",
}
__all__ = [
    "CostCurve",
    "KeptState",
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


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'lookahead' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
