"""The small Python code model that ships inside the package.

``load_default_model()`` loads it from package data with local files only: no hub lookup,
no network access, no ``trust_remote_code``, safetensors weights only. The model is a
standard ``LlamaForCausalLM`` trained from scratch by ``training/train_default_model.py``
(see ``docs/default_model.md`` and the model card next to the weights).
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_MODEL_NAME = "pycoder-tiny"
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent / "models" / DEFAULT_MODEL_NAME

__all__ = ["DEFAULT_MODEL_DIR", "DEFAULT_MODEL_NAME", "default_model_path", "load_default_model"]


def default_model_path() -> Path:
    """Folder holding the shipped model (config, safetensors weights, tokenizer, card)."""
    return DEFAULT_MODEL_DIR


def load_default_model(dtype=None, device="cpu"):
    """Load the shipped model and its tokenizer, offline.

    Args:
        dtype: torch dtype for the weights (default ``torch.float32``; they are stored in
            bfloat16 and upcast on load, which is exact).
        device: where to put the model (default ``"cpu"``).

    Returns:
        ``(model, tokenizer)``: a ``LlamaForCausalLM`` in eval mode and a
        ``PreTrainedTokenizerFast`` that prepends ``<|bos|>``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_model_path()
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"the default model is missing from {path}; reinstall the package or rerun training/train_default_model.py"
        )
    if dtype is None:
        dtype = torch.float32
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        str(path),
        local_files_only=True,
        use_safetensors=True,
        trust_remote_code=False,
        dtype=dtype,
    )
    model.to(device)
    model.eval()
    return model, tokenizer
