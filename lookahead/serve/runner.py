"""One request's decoding: ``lookahead.generate`` with the kept pool, its checks and its log line.

transformers' ``GenerateManager`` calls ``model.generate(**inputs, streamer=..., generation_config=...,
tokenizer=...)`` on its inference thread. It is handed a :class:`LookaheadModel` instead of the
model: a view whose ``generate`` is :meth:`Runner.generate` and whose every other attribute is the
model's, so neither the model object nor any transformers global is changed.
"""

from __future__ import annotations

import copy
import logging
import time

from lookahead import support
from lookahead.compat import takes_cache_keyword
from lookahead.config import LookaheadConfig
from lookahead.drafts.suffix import SuffixIndex
from lookahead.serve.prefixes import PrefixCaches
from lookahead.serve.stats import RequestRecord, ServeStats
from lookahead.serve.store import PoolStore
from lookahead.stats import LookaheadStats
from lookahead.support import Unsupported

logger = logging.getLogger("lookahead.serve")


class BadRequest(ValueError):
    """A request the server refuses before decoding (the app answers 400 with the message,
    naming ``param``: the field that carried the setting)."""

    def __init__(self, message: str, param: str = "generation_config"):
        super().__init__(message)
        self.param = param


class RequestCancelled(Exception):
    """A non-streamed request whose client went away, stopped at its next token."""


class ClientWatch:
    """Stops a decode at its next token once ``gone`` is set (the client went away), by raising
    :class:`RequestCancelled`: as a streamer (lookahead's decode: ``put`` per token costs nothing
    besides the check) or as a stopping criterion (plain ``generate``, which takes no streamer
    for beams)."""

    def __init__(self, gone):
        self.gone = gone

    def put(self, _value) -> None:
        if self.gone.is_set():
            raise RequestCancelled()

    def end(self) -> None:
        pass

    def __call__(self, input_ids, _scores):
        import torch

        self.put(None)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class Runner:
    """What one server decodes with: the config, the kept pool's store, an optional corpus index,
    the cumulative stats, whether a request lookahead cannot serve runs plain ``generate``
    (``fallback``) or is refused (a 400 naming what is not supported), and the conversations'
    cache entries kept across requests (``prefixes``; none kept by default)."""

    def __init__(
        self,
        config: LookaheadConfig,
        store: PoolStore,
        stats: ServeStats,
        index: SuffixIndex | None = None,
        fallback: bool = False,
        threads: int | None = None,
        prefixes: PrefixCaches | None = None,
    ):
        self.config, self.store, self.stats, self.index = config, store, stats, index
        self.fallback, self.threads = fallback, threads
        self.prefixes = prefixes if prefixes is not None else PrefixCaches(0)

    def view(self, model, request_id: str, client_gone=None) -> LookaheadModel:
        """``model`` with this runner's ``generate``; ``client_gone``: an event set when the
        client of a non-streamed request went away (a streamed one's streamer says so)."""
        return LookaheadModel(model, self, request_id, client_gone)

    def check(self, gen_config) -> None:
        """:func:`check_request`, and unless ``fallback``, what lookahead does not decode (beams,
        several sequences, guidance): ``BadRequest`` naming it."""
        check_request(gen_config)
        if self.fallback:
            return
        settled = copy.copy(gen_config)  # unset (None) counts are generate's default, 1
        settled.num_beams = settled.num_beams or 1
        settled.num_return_sequences = settled.num_return_sequences or 1
        try:
            support.check_request(settled)
        except Unsupported as err:
            raise BadRequest(f"{err} (lookahead serve --fallback runs such requests with plain generate)") from err

    def generate(self, model, request_id: str, *args, client_gone=None, **kwargs):
        """``lookahead.generate(model, *args, **kwargs)`` with the kept pool and, where a kept
        cache holds the start of the prompt, that cache, on the calling (inference) thread; logs
        one line and adds to the stats however it ends. A cancelled request (the client went
        away: the streamer raised, or ``client_gone`` was set) stops at its next token and keeps
        what its committed tokens filed in the pool; its cache is dropped."""
        self.set_threads()
        stats = LookaheadStats()
        started = time.perf_counter()
        outcome, error = "ok", None
        cache, reused = self._starting_cache(model, args, kwargs)
        try:
            with self.store.lease() as pool:
                out, outcome = self._decode(model, pool, stats, args, kwargs, client_gone)
            if cache is not None and outcome == "ok":
                self.prefixes.keep(cache, getattr(out, "sequences", out)[0])
            return out
        except BaseException as err:
            outcome, error = _outcome(err)
            raise
        finally:
            ms = (time.perf_counter() - started) * 1000
            record = RequestRecord(request_id, outcome, stats, ms, error, reused)
            self.stats.add(record)
            logger.info(record.log_line())
            self.store.finished()

    def _starting_cache(self, model, args, kwargs) -> tuple[object | None, int]:
        """Where prefixes are kept and the request is one unpadded prompt without a cache of
        its own: a cache for it, put in ``kwargs`` (a kept one holding the prompt's start, else
        an empty one, kept once the request ends), and how many prompt tokens it holds."""
        ids, mask = kwargs.get("input_ids", args[0] if args else None), kwargs.get("attention_mask")
        own = any(kwargs.get(name) is not None for name in ("cache", "past_key_values"))
        if not self.prefixes.enabled or own or not hasattr(ids, "shape") or ids.dim() != 2 or ids.shape[0] != 1:
            return None, 0
        if mask is not None and not bool(mask.all()):
            return None, 0
        from transformers.cache_utils import DynamicCache

        cache, reused = self.prefixes.take(ids[0])
        if cache is None:
            cache = DynamicCache(config=model.config)
        kwargs["cache" if takes_cache_keyword(model) else "past_key_values"] = cache
        return cache, reused

    def _decode(self, model, pool, stats: LookaheadStats, args, kwargs, client_gone) -> tuple[object, str]:
        import lookahead

        watch = ClientWatch(client_gone) if client_gone is not None else None
        streamer = kwargs.get("streamer") or watch
        ending = EndsOnSuccess(streamer) if streamer is not None else None
        try:
            out = lookahead.generate(
                model,
                *args,
                lookahead_config=self.config,
                lookahead_stats=stats,
                lookahead_pool=pool,
                lookahead_index=self.index,
                **{**kwargs, **({"streamer": ending} if ending is not None else {})},
            )
        except Unsupported:
            if not self.fallback:
                raise
            plain = {k: v for k, v in kwargs.items() if k not in ("cache", "past_key_values")}
            if watch is not None:
                plain["stopping_criteria"] = [*(plain.get("stopping_criteria") or []), watch]
            return _plain(model, stats, args, plain), "fallback"
        if ending is not None:
            ending.finish()
        return out, "ok"

    def set_threads(self) -> None:
        """``--threads`` on the inference thread itself (OpenMP's count is per thread)."""
        if self.threads:
            import torch

            if torch.get_num_threads() != self.threads:
                torch.set_num_threads(self.threads)


class EndsOnSuccess:
    """A streamer whose ``end()`` reaches the server's streamer only once the decode returned.

    ``lookahead.generate`` ends its streamer however the decode stops, errors included, and
    transformers' server reads an ended stream as a finished answer: a request that failed
    mid-stream would look whole. ``generate`` itself never ends a stream it did not finish, and
    the server then streams the error; so does this."""

    def __init__(self, streamer):
        self.streamer, self.ended = streamer, False

    def put(self, value) -> None:
        self.streamer.put(value)

    def end(self) -> None:
        self.ended = True

    def finish(self) -> None:
        if self.ended:
            self.streamer.end()


class LookaheadModel:
    """``model`` as transformers' ``GenerateManager`` sees it: ``generate`` decodes with lookahead
    (:meth:`Runner.generate`), every other attribute is the model's own."""

    def __init__(self, model, runner: Runner, request_id: str, client_gone=None):
        self._model, self._runner, self._request_id, self._client_gone = model, runner, request_id, client_gone

    def generate(self, *args, **kwargs):
        return self._runner.generate(self._model, self._request_id, *args, client_gone=self._client_gone, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._model, name)


def check_request(gen_config) -> None:
    """``BadRequest`` for generation settings no decoding can serve, before the request reaches
    the inference thread (so that a streamed request gets a 400 too, not an error inside a 200
    stream). The body's own fields are checked before (``checks.check_body``); these are what a
    ``generation_config`` brings."""
    new = gen_config.max_new_tokens
    if new is not None and (isinstance(new, bool) or not isinstance(new, int) or new < 1):
        raise BadRequest(f"max_new_tokens must be an integer >= 1, got {new!r}")
    temperature, top_p = gen_config.temperature, gen_config.top_p
    if temperature is not None and not temperature >= 0:  # `not >=`: NaN is out of range too
        raise BadRequest(f"temperature must be >= 0, got {temperature!r}")
    if top_p is not None and not 0 < top_p <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p!r}")
    try:
        copy.deepcopy(gen_config).validate()
    except ValueError as err:
        raise BadRequest(f"generation settings: {err}") from err


def _plain(model, stats: LookaheadStats, args, kwargs):
    """The model's own ``generate`` (``--fallback``), its new tokens counted in ``stats``."""
    out = type(model).generate(model, *args, **kwargs)
    sequences = getattr(out, "sequences", out)
    prompt = kwargs.get("input_ids", args[0] if args else None)
    if prompt is not None and hasattr(sequences, "shape"):
        stats.new_tokens = int(sequences.shape[-1] - prompt.shape[-1]) * int(sequences.shape[0])
    stats.fallback = True
    return out


def _outcome(err: BaseException) -> tuple[str, str | None]:
    """How a request that raised ended: ``cancelled`` when its client went away (the server's
    streamer or :class:`ClientWatch` stopped it), else ``failed`` with the error's first line."""
    if isinstance(err, RequestCancelled) or type(err).__name__ == "_GenerationCancelled":  # transformers', by name
        return "cancelled", None
    text = str(err).strip().splitlines()
    return "failed", f"{type(err).__name__}: {text[0] if text else ''}"
