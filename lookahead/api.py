"""The public entry points: ``generate`` and the ``custom_generate`` callable for transformers."""

from __future__ import annotations

import functools
import time
import warnings
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicCache
from transformers.generation.utils import GenerateDecoderOnlyOutput

from lookahead import classic, distributed
from lookahead.arguments import (
    check_costs,
    check_decoding,
    check_generator_device,
    check_inputs,
    check_streamer,
    check_tokenizer,
    kept_state,
    stop_strings_to_criteria,
)
from lookahead.compat import cache_keyword, output_cache_field, rename_cache_input
from lookahead.config import LookaheadConfig
from lookahead.drafts.kept import KeptState
from lookahead.drafts.suffix import SuffixIndex
from lookahead.runtime.calibration import cost_curve
from lookahead.runtime.sdpa import without_cudnn
from lookahead.runtime.static import ready, static_steps
from lookahead.stats import LookaheadStats
from lookahead.step.costmodel import CostCurve
from lookahead.step.loop import decode
from lookahead.support import Unsupported, check_model, check_request, plain_generate
from lookahead.verify.rules import rule_for
from lookahead.warmup import warm_kernels


@dataclass
class LookaheadDecoderOnlyOutput(GenerateDecoderOnlyOutput):
    """``GenerateDecoderOnlyOutput`` plus the call's ``lookahead_stats``."""

    lookahead_stats: LookaheadStats | None = None


def generate(
    model,
    inputs: torch.Tensor | None = None,
    *,
    lookahead_config: LookaheadConfig | None = None,
    lookahead_stats: LookaheadStats | None = None,
    lookahead_pool: KeptState | None = None,
    lookahead_costs: CostCurve | None = None,
    lookahead_index: SuffixIndex | None = None,
    streamer=None,
    generator: torch.Generator | None = None,
    **kwargs,
):
    """Generate like ``model.generate``, with lookahead decoding.

    Takes what ``model.generate`` takes (``input_ids``/``inputs``, ``attention_mask``,
    ``max_new_tokens``, ``generation_config``, ``logits_processor``, ``stopping_criteria``,
    ``stop_strings`` with ``tokenizer``, ``streamer``, ``return_dict_in_generate`` ...) and
    returns what it returns: the same tokens as greedy decoding. Extra keywords:

    Args:
        lookahead_config: window, n-gram and guess sizes (default ``LookaheadConfig()``).
        lookahead_stats: a ``LookaheadStats`` to fill with forwards, tokens per forward,
            accepted-length histogram, pool hits and timings. With
            ``return_dict_in_generate=True`` the output also carries them.
        lookahead_pool: a ``KeptState`` to use and keep filling, so that what one request
            taught helps the next: its n-grams, finished texts, recycled successors and the
            draft budget's learnt chances (the default is a fresh one per call).
        lookahead_costs: a ``CostCurve``: what a forward over k tokens costs relative to one,
            which the draft budget weighs guesses against (for a batch of B rows: a
            forward over ``[B, k]`` against one over ``[B, 1]``). Default: measured once per
            model, dtype, device, thread count and batch size (about a second) and kept in
            ``~/.cache/lookahead/costs.json``; under ``torch.distributed`` rank 0's curve.
        lookahead_index: a ``SuffixIndex`` over a corpus (``lookahead index build``, then
            ``SuffixIndex.load(path)``) that the copy guess also drafts from: the code base a
            code assistant works in, say. It is only read, so processes may share one.
            With ``tokenizer=``, a kept state or index made with another tokenizer (its
            fingerprint, ``.vocabulary``, differs) is a ``ValueError``.
        generator: a ``torch.Generator`` for ``do_sample=True`` (default: torch's global RNG,
            which ``generate`` uses: under ``torch.manual_seed(s)`` the tokens are seeded
            ``model.generate``'s, batches included).

    ``cache_implementation="static"`` (or a ``StaticCache``) decodes one sequence on a static
    cache, compiled where ``generate`` would compile (``lookahead/step/static.py``).
    """
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if generator is not None:
        check_generator_device(model, generator)
    if lookahead_config is None:
        lookahead_config = LookaheadConfig()
    if not isinstance(lookahead_config, LookaheadConfig):
        raise TypeError(f"lookahead_config must be a LookaheadConfig, got {type(lookahead_config).__name__}")
    if lookahead_stats is not None and not isinstance(lookahead_stats, LookaheadStats):
        raise TypeError(f"lookahead_stats must be a LookaheadStats, got {type(lookahead_stats).__name__}")
    for name in ("assistant_model", "prompt_lookup_num_tokens"):
        if kwargs.get(name) is not None:
            raise Unsupported(
                f"{name} is not supported by lookahead.generate: it brings its own guesses "
                "(the pool, the window and the copy guess, see LookaheadConfig)"
            )
    if "custom_generate" in kwargs:
        raise ValueError("custom_generate cannot be combined with lookahead.generate, which sets it")
    check_inputs(inputs, kwargs)
    lookahead_pool = kept_state(lookahead_pool)
    check_tokenizer(kwargs.get("tokenizer"), lookahead_pool, lookahead_index)
    stop_strings_to_criteria(kwargs)
    return model.generate(
        inputs,
        custom_generate=custom_generate,
        lookahead_config=lookahead_config,
        lookahead_stats=lookahead_stats,
        lookahead_pool=lookahead_pool,
        lookahead_costs=lookahead_costs,
        lookahead_index=lookahead_index,
        lookahead_streamer=streamer,
        lookahead_generator=generator,
        **kwargs,
    )


def _cache_keyword(decode):
    """Run ``decode(model, ...)`` with the model taking ``cache=`` whatever its transformers
    version calls it (``lookahead.compat``)."""

    @functools.wraps(decode)
    def wrapped(model, *args, **kwargs):
        with cache_keyword(model):
            return decode(model, *args, **kwargs)

    return wrapped


@_cache_keyword
def custom_generate(
    model,
    input_ids,
    logits_processor,
    stopping_criteria,
    generation_config,
    synced_gpus=False,
    streamer=None,
    lookahead_config=None,
    lookahead_stats=None,
    lookahead_pool=None,
    lookahead_costs=None,
    lookahead_index=None,
    lookahead_streamer=None,
    lookahead_generator=None,
    **model_kwargs,
):
    """Decoding method for ``model.generate(..., custom_generate=lookahead.custom_generate)``.

    transformers prepares processors, stopping criteria and an empty cache, then calls this.
    On this path transformers drops ``streamer`` and ``tokenizer``: pass the streamer as
    ``lookahead_streamer=``, and stop strings as a ``StopStringCriteria`` in
    ``stopping_criteria=`` (``lookahead.generate`` does both for you).
    """
    started = time.perf_counter()
    config = lookahead_config if lookahead_config is not None else LookaheadConfig()
    stats = lookahead_stats if lookahead_stats is not None else LookaheadStats()
    streamer = lookahead_streamer if lookahead_streamer is not None else streamer
    kept = kept_state(lookahead_pool)
    check_decoding(model, input_ids, model_kwargs.get("attention_mask"), config, kept, lookahead_index)
    check_costs(lookahead_costs)
    check_streamer(streamer, input_ids)
    check_request(generation_config)
    try:
        check_model(model)
    except Unsupported as err:
        if config.on_unsupported == "error":
            raise
        warnings.warn(f"{err}; falling back to plain model.generate", stacklevel=3)
        out = plain_generate(
            model, input_ids, logits_processor, stopping_criteria, generation_config, streamer, stats, **model_kwargs
        )
        stats.total_s += time.perf_counter() - started
        return out
    _drop_generate_only(model_kwargs)
    _starting_cache(model, model_kwargs, input_ids)
    stats.warmup_s += warm_kernels()  # before the prefill: no step waits for a compile
    keep_scores = bool(generation_config.return_dict_in_generate and generation_config.output_scores)
    keep_logits = bool(generation_config.return_dict_in_generate and generation_config.output_logits)
    rows = input_ids.shape[0]
    rule = rule_for(generation_config, logits_processor, lookahead_generator, rows, keep_scores or keep_logits)
    if streamer is not None:
        streamer.put(input_ids.cpu())
    try:
        with without_cudnn(model, config.cudnn_attention):  # calibration and decode alike
            costs = _costs(model, config, lookahead_costs, rows)
            static = static_steps(model, input_ids, model_kwargs, generation_config, config)
            if static is not None:
                given, sharded = lookahead_costs is not None, distributed.is_sharded(model)
                costs = ready(static, costs, rows, given=given, sharded=sharded, stats=stats)
            sequences, scores, logits, cache = decode(
                model,
                input_ids,
                attention_mask=model_kwargs.get("attention_mask"),
                position_ids=model_kwargs.get("position_ids"),
                cache=model_kwargs.get("cache"),
                rule=rule,
                stopping_criteria=stopping_criteria,
                config=config,
                stats=stats,
                kept=kept if kept is not None else KeptState(),
                costs=costs,
                static=static,
                index=lookahead_index,
                pad=_pad_token(generation_config),
                pad_after_stop=any(hasattr(c, "eos_token_id") for c in stopping_criteria),
                keep_scores=keep_scores,
                keep_logits=keep_logits,
                streamer=streamer,
                proposers=classic.proposer_for if config.classic else None,
            )
    finally:
        if streamer is not None:
            streamer.end()
    return _output(generation_config, stats, started, sequences, scores, logits, cache)


def _output(generation_config, stats: LookaheadStats, started: float, sequences, scores, logits, cache):
    """What ``generate`` returns: the sequences, or the output object when asked for."""
    stats.total_s += time.perf_counter() - started
    if not generation_config.return_dict_in_generate:
        return sequences
    return LookaheadDecoderOnlyOutput(
        sequences=sequences,
        scores=tuple(scores) if scores is not None else None,
        logits=tuple(logits) if logits is not None else None,
        lookahead_stats=stats,
        **{output_cache_field(LookaheadDecoderOnlyOutput): cache},
    )


def _pad_token(generation_config) -> int | None:
    """The id ``generate`` fills finished rows with: the pad id, else the first EOS id (which
    ``generate`` puts in ``_pad_token_tensor`` before it calls any decoding method)."""
    pad = generation_config._pad_token_tensor
    return None if pad is None else int(pad)


def _costs(model, config: LookaheadConfig, given: CostCurve | None, rows: int) -> CostCurve | None:
    """The curve the draft budget needs (none for the classic shape), for batches of ``rows``."""
    if given is not None or config.classic:
        return given
    return cost_curve(model, rows=rows)


def _starting_cache(model, model_kwargs: dict, input_ids: torch.Tensor) -> None:
    """The cache decoding starts from: ``generate``'s (empty), a new one where the config asks
    for none (``use_cache=False``), since lookahead's steps need one, or the caller's
    ``DynamicCache`` holding a prefix of the prompt (as ``generate`` takes one to reuse a shared
    prompt's entries): the prefill then runs only the tokens after it. That prefix must be
    shorter than the prompt of a single sequence; which tokens it holds is the caller's word,
    as for ``generate``."""
    cache = model_kwargs.get("cache")
    if cache is None:
        model_kwargs["cache"] = DynamicCache(config=model.config)
        return
    held = cache.get_seq_length()
    if held == 0:
        return
    rows, length = input_ids.shape
    if type(cache) is not DynamicCache or rows != 1 or held >= length:
        raise Unsupported(
            "lookahead decoding starts from an empty cache, or from a DynamicCache holding a prefix "
            f"of a single prompt; got a {type(cache).__name__} already holding {held} tokens "
            f"for input_ids of shape {tuple(input_ids.shape)}"
        )


def _drop_generate_only(model_kwargs: dict) -> None:
    """Remove what ``generate`` prepares for plain decoding and the decoder sets itself."""
    rename_cache_input(model_kwargs)  # transformers 5.19 passes the cache as past_key_values
    model_kwargs.pop("use_cache", None)
    model_kwargs.pop("logits_to_keep", None)
    unknown = set(model_kwargs) - {"attention_mask", "position_ids", "cache"}
    if unknown:
        raise Unsupported(f"lookahead decoding does not take the model inputs {sorted(unknown)}")
