"""Which models and settings lookahead decoding can serve exactly, and a probe for the rest."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache

from lookahead.compat import cache_keyword
from lookahead.runtime import attention

# Families whose attention was checked (by the property tests) to honour a custom additive
# 4D mask with explicit positions under both eager and sdpa (gemma2: eager only).
VERIFIED_FAMILIES = {
    "llama": ("eager", "sdpa"),
    "mistral": ("eager", "sdpa"),
    "qwen2": ("eager", "sdpa"),
    "qwen3": ("eager", "sdpa"),
    "gemma2": ("eager",),
    "gpt2": ("eager", "sdpa"),
    "gpt_neox": ("eager", "sdpa"),
    "phi": ("eager", "sdpa"),
    "phi3": ("eager", "sdpa"),
}
MASKABLE_BACKENDS = ("eager", "sdpa", attention.NAME)
# lookahead's own backend is sdpa (the same kernel under the same mask), verified where sdpa is
_VERIFIED_AS = {attention.NAME: "sdpa"}


class Unsupported(NotImplementedError):
    """The model or the request cannot be decoded exactly by lookahead decoding."""


def attention_backend(model) -> str:
    return str(getattr(model.config, "_attn_implementation", None) or "eager")


def check_model(model) -> None:
    """Raise ``Unsupported`` for models whose attention cannot take the step mask."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        raise Unsupported(f"lookahead decoding needs a decoder-only model; {config.model_type!r} is encoder-decoder")
    backend = attention_backend(model)
    if backend not in MASKABLE_BACKENDS:
        raise Unsupported(
            f"attention backend {backend!r} takes no custom 4D mask; load the model with "
            f"attn_implementation in {MASKABLE_BACKENDS}"
        )
    if _VERIFIED_AS.get(backend, backend) not in VERIFIED_FAMILIES.get(config.model_type, ()):
        probe(model)


def check_request(generation_config) -> None:
    """Raise ``Unsupported`` for generation settings lookahead decoding does not serve."""
    if generation_config.num_beams != 1:
        raise Unsupported(f"num_beams must be 1 for lookahead decoding, got {generation_config.num_beams}")
    if (generation_config.num_return_sequences or 1) != 1:
        raise Unsupported(
            f"num_return_sequences must be 1 for lookahead decoding, got {generation_config.num_return_sequences}"
        )
    guidance = getattr(generation_config, "guidance_scale", None)
    if guidance not in (None, 1, 1.0):
        raise Unsupported(f"guidance_scale is not supported by lookahead decoding, got {guidance}")


@torch.no_grad()
def probe(model) -> None:
    """Check on four tokens that the model honours a custom mask and explicit positions.

    Runs ``[a b c d]`` plainly, then ``[a b]`` followed by ``[c x d]`` where ``x`` is a decoy
    ``d`` must not see and ``d`` sits at position 3. The logits at ``d`` must agree.
    """
    try:
        with cache_keyword(model):
            plain, step = _probe_logits(model)
    except Exception as err:  # a model that cannot even run the probe cannot run lookahead steps
        raise Unsupported(
            f"model type {model.config.model_type!r} failed the custom-mask probe: {type(err).__name__}: {err}"
        ) from err
    tol = 1e-4 if model.dtype == torch.float32 else 5e-2
    if not torch.allclose(plain, step, atol=tol * max(1.0, float(plain.abs().max())), rtol=0):
        raise Unsupported(
            f"model type {model.config.model_type!r} under {attention_backend(model)!r} attention does not honour "
            "a custom 4D attention mask with explicit positions, so lookahead decoding could change its output"
        )


def _probe_logits(model) -> tuple[torch.Tensor, torch.Tensor]:
    device = model.device
    vocab = model.config.vocab_size
    a, b, c, d = (int(t) % vocab for t in (11, 23, 37, 41))
    plain = model(input_ids=torch.tensor([[a, b, c, d]], device=device), use_cache=False).logits[0, -1].float()
    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([[a, b]], device=device), cache=cache, use_cache=True)
    dtype = model.dtype
    blocked = torch.finfo(dtype).min
    mask = torch.zeros(1, 1, 3, 5, dtype=dtype, device=device)
    mask[..., 0, 3:] = blocked
    mask[..., 1, 4] = blocked
    mask[..., 2, 3] = blocked
    decoy = (c + 1) % vocab
    step = (
        model(
            input_ids=torch.tensor([[c, decoy, d]], device=device),
            position_ids=torch.tensor([[2, 3, 3]], device=device),
            attention_mask=mask,
            cache=cache,
            use_cache=True,
        )
        .logits[0, -1]
        .float()
    )
    return plain, step


def plain_generate(
    model, input_ids, logits_processor, stopping_criteria, generation_config, streamer, stats, **model_kwargs
):
    """Plain decoding with transformers' own loop, for models lookahead cannot serve: what
    ``generate`` returns, with ``stats`` counting one forward per new token."""
    if streamer is not None:
        streamer.put(input_ids.cpu())
    out = type(model)._sample(
        model,
        input_ids,
        logits_processor=logits_processor,
        stopping_criteria=stopping_criteria,
        generation_config=generation_config,
        streamer=streamer,
        **model_kwargs,
    )
    sequences = out if isinstance(out, torch.Tensor) else out.sequences
    stats.fallback = True
    new_tokens = sequences.shape[1] - input_ids.shape[1]
    stats.new_tokens += new_tokens * sequences.shape[0]
    stats.forwards += new_tokens
    stats.row_forwards += new_tokens * sequences.shape[0]
    return out
