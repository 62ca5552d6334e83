"""The checks of ``lookahead.generate``'s arguments: each bad value gets a ``TypeError`` or
``ValueError`` that names it, before any work is done."""

from __future__ import annotations

import copy
import warnings

import torch
from transformers.generation.stopping_criteria import StoppingCriteriaList, StopStringCriteria

from lookahead import files
from lookahead.config import LookaheadConfig
from lookahead.drafts.kept import KeptState
from lookahead.drafts.pool import NgramPool
from lookahead.drafts.suffix import SuffixIndex
from lookahead.step.costmodel import CostCurve


def check_inputs(inputs, kwargs) -> None:
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


def check_generator_device(model, generator: torch.Generator) -> None:
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


def kept_state(pool) -> KeptState | None:
    """``lookahead_pool=`` as a ``KeptState``: itself, or for an ``NgramPool`` (what lookahead
    0.1 kept across calls), with a ``DeprecationWarning``, the state made for that pool at its
    first use and kept on it, so that its history and what the budget learnt still carry from
    call to call."""
    if pool is None or isinstance(pool, KeptState):
        return pool
    if not isinstance(pool, NgramPool):
        raise TypeError(f"lookahead_pool must be a lookahead.KeptState, got {type(pool).__name__}")
    warnings.warn(
        "lookahead_pool=NgramPool(...) is deprecated: pass a lookahead.KeptState, which keeps the n-grams, "
        "the finished texts, the successors and what the draft budget learnt (KeptState(pool) wraps this pool)",
        DeprecationWarning,
        stacklevel=3,
    )
    if "_kept" not in pool.__dict__:  # the pool's own state, for every later call it is passed to
        pool.__dict__["_kept"] = KeptState(pool)
    return pool.__dict__["_kept"]


def check_kept(kept: KeptState, config: LookaheadConfig) -> None:
    pool = kept.pool
    if config.uses_pool and pool is not None and (pool.ngram, pool.guesses) != (config.ngram, config.guesses):
        raise ValueError(
            f"lookahead_pool holds ngram={pool.ngram}, guesses={pool.guesses}, but lookahead_config has "
            f"ngram={config.ngram}, guesses={config.guesses}; they must match"
        )


def check_index(index, model) -> None:
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


def check_tokenizer(tokenizer, pool, index) -> None:
    """With ``tokenizer`` (``generate``'s ``tokenizer=``), a pool or index made with another
    tokenizer is a ``ValueError``: its ids would be another vocabulary's, and a vocabulary of the
    same size passes every bounds check. One whose tokenizer is unknown (made in memory, or
    saved without one) is marked with this one, so that a later call with another is refused."""
    if tokenizer is None:
        return
    for name, held in (("lookahead_pool", pool), ("lookahead_index", index)):
        if not isinstance(held, (KeptState, SuffixIndex)):
            continue  # None, or a wrong type that check_decoding names
        mine = files.fingerprint_of(tokenizer)
        if not held.vocabulary:
            held.vocabulary = mine
        elif held.vocabulary != mine:
            raise ValueError(
                f"{name} was made with another tokenizer (vocabulary {held.vocabulary}; tokenizer= has {mine}): "
                "its drafts would be another vocabulary's ids. Use one made with this tokenizer"
            )


def check_decoding(model, input_ids, attention_mask, config: LookaheadConfig, kept: KeptState | None, index) -> None:
    """What ``custom_generate`` is handed besides ``generate``'s own arguments: a kept state
    that matches the config and the model's vocabulary, an index of that vocabulary, left
    padding."""
    if kept is not None:
        check_kept(kept, config)
        vocab = getattr(model.config, "vocab_size", None)
        if vocab:
            kept.check_vocabulary(int(vocab))
    check_index(index, model)
    check_padding(input_ids, attention_mask)


def check_costs(costs) -> None:
    if costs is not None and not isinstance(costs, CostCurve):
        raise TypeError(f"lookahead_costs must be a lookahead.CostCurve, got {type(costs).__name__}")


def check_streamer(streamer, input_ids) -> None:
    if streamer is not None and input_ids.shape[0] != 1:
        raise ValueError(
            f"streamer takes one sequence (as transformers' streamers do), but input_ids has "
            f"batch size {input_ids.shape[0]}; stream a batch of 1 or drop streamer="
        )


def stop_strings_to_criteria(kwargs: dict) -> None:
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
