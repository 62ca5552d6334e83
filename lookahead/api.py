"""The public entry points: ``generate`` and the ``custom_generate`` callable for transformers."""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicCache, StaticCache
from transformers.generation.stopping_criteria import StoppingCriteriaList, StopStringCriteria
from transformers.generation.utils import GenerateDecoderOnlyOutput

from lookahead import distributed
from lookahead.batch import batch_decode
from lookahead.config import LookaheadConfig
from lookahead.costmodel import CostCurve, cost_curve
from lookahead.decode import lookahead_decode
from lookahead.noise import NoiseStream
from lookahead.pool import NgramPool
from lookahead.static import StaticSteps, reusable_static_cache
from lookahead.stats import LookaheadStats
from lookahead.suffix import SuffixIndex
from lookahead.support import Unsupported, check_model, check_request
from lookahead.verify import GreedyRule, SamplingRule


@dataclass
class LookaheadDecoderOnlyOutput(GenerateDecoderOnlyOutput):
    """``GenerateDecoderOnlyOutput`` plus the call's ``lookahead_stats``."""

    lookahead_stats: LookaheadStats | None = None


def _check_inputs(inputs, kwargs) -> None:
    ids = inputs if inputs is not None else kwargs.get("input_ids")
    if ids is None:
        raise ValueError("input_ids must be given (as `inputs` or `input_ids=`): a LongTensor of shape [batch, length]")
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor of shape [batch, length], got {type(ids).__name__}")
    if ids.dtype not in (torch.long, torch.int32, torch.int64):
        raise TypeError(f"input_ids must hold integer token ids (torch.long), got dtype {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"input_ids must be 2-D [batch, length], got shape {tuple(ids.shape)}")
    if ids.shape[1] == 0:
        raise ValueError("input_ids must hold at least one token, got length 0")
    check_padding(ids, kwargs.get("attention_mask"))
    new = kwargs.get("max_new_tokens")
    if new is not None and (isinstance(new, bool) or not isinstance(new, int)):
        raise TypeError(f"max_new_tokens must be an int, got {type(new).__name__} {new!r}")
    if new is not None and new <= 0:
        raise ValueError(f"max_new_tokens must be > 0, got {new}")


def check_padding(input_ids: torch.Tensor, attention_mask) -> None:
    """Raise ``ValueError`` unless ``attention_mask`` is None or a ``[batch, length]`` mask
    like ``input_ids`` with any padding on the left."""
    if attention_mask is None:
        return
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__}")
    if tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise ValueError(
            f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
            f"got {tuple(attention_mask.shape)}"
        )
    if bool((attention_mask[:, -1] == 0).any()):
        rows = (attention_mask[:, -1] == 0).nonzero().reshape(-1).tolist()
        raise ValueError(
            f"attention_mask has right padding (rows {rows} end in 0); decoder-only generation "
            "needs left padding: set tokenizer.padding_side = 'left'"
        )


def generate(
    model,
    inputs: torch.Tensor | None = None,
    *,
    lookahead_config: LookaheadConfig | None = None,
    lookahead_stats: LookaheadStats | None = None,
    lookahead_pool: NgramPool | None = None,
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
        lookahead_pool: an ``NgramPool(ngram, guesses)`` to use and keep filling, so that
            what one request taught helps the next (the default is a fresh pool per call).
        lookahead_costs: a ``CostCurve``: what a forward over k tokens costs relative to one,
            which the adaptive controller weighs guesses against (for a batch of B rows: a
            forward over ``[B, k]`` against one over ``[B, 1]``). Default: measured once per
            model, dtype, device, thread count and batch size (about a second) and kept in
            ``~/.cache/lookahead/costs.json``; under ``torch.distributed`` rank 0's curve.
        lookahead_index: a ``SuffixIndex`` over a corpus (``lookahead index build``, then
            ``SuffixIndex.load(path)``) that the copy guess also drafts from: the code base a
            code assistant works in, say. It is only read, so processes may share one.
        generator: a ``torch.Generator`` for ``do_sample=True`` (default: torch's global RNG,
            which ``generate`` uses: under ``torch.manual_seed(s)`` the tokens are seeded
            ``model.generate``'s, batches included).

    ``cache_implementation="static"`` (or a ``StaticCache``) decodes one sequence on a static
    cache, compiled where ``generate`` would compile (``lookahead/static.py``).
    """
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if generator is not None:
        _check_generator_device(model, generator)
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
    _check_inputs(inputs, kwargs)
    _stop_strings_to_criteria(kwargs)
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


def _check_generator_device(model, generator: torch.Generator) -> None:
    """The noise is drawn where the logits are (the output embedding's device): a generator
    elsewhere would fail at the first sampled token, after the prefill."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    device = weight.device if weight is not None else next(model.parameters()).device
    if generator.device.type != device.type or (
        generator.device.index is not None and device.index is not None and generator.device.index != device.index
    ):
        raise ValueError(
            f"generator is on {generator.device}, but the model's logits are on {device}: make it there, "
            f"e.g. torch.Generator(device={str(device)!r}).manual_seed(seed)"
        )


def _check_pool(pool, config: LookaheadConfig) -> None:
    if not isinstance(pool, NgramPool):
        raise TypeError(f"lookahead_pool must be a lookahead.NgramPool, got {type(pool).__name__}")
    if (pool.ngram, pool.guesses) != (config.ngram, config.guesses):
        raise ValueError(
            f"lookahead_pool holds ngram={pool.ngram}, guesses={pool.guesses}, but lookahead_config has "
            f"ngram={config.ngram}, guesses={config.guesses}; they must match"
        )


def _check_index(index, model) -> None:
    if index is None:
        return
    if not isinstance(index, SuffixIndex):
        raise TypeError(
            f"lookahead_index must be a lookahead.SuffixIndex (SuffixIndex.load(path)), got {type(index).__name__}"
        )
    vocab = getattr(model.config, "vocab_size", None)
    if vocab and index.largest_id >= int(vocab):
        raise ValueError(
            f"lookahead_index holds token id {index.largest_id}, but the model has {vocab} ids: "
            "an index built with another tokenizer"
        )


def _stop_strings_to_criteria(kwargs: dict) -> None:
    """Turn ``stop_strings`` + ``tokenizer`` into a stopping criterion.

    transformers drops ``tokenizer`` before calling a ``custom_generate`` callable, so it
    would refuse ``stop_strings``; the criterion it would have built is built here instead.
    """
    tokenizer = kwargs.pop("tokenizer", None)
    stop = kwargs.pop("stop_strings", None)
    config = kwargs.get("generation_config")
    if stop is None and config is not None and config.stop_strings:
        stop = config.stop_strings
        kwargs["generation_config"] = config = copy.deepcopy(config)
        config.stop_strings = None
    if not stop:
        return
    if tokenizer is None:
        raise ValueError(f"stop_strings={stop!r} needs the model's tokenizer: pass tokenizer=")
    criteria = StoppingCriteriaList(kwargs.pop("stopping_criteria", None) or [])
    criteria.append(StopStringCriteria(tokenizer=tokenizer, stop_strings=stop))
    kwargs["stopping_criteria"] = criteria


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
    if lookahead_pool is not None:
        _check_pool(lookahead_pool, config)
        vocab = getattr(model.config, "vocab_size", None)
        if vocab:
            lookahead_pool.check_vocabulary(int(vocab))
    _check_index(lookahead_index, model)
    if lookahead_costs is not None and not isinstance(lookahead_costs, CostCurve):
        raise TypeError(f"lookahead_costs must be a lookahead.CostCurve, got {type(lookahead_costs).__name__}")
    check_request(generation_config)
    check_padding(input_ids, model_kwargs.get("attention_mask"))
    if streamer is not None and input_ids.shape[0] != 1:
        raise ValueError(
            f"streamer takes one sequence (as transformers' streamers do), but input_ids has "
            f"batch size {input_ids.shape[0]}; stream a batch of 1 or drop streamer="
        )
    try:
        check_model(model)
    except Unsupported as err:
        if config.on_unsupported == "error":
            raise
        warnings.warn(f"{err}; falling back to plain model.generate", stacklevel=3)
        return _fallback(
            model,
            input_ids,
            logits_processor,
            stopping_criteria,
            generation_config,
            streamer,
            stats,
            started,
            model_kwargs,
        )
    _drop_generate_only(model_kwargs)
    cache = model_kwargs.get("cache")
    if cache is not None and cache.get_seq_length() > 0:
        raise Unsupported(
            f"lookahead decoding starts from an empty cache; got one already holding {cache.get_seq_length()} tokens"
        )
    if cache is None:  # generate makes none for a config with use_cache=False; decoding needs one
        model_kwargs["cache"] = DynamicCache(config=model.config)
    keep_scores = bool(generation_config.return_dict_in_generate and generation_config.output_scores)
    keep_logits = bool(generation_config.return_dict_in_generate and generation_config.output_logits)
    if generation_config.do_sample:
        # one noise block per step for every row, as generate draws them
        rule = SamplingRule(logits_processor, lookahead_generator, NoiseStream(input_ids.shape[0], lookahead_generator))
    else:
        rule = GreedyRule(logits_processor, keep_rows=keep_scores or keep_logits)
    costs = _costs(model, config, lookahead_costs, input_ids.shape[0])
    static = _static_steps(model, input_ids, model_kwargs, generation_config, config)
    if static is not None:
        # compiled, the steps are priced by what each bucket measured (unless a curve was given,
        # the model is sharded: every rank must price alike, or a batch: measured for one row)
        rows = input_ids.shape[0]
        measure = costs is not None and lookahead_costs is None and not distributed.is_sharded(model) and rows == 1
        if rows == 1:  # a batch compiles each bucket at its first use
            static.prepare(calibrate=measure)
            stats.compiled_graphs += sorted(static.graphs)
            stats.warmup_s += static.warmup_s
        if costs is not None:
            costs = static.costs if measure and static.costs is not None else costs.bucketed(static.buckets)
    if input_ids.shape[0] > 1:
        sequences, scores, logits = batch_decode(
            model,
            input_ids,
            rule=rule,
            stopping_criteria=stopping_criteria,
            config=config,
            stats=stats,
            pool=lookahead_pool,
            attention_mask=model_kwargs.get("attention_mask"),
            keep_scores=keep_scores,
            keep_logits=keep_logits,
            costs=costs,
            index=lookahead_index,
            pad=_pad_token(generation_config),
            pad_after_stop=any(hasattr(c, "eos_token_id") for c in stopping_criteria),
            static=static,
        )
        return _output(generation_config, stats, started, sequences, scores, logits, None)
    if streamer is not None:
        streamer.put(input_ids.cpu())
    try:
        seq = lookahead_decode(
            model,
            input_ids,
            rule=rule,
            stopping_criteria=stopping_criteria,
            config=config,
            stats=stats,
            pool=lookahead_pool,
            costs=costs,
            static=static,
            index=lookahead_index,
            streamer=streamer,
            keep_scores=keep_scores,
            keep_logits=keep_logits,
            **model_kwargs,
        )
    finally:
        if streamer is not None:
            streamer.end()
    return _output(
        generation_config, stats, started, seq.ids.clone(), seq.scores, seq.logits, model_kwargs.get("cache")
    )


def _static_steps(model, input_ids, model_kwargs: dict, generation_config, config: LookaheadConfig):
    """Steps on a ``StaticCache`` when ``generate`` prepared one (``cache_implementation="static"``
    or a ``StaticCache`` passed in), compiled where ``generate`` would compile its forward; else None.

    The cache ``generate`` made holds ``max_length`` entries and sliding layers as ring buffers;
    lookahead replaces it by one with room for its widest step and full-length layers
    (lookahead.static), kept on the model for later calls as ``generate`` keeps its own (same
    shapes, so no recompilation), and ``model_kwargs["cache"]`` then holds it.
    """
    given = model_kwargs.get("cache")
    if not isinstance(given, StaticCache):
        return None
    longest = max(generation_config.max_length, generation_config.max_cache_len or 0)  # sized as generate sizes
    room = max(max(config.static_buckets), config.widest_step)  # a step wider than every bucket runs as it is
    cache = reusable_static_cache(model, longest + room, rows=input_ids.shape[0])
    model_kwargs["cache"] = cache
    compiled = None
    if model._valid_auto_compile_criteria({"cache": cache}, generation_config):
        compiled = model.get_compiled_call(generation_config.compile_config)
    return StaticSteps(model, cache, compiled, config.static_buckets, room)


def _output(generation_config, stats: LookaheadStats, started: float, sequences, scores, logits, cache):
    """What ``generate`` returns: the sequences, or the output object when asked for."""
    stats.total_s += time.perf_counter() - started
    if not generation_config.return_dict_in_generate:
        return sequences
    return LookaheadDecoderOnlyOutput(
        sequences=sequences,
        scores=tuple(scores) if scores is not None else None,
        logits=tuple(logits) if logits is not None else None,
        past_key_values=cache,
        lookahead_stats=stats,
    )


def _pad_token(generation_config) -> int | None:
    """The id ``generate`` fills finished rows with: the pad id, else the first EOS id (which
    ``generate`` puts in ``_pad_token_tensor`` before it calls any decoding method)."""
    pad = generation_config._pad_token_tensor
    return None if pad is None else int(pad)


def _costs(model, config: LookaheadConfig, given: CostCurve | None, rows: int) -> CostCurve | None:
    """The curve the adaptive controller needs (none when it is off), for batches of ``rows``."""
    if given is not None or not config.adaptive or config.method != "lookahead":
        return given
    return cost_curve(model, rows=rows)


def _drop_generate_only(model_kwargs: dict) -> None:
    """Remove what ``generate`` prepares for plain decoding and the decoder sets itself."""
    model_kwargs.pop("use_cache", None)
    model_kwargs.pop("logits_to_keep", None)
    unknown = set(model_kwargs) - {"attention_mask", "position_ids", "cache"}
    if unknown:
        raise Unsupported(f"lookahead decoding does not take the model inputs {sorted(unknown)}")


def _fallback(
    model, input_ids, logits_processor, stopping_criteria, generation_config, streamer, stats, started, model_kwargs
):
    """Plain decoding with transformers' own loop, for models lookahead cannot serve."""
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
    stats.total_s += time.perf_counter() - started
    return out
