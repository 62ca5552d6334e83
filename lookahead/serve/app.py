"""The app ``lookahead serve`` runs: transformers' own, assembled as ``transformers serve`` assembles
it (``transformers/cli/serve.py``), with lookahead's managers and text handlers, the gate in front
(API key, request size, disconnects), OpenAI-shaped errors and ``GET /lookahead/stats``; and the
server's run, with the kept pool saved when it stops.

``build_app(options, lookahead=False)`` assembles the same app with transformers' plain managers:
the reference the tests and ``benchmarks/serve_bench.py`` compare every answer with.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lookahead import files
from lookahead.config import LookaheadConfig
from lookahead.serve import errors
from lookahead.serve.gate import Gate
from lookahead.serve.prefixes import PrefixCaches
from lookahead.serve.runner import Runner
from lookahead.serve.stats import ServeStats
from lookahead.serve.store import PoolStore, load_pool, new_pool

logger = logging.getLogger("lookahead.serve")
WARMUP_TOKENS = 8  # a start-up decode: compiles the kernels and measures the cost curve


@dataclass
class ServeOptions:
    """What ``lookahead serve`` was asked for (the command checks the values first).

    ``model_dir``: a local model folder (safetensors weights); ``keep_pool``: one pool across
    requests (False: a fresh one per request); ``pool_path``: where it is loaded from and saved to
    every ``save_every`` requests and at shutdown; ``index_path``: a corpus index for the copy
    drafts; ``fallback``: run what lookahead cannot decode (beams) with plain ``generate``
    instead of answering 400; ``warmup``: decode a few tokens before serving, so that the first
    request does not pay for the kernels' compile and the cost curve; ``prefix_cache_mib``: the
    cache entries kept of recent requests (a later prompt starting with one prefills only the
    rest; 0 keeps none, as does ``keep_pool=False``); ``max_request_bytes``: the largest body
    taken (a larger one is a 413 before it is read); ``api_key``: the key every route but
    ``/health`` needs (None: none); ``served_model_names``: what ``/v1/models`` lists and
    requests may name (empty: ``model_dir`` as given)."""

    model_dir: str
    dtype: str = "float32"
    device: str = "cpu"
    trust_remote_code: bool = False
    config: LookaheadConfig = field(default_factory=LookaheadConfig)
    keep_pool: bool = True
    pool_path: str | None = None
    save_every: int = 16
    index_path: str | None = None
    fallback: bool = False
    threads: int | None = None
    warmup: bool = True
    prefix_cache_mib: int = 256
    max_request_bytes: int = 4 << 20
    api_key: str | None = None
    served_model_names: tuple[str, ...] = ()


@dataclass
class Served:
    """An assembled app and its parts: ``runner`` is None for the plain app."""

    app: object
    model_manager: object
    runner: Runner | None


def load_state(options: ServeOptions) -> Runner:
    """The kept pool (``--pool``), the index (``--index``) and the runner, read and checked
    before the model loads: a bad file is a ``ValueError`` within a second, not after it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        options.model_dir, local_files_only=True, trust_remote_code=options.trust_remote_code
    )
    pool = None
    if options.keep_pool:
        path, config = options.pool_path, options.config
        pool = load_pool(path, config, tokenizer) if path else new_pool(config)
        pool.vocabulary = pool.vocabulary or files.fingerprint_of(tokenizer)
    index = None
    if options.index_path is not None:
        from lookahead.drafts.suffix import SuffixIndex

        index = SuffixIndex.load(options.index_path, len(tokenizer), tokenizer=tokenizer)
    store = PoolStore(pool, options.pool_path, tokenizer, options.save_every)
    prefixes = PrefixCaches(options.prefix_cache_mib << 20 if options.keep_pool else 0)
    return Runner(options.config, store, ServeStats(), index, options.fallback, options.threads, prefixes)


def build_app(options: ServeOptions, lookahead: bool = True, runner: Runner | None = None) -> Served:
    """transformers' app for ``options.model_dir``: with lookahead's managers and handlers
    (``runner``, or the one :func:`load_state` makes) behind the gate or, with
    ``lookahead=False``, exactly its plain ones."""
    from transformers.cli.serving.chat_completion import ChatCompletionHandler
    from transformers.cli.serving.completion import CompletionHandler
    from transformers.cli.serving.response import ResponseHandler
    from transformers.cli.serving.server import build_server
    from transformers.cli.serving.systemone import SystemOneHandler
    from transformers.cli.serving.transcription import TranscriptionHandler
    from transformers.cli.serving.utils import GenerationState

    from lookahead.serve.managers import LookaheadGenerationState, PinnedModelManager

    if lookahead and runner is None:
        runner = load_state(options)
    models = PinnedModelManager(
        device=options.device,
        dtype=options.dtype,
        trust_remote_code=options.trust_remote_code,
        force_model=options.model_dir,
        names=options.served_model_names if lookahead else (),
    )
    state = LookaheadGenerationState(runner) if lookahead else GenerationState(continuous_batching=False)
    common = {"model_manager": models, "generation_state": state}
    text = {"chat": ChatCompletionHandler, "completions": CompletionHandler, "responses": ResponseHandler}
    if lookahead:
        text = _served_handlers(models.names)
    app = build_server(
        models,
        text["chat"](**common),
        completion_handler=text["completions"](**common),
        response_handler=text["responses"](**common),
        transcription_handler=TranscriptionHandler(models, state),
        systemone_handler=SystemOneHandler(**common),
        generation_state=state,
    )
    if lookahead:
        _add_routes(app, models, runner)
        errors.install(app)
        app.add_middleware(Gate, max_request_bytes=options.max_request_bytes, api_key=options.api_key)
        if options.warmup:
            manager = state.get_manager(models.process_model_name(options.model_dir))
            manager.submit(warm_up, models, options.model_dir, runner).result()
    return Served(app, models, runner if lookahead else None)


def _served_handlers(names: tuple[str, ...]) -> dict:
    """lookahead's text handlers (``handlers``), bound to the served names and one tokenizing
    thread they share."""
    from functools import partial

    from lookahead.serve.handlers import ServedChat, ServedCompletions, ServedResponses

    served = {"names": names, "tokenizing": ThreadPoolExecutor(1, thread_name_prefix="lookahead-tokenize")}
    handlers = {"chat": ServedChat, "completions": ServedCompletions, "responses": ServedResponses}
    return {endpoint: partial(handler, **served) for endpoint, handler in handlers.items()}


def _add_routes(app, models, runner: Runner) -> None:
    """``GET /lookahead/stats``."""
    from fastapi.responses import JSONResponse

    @app.get("/lookahead/stats")
    def lookahead_stats():
        return JSONResponse(stats_document(models, runner))


def stats_document(models, runner: Runner) -> dict:
    """The JSON of ``GET /lookahead/stats``: the cumulative counts, the pool (its file's name,
    never a path on the server), the config."""
    loaded = [timed.model for timed in list(models.loaded_models.values()) if timed.model is not None]
    vocab = int(getattr(loaded[0].config, "vocab_size", 0) or 0) if loaded else 0
    config = runner.config
    return {
        **runner.stats.as_dict(),
        "pool": runner.store.describe(vocab, config.successors if config.uses_successors else 0),
        "prefixes": runner.prefixes.describe(),
        "config": {"window": config.window, "ngram": config.ngram, "guesses": config.guesses},
        "fallback": runner.fallback,
    }


def warm_up(models, model_dir: str, runner: Runner) -> None:
    """Decode a few greedy tokens with a throwaway pool before serving: the kernels compile and
    the cost curve is measured now, not in the first request (no seed is drawn from; the kept
    pool and the stats are untouched). A model lookahead cannot decode is a ``ValueError`` (exit
    status 2) unless ``fallback``, which then serves every request with plain ``generate``.

    It runs on the inference thread that decodes the requests (:func:`build_app` submits it
    there), never on the main thread: GNU OpenMP keeps a team of threads for every thread that
    ran a parallel region, and with more of its threads alive than cores it stops spinning
    between regions, so each of a forward's regions would wait for a sleeping worker to wake."""
    import lookahead

    model, processor = models.load_model_and_processor(models.process_model_name(model_dir))
    tokenizer = getattr(processor, "tokenizer", processor)
    ids = tokenizer("def main():\n", return_tensors="pt").input_ids.to(model.device)
    runner.set_threads()
    try:
        lookahead.generate(model, ids, max_new_tokens=WARMUP_TOKENS, do_sample=False, lookahead_config=runner.config)
    except lookahead.Unsupported as err:
        if not runner.fallback:
            raise ValueError(f"{model_dir}: {err}; --fallback serves it with plain generate") from err
        logger.warning("%s; every request runs plain generate (--fallback)", err)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one), IPv4 or IPv6 as ``host`` is."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(128)
    return sock


def run(served: Served, sock: socket.socket, log_level: str = "info") -> None:
    """Serve on ``sock`` until SIGINT or SIGTERM, then save the kept pool (``--pool``) once the
    requests in flight are done. uvicorn catches the signals while it runs and raises them again
    after; the handlers set here only record them, so that the save below runs."""
    import uvicorn

    stopped: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda number, _frame: stopped.append(number))
    server = uvicorn.Server(uvicorn.Config(served.app, log_level=log_level, timeout_graceful_shutdown=30))
    try:
        server.run(sockets=[sock])
    finally:
        store = served.runner.store if served.runner is not None else None
        if store is not None and store.path is not None:
            saved = store.close()
            where = f"saved to {store.path}" if saved else f"NOT saved ({store.save_error or 'a request held it'})"
            logger.warning("stopped; the pool was %s", where)
        sys.stderr.flush()
