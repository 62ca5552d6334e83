"""An opt-in attention backend: transformers' sdpa without ``repeat_kv`` on masked GQA steps.

A lookahead step feeds many tokens under a 4D mask. There transformers' ``sdpa`` backend turns
its grouped-query support off (``use_gqa_in_sdpa`` wants no mask) and ``repeat_kv`` copies
every layer's whole past keys and values up to the query heads' count, on every step. On the
CPU, ``scaled_dot_product_attention(..., enable_gqa=True)`` takes the mask and shares each KV
head among its query heads without the copy (``benchmarks/gqa_attention.py``: identical logits,
1.01-1.24x per masked step of a GQA Llama on this project's CPU, more with longer contexts;
1.02x per whole decode).

Everything else (one-token steps, steps without a mask, models without GQA, other devices,
position biases) goes to transformers' own ``sdpa_attention_forward`` unchanged: on CUDA masked
GQA falls back to sdpa's math kernel, which may well lose to ``repeat_kv`` and an efficient
kernel, so that split waits for a GPU measurement.

transformers picks a model's attention by the name in ``config._attn_implementation``, looked
up in its ``AttentionInterface`` (and its mask builder in ``AttentionMaskInterface``). So this
backend is opt-in and registered only when asked::

    name = lookahead.register_attention()  # "lookahead_sdpa"
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=name)
    # or, for a loaded model: model.set_attn_implementation(name)

``model.generate`` then runs the same function, so lookahead's output still equals it token
for token (and it equals the ``sdpa`` model's logits: same kernel, same mask, no copy).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.utils.import_utils import is_torch_greater_or_equal

NAME = "lookahead_sdpa"
_ENABLE_GQA = is_torch_greater_or_equal("2.5")  # sdpa's enable_gqa came with torch 2.5


def register_attention() -> str:
    """Register this backend with transformers (idempotent) and return its name, for
    ``from_pretrained(attn_implementation=...)`` or ``model.set_attn_implementation(...)``.
    Masks are built as for ``sdpa``."""
    AttentionInterface.register(NAME, gqa_sdpa_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def gqa_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: query ``[b, h, q, d]``, key and value
    ``[b, h_kv, k, d]``, mask ``[b | 1, 1, q, k]`` (additive or bool) or None; returns
    ``([b, q, h, d], None)``. Masked multi-token GQA steps on the CPU attend with
    ``enable_gqa`` (torch >= 2.5); every other call is ``sdpa_attention_forward``'s."""
    groups = getattr(module, "num_key_value_groups", 1)
    if (
        groups == 1
        or not _ENABLE_GQA
        or attention_mask is None
        or query.shape[2] == 1
        or query.device.type != "cpu"
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
        or torch.jit.is_tracing()
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None
