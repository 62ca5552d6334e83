"""Loading a model for the commands and the benchmark: a local directory (or hub id), or the
embedded default model; optionally sharded over a torchrun job (``tp``)."""

from __future__ import annotations

import os

import torch

from lookahead.runtime import attention

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
    """``auto``: cuda when there is one, else cpu; any other name must be a device here."""
    if name in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"unknown --device {name!r}; choose cpu, cuda, cuda:N or auto") from err
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"--device {name!r}: there is no CUDA device here")
        if device.index is not None and device.index >= count:
            raise ValueError(f"--device {name!r}: there are {count} CUDA device(s) here, cuda:0 to cuda:{count - 1}")
    return name


def load(
    model: str | None,
    dtype: str | None = None,
    device: str | None = None,
    *,
    allow_download: bool = False,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
    tp: bool = False,
    need_tokenizer: bool = True,
    positions: int | None = None,
):
    """Return ``(model, tokenizer)`` in eval mode on ``device``.

    ``model`` is a local directory or hub id (read from the local cache unless ``allow_download``),
    or ``None``/``"default"`` for the package's embedded model. ``tp``: shard it over the ranks
    of this torchrun job with transformers' tensor-parallel plan (each rank on its own device);
    ``ValueError`` outside torchrun, with a ``device``, or when the heads do not divide.
    A folder whose tokenizer cannot be loaded is a one-line ``ValueError``, or, without
    ``need_tokenizer``, gives ``tokenizer=None``. ``positions``: stretch a rotary model to that
    many positions (:func:`stretch_positions`).
    """
    torch_dtype = resolve_dtype(dtype)
    if tp:
        return _load_tensor_parallel(
            model, torch_dtype, device, allow_download, trust_remote_code, attn_implementation, need_tokenizer
        )
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
            model, torch_dtype, device, allow_download, trust_remote_code, attn_implementation, need_tokenizer
        )
    if positions is not None:
        stretch_positions(lm, tokenizer, positions)
    return lm.eval(), tokenizer


def stretch_positions(model, tokenizer, positions: int) -> None:
    """Let a rotary model (its config's ``rope_parameters``) take ``positions`` positions by
    linear interpolation (``rope_type: linear``, factor = positions over its own): how the
    benchmark runs a small model on prompts of many thousand tokens. Every method then decodes
    the same stretched model. ``ValueError`` for a model without rotary positions or a
    ``positions`` below its own."""
    config = model.config
    native = getattr(config, "max_position_embeddings", None)
    rope = getattr(config, "rope_parameters", None)
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if not native or not isinstance(rope, dict) or rotary is None:
        raise ValueError(f"--positions {positions}: the model has no rotary positions to stretch")
    if positions < native:
        raise ValueError(f"--positions must be >= the model's own {native}, got {positions}")
    config.rope_parameters = {**rope, "rope_type": "linear", "factor": positions / native}
    config.max_position_embeddings = positions
    device = next(model.parameters()).device
    model.model.rotary_emb = type(rotary)(config).to(device)
    if tokenizer is not None:
        tokenizer.model_max_length = positions


def _load_pretrained(
    path,
    torch_dtype,
    device,
    allow_download,
    trust_remote_code,
    attn_implementation,
    need_tokenizer=True,
    extra: dict | None = None,
):
    from transformers import AutoModelForCausalLM

    looks_local = os.path.isabs(path) or path.startswith((".", "~")) or os.path.exists(path)
    if looks_local and not os.path.isdir(os.path.expanduser(path)):
        raise FileNotFoundError(f"--model {path!r}: no such model directory")
    path = os.path.expanduser(path) if looks_local else path
    common = {"local_files_only": not allow_download, "trust_remote_code": trust_remote_code}
    kwargs = dict(common)
    if torch_dtype is not None:
        kwargs["dtype"] = torch_dtype
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if attn_implementation == attention.NAME:  # asked for by name (--attn): registered on request
        attention.register_attention()
    lm = AutoModelForCausalLM.from_pretrained(path, **kwargs, **(extra or {}))  # first: a missing model says so
    tokenizer = _load_tokenizer(path, common, need_tokenizer)
    return (lm.to(device) if device is not None else lm), tokenizer


def _load_tokenizer(path, common: dict, required: bool):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, **common)
    except (OSError, ValueError) as err:
        if not required:
            return None
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"--model {path!r}: its tokenizer cannot be loaded ({reason}); this command needs one"
        ) from err


def _load_tensor_parallel(
    path, torch_dtype, device, allow_download, trust_remote_code, attn_implementation, need_tokenizer=True
):
    from transformers import AutoConfig

    from lookahead import distributed

    distributed.require_launcher("--tp")
    if device not in (None, "auto"):
        raise ValueError(f"--tp places each rank's shard on its own device; drop --device {device!r}")
    if path in (None, DEFAULT_MODEL):
        from lookahead.default_model import default_model_path

        path = str(default_model_path())
    config = AutoConfig.from_pretrained(
        os.path.expanduser(path), local_files_only=not allow_download, trust_remote_code=trust_remote_code
    )
    distributed.check_tp_shape(config, distributed.world_size())
    lm, tokenizer = _load_pretrained(
        path,
        torch_dtype,
        None,
        allow_download,
        trust_remote_code,
        attn_implementation,
        need_tokenizer,
        extra=distributed.tp_load_kwargs(),
    )
    return lm.eval(), tokenizer


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


def has_vocabulary(tokenizer, vocab_size: int | None = None) -> bool:
    """Whether ``tokenizer`` has an ordinary (not special) id below ``vocab_size``: transformers
    builds a tokenizer of special tokens only for a folder without tokenizer files."""
    if tokenizer is None:
        return False
    size = len(tokenizer) if vocab_size is None else min(len(tokenizer), int(vocab_size))
    special = {int(t) for t in getattr(tokenizer, "all_special_ids", ()) or () if 0 <= int(t) < size}
    return size - len(special) > 0
