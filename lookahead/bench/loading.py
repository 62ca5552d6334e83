"""Loading the model under test: a local directory (or hub id), or the embedded default model."""

from __future__ import annotations

import os

import torch

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
DEFAULT_MODEL = "default"


def resolve_dtype(name: str | None) -> torch.dtype | None:
    if name is None or name == "auto":
        return None
    try:
        return DTYPES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown --dtype {name!r}; choose from {sorted(DTYPES)} or 'auto'") from None


def resolve_device(name: str | None) -> str:
    if name in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def load(
    model: str | None,
    dtype: str | None = None,
    device: str | None = None,
    *,
    allow_download: bool = False,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
):
    """Return ``(model, tokenizer)`` in eval mode on ``device``.

    ``model`` is a local directory or hub id (read from the local cache unless ``allow_download``),
    or ``None``/``"default"`` for the package's embedded model.
    """
    torch_dtype = resolve_dtype(dtype)
    device = resolve_device(device)
    if model in (None, DEFAULT_MODEL):
        try:
            from lookahead.default_model import load_default_model  # only needed without --model
        except ImportError as err:
            raise FileNotFoundError(f"the embedded default model is not available ({err}); pass --model DIR") from err

        kwargs = {"device": device}
        if torch_dtype is not None:
            kwargs["dtype"] = torch_dtype
        lm, tokenizer = load_default_model(**kwargs)
    else:
        lm, tokenizer = _load_pretrained(
            model, torch_dtype, device, allow_download, trust_remote_code, attn_implementation
        )
    return lm.eval(), tokenizer


def _load_pretrained(path, torch_dtype, device, allow_download, trust_remote_code, attn_implementation):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    looks_local = os.path.isabs(path) or path.startswith((".", "~")) or os.path.exists(path)
    if looks_local and not os.path.isdir(os.path.expanduser(path)):
        raise FileNotFoundError(f"--model {path!r}: no such model directory")
    path = os.path.expanduser(path) if looks_local else path
    common = {"local_files_only": not allow_download, "trust_remote_code": trust_remote_code}
    tokenizer = AutoTokenizer.from_pretrained(path, **common)
    kwargs = dict(common)
    if torch_dtype is not None:
        kwargs["dtype"] = torch_dtype
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    lm = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    return lm.to(device), tokenizer


def model_name(model: str | None) -> str:
    """A short name: the embedded model's name, or the directory's / hub id's last part."""
    if model in (None, DEFAULT_MODEL):
        try:
            from lookahead.default_model import DEFAULT_MODEL_NAME

            return DEFAULT_MODEL_NAME
        except ImportError:
            return DEFAULT_MODEL
    return os.path.basename(os.path.normpath(model)) or model


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def max_prompt_len(model, max_new_tokens: int, margin: int = 64) -> int | None:
    """Longest prompt that leaves room for the answer and the lookahead window's positions."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if not limit:
        return None
    return max(limit - max_new_tokens - margin, 16)


def pad_token_id(model, tokenizer) -> int | None:
    for source in (tokenizer, getattr(model, "generation_config", None), model.config):
        for attr in ("pad_token_id", "eos_token_id"):
            value = getattr(source, attr, None)
            if isinstance(value, list):
                value = value[0] if value else None
            if value is not None:
                return int(value)
    return None
