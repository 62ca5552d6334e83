"""transformers versions whose models name the cache keyword differently.

From transformers 5.2x a model's ``forward`` takes its cache as ``cache=`` (``past_key_values=``
is deprecated there); 5.19 (the version vLLM 0.32 brings) only knows ``past_key_values=``,
and a ``cache=`` it does not know is swallowed by ``**kwargs`` and ignored: the forward would
silently run without a cache. Lookahead's steps pass ``cache=``; :func:`cache_keyword`
renames it, for the calls made inside it, on models that take ``past_key_values`` only.
The cache object and every tensor stay the same, so the tokens stay exact.
"""

from __future__ import annotations

import dataclasses
import inspect
from contextlib import contextmanager

OLD_KEYWORD = "past_key_values"


def takes_cache_keyword(model) -> bool:
    """True when ``model.forward`` takes ``cache=`` (transformers >= 5.2x), False when it takes
    ``past_key_values=`` only (5.19)."""
    params = inspect.signature(model.forward).parameters
    return "cache" in params or OLD_KEYWORD not in params


def _rename(module, args, kwargs):
    """Forward pre-hook: ``cache=`` becomes ``past_key_values=``."""
    if "cache" in kwargs:
        kwargs[OLD_KEYWORD] = kwargs.pop("cache")
    return args, kwargs


@contextmanager
def cache_keyword(model):
    """Inside, ``model(..., cache=c)`` reaches a model that takes ``past_key_values`` only as
    ``past_key_values=c`` (a forward pre-hook, removed on exit); on a model that takes
    ``cache=`` this does nothing."""
    if takes_cache_keyword(model):
        yield
        return
    handle = model.register_forward_pre_hook(_rename, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def accept_cache_keyword(model):
    """Make ``model`` take ``cache=`` for good (:func:`cache_keyword`'s hook, never removed; once
    per model): for code that calls a model directly, as tests of lookahead's internals do.
    Returns the model."""
    if not takes_cache_keyword(model) and not model.__dict__.get("_lookahead_cache_keyword"):
        model.register_forward_pre_hook(_rename, with_kwargs=True)
        model.__dict__["_lookahead_cache_keyword"] = True
    return model


def rename_cache_input(model_kwargs: dict) -> None:
    """``generate``'s prepared inputs carry the cache as ``past_key_values`` on 5.19 and as
    ``cache`` from 5.2x: name it ``cache``, as lookahead's decoding reads it."""
    if OLD_KEYWORD in model_kwargs:
        past = model_kwargs.pop(OLD_KEYWORD)
        if model_kwargs.get("cache") is None:
            model_kwargs["cache"] = past


def output_cache_field(output_class) -> str:
    """The field of ``output_class`` (a ``GenerateDecoderOnlyOutput``) holding the cache:
    ``cache`` from 5.2x, ``past_key_values`` on 5.19."""
    return "cache" if "cache" in {field.name for field in dataclasses.fields(output_class)} else OLD_KEYWORD
