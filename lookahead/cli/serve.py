"""``lookahead serve``: transformers' OpenAI-compatible server with lookahead as the model's generate
and one pool kept across requests (``lookahead.serve``; docs/serve.md)."""

from __future__ import annotations

import argparse
import glob
import logging
import os
import sys
import textwrap

from lookahead.cli.options import (
    EXIT_CODES,
    EXIT_OK,
    UsageError,
    config_from_args,
    placement_options,
    prepare_torch,
    shape_options,
)

EPILOG = f"""\
example:
  lookahead serve                                   # the embedded model on http://127.0.0.1:8000
  lookahead serve --model ./my-model --pool pool.npz
  curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
       -d '{{"prompt": "def fib(n):", "max_tokens": 64}}'
  curl http://127.0.0.1:8000/lookahead/stats
  LOOKAHEAD_API_KEY=secret lookahead serve --served-model-name coder   # clients send Authorization: Bearer secret

{EXIT_CODES}"""
REFUSED_CB = (
    "--continuous-batching is refused: transformers' continuous batching runs its own paged-attention "
    "loop and never calls generate, so lookahead could not decode and no pool would be kept. Serve "
    "without it: requests run one at a time, as plain `transformers serve` runs them without the flag"
)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULT_MAX_REQUEST_BYTES = 4 << 20
API_KEY_VARIABLE = "LOOKAHEAD_API_KEY"  # as vllm serve reads VLLM_API_KEY


def register(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="an OpenAI-compatible server (transformers serve) decoding with lookahead",
        description=textwrap.fill(
            "Serve --model (default: the embedded model) with transformers' own server (/v1/chat/completions, "
            "/v1/completions, /v1/responses, /v1/models, /health), lookahead as its generate, one n-gram pool "
            "and recent requests' caches kept across requests, and GET /lookahead/stats. Every answer is "
            "plain transformers serve's, token for token (fp32). Needs pip install 'lookahead-decoding[serve]'.",
            88,
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("model")
    g.add_argument("--model", default=None, metavar="DIR", help="local model folder, safetensors (default: embedded)")
    placement_options(g)
    g.add_argument("--trust-remote-code", action="store_true", help="run the model folder's own code")
    s = p.add_argument_group("server")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s, this machine only)")
    s.add_argument("--port", type=int, default=8000, help="port (default: %(default)s; 0: a free one)")
    s.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"), help="uvicorn's")
    s.add_argument("--no-warmup", action="store_true", help="skip the start-up decode (the first request pays it)")
    s.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="every route but /health needs the header 'Authorization: Bearer KEY' (default: $LOOKAHEAD_API_KEY; "
        "unset: no key)",
    )
    s.add_argument(
        "--max-request-bytes",
        type=int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        metavar="N",
        help="the largest request body taken; a larger one is a 413 before it is read (default: %(default)s, 4 MiB)",
    )
    s.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        metavar="NAME",
        help="the name(s) /v1/models lists and requests may name (default: the --model folder as given)",
    )
    s.add_argument("--continuous-batching", action="store_true", help=argparse.SUPPRESS)  # refused, clearly
    k = p.add_argument_group("kept state")
    k.add_argument("--pool", default=None, metavar="PATH", help="load the kept pool from PATH, save it there")
    k.add_argument("--save-every", type=int, default=16, metavar="N", help="save --pool every N requests (default: 16)")
    k.add_argument(
        "--no-keep-pool",
        action="store_true",
        help="a fresh pool per request and no kept cache entries: no state across requests",
    )
    k.add_argument(
        "--prefix-cache-mib",
        type=int,
        default=256,
        metavar="MIB",
        help="keep recent requests' cache entries, up to MIB: a prompt that starts with one (a conversation's "
        "next turn) prefills only the rest (default: %(default)s; 0: none)",
    )
    k.add_argument("--index", default=None, metavar="PATH", help="a corpus index (lookahead index build) to copy from")
    k.add_argument("--fallback", action="store_true", help="serve what lookahead refuses (beams) with plain generate")
    shape_options(p)
    p.set_defaults(func=run, validate=validate)


def validate(args) -> None:
    """Every value checked before anything loads; ``UsageError`` (exit status 2) otherwise."""
    if args.continuous_batching:
        raise UsageError(REFUSED_CB)
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be in [0, 65535], got {args.port}")
    for flag, value in (("--threads", args.threads), ("--save-every", args.save_every)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    if args.prefix_cache_mib < 0:
        raise UsageError(f"--prefix-cache-mib must be >= 0 (0 keeps none), got {args.prefix_cache_mib}")
    if args.max_request_bytes < 1:
        raise UsageError(f"--max-request-bytes must be >= 1, got {args.max_request_bytes}")
    if args.api_key is None:
        args.api_key = os.environ.get(API_KEY_VARIABLE) or None
    elif not args.api_key.strip():
        raise UsageError("--api-key must not be empty (leave it out to serve without a key)")
    if args.served_model_name is not None and not all(name.strip() for name in args.served_model_name):
        raise UsageError(f"--served-model-name must not be empty, got {args.served_model_name}")
    if args.pool is not None and args.no_keep_pool:
        raise UsageError("--pool PATH keeps a pool across requests; --no-keep-pool keeps none: pass one of them")
    if args.pool is not None:
        from lookahead.serve.store import check_writable

        try:
            check_writable(args.pool)
        except ValueError as err:
            raise UsageError(str(err)) from err
    if args.model is not None:
        check_model_dir(args.model)


def check_model_dir(path: str) -> None:
    """A local folder holding safetensors weights: the server never unpickles a checkpoint and
    never fetches one from a hub."""
    folder = os.path.expanduser(path)
    if not os.path.isdir(folder):
        raise UsageError(f"--model {path!r}: no such folder (lookahead serve takes a local model folder)")
    if not glob.glob(os.path.join(folder, "*.safetensors")):
        raise UsageError(f"--model {path!r}: no *.safetensors weights in it (lookahead serve loads safetensors only)")


# what lookahead.serve takes from transformers.cli.serving: transformers 5.20-5.24 have it all
# (5.19 has no systemone; 5.25 rebuilt the package without GenerateManager)
SERVING_API = (
    "chat_completion.ChatCompletionHandler",
    "completion.CompletionHandler",
    "model_manager.ModelManager",
    "response.ResponseHandler",
    "server.build_server",
    "systemone.SystemOneHandler",
    "transcription.TranscriptionHandler",
    "utils.GenerateManager",
    "utils.GenerationState",
    "utils.Modality",
)


def _check_serving_api() -> None:
    """A transformers whose serving code lacks a piece ``lookahead.serve`` extends: a clear
    exit 2 naming it and the versions that have it all, not a traceback."""
    import importlib

    import transformers

    for path in SERVING_API:
        module, name = path.rsplit(".", 1)
        try:
            getattr(importlib.import_module(f"transformers.cli.serving.{module}"), name)
        except (ImportError, AttributeError) as err:
            raise UsageError(
                f"lookahead serve extends the serving code of transformers 5.20-5.24 (tested: 5.24); "
                f"transformers {transformers.__version__} has no transformers.cli.serving.{path}: "
                "pip install 'transformers>=5.20,<5.25'"
            ) from err


def run(args) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        needs = "pip install 'lookahead-decoding[serve]'"
        raise UsageError(f"lookahead serve needs the server's packages ({err}): {needs}") from err
    _check_serving_api()
    from lookahead.checking import loading
    from lookahead.default_model import default_model_path
    from lookahead.serve import app

    prepare_torch(args.threads)
    _log_to_stderr()
    dtype = loading.resolve_dtype(args.dtype)
    options = app.ServeOptions(
        model_dir=os.path.expanduser(args.model) if args.model else str(default_model_path()),
        dtype=str(dtype).removeprefix("torch.") if dtype is not None else "auto",
        device=loading.resolve_device(args.device),
        trust_remote_code=args.trust_remote_code,
        config=config_from_args(args),
        keep_pool=not args.no_keep_pool,
        pool_path=args.pool,
        save_every=args.save_every,
        index_path=args.index,
        fallback=args.fallback,
        threads=args.threads,
        warmup=not args.no_warmup,
        prefix_cache_mib=args.prefix_cache_mib,
        max_request_bytes=args.max_request_bytes,
        api_key=args.api_key,
        served_model_names=tuple(args.served_model_name or ()),
    )
    runner = app.load_state(options)  # a bad --pool or --index: exit 2 before the model loads
    sock = app.bind(args.host, args.port)  # a port in use: exit 2 before the model loads
    print(f"lookahead serve: {_loading_words(options)}", file=sys.stderr, flush=True)
    served = app.build_app(options, runner=runner)
    host, port = sock.getsockname()[:2]
    print(f"lookahead serve: {options.model_dir} on http://{_url_host(host)}:{port}/v1 ({_serving_words(options)})")
    if args.host not in LOOPBACK:
        print(f"lookahead serve: listening on {args.host}: reachable from other machines", file=sys.stderr)
    sys.stdout.flush()
    app.run(served, sock, log_level=args.log_level)
    return EXIT_OK


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _loading_words(options) -> str:
    """What start-up does before the server listens, and how long it takes, honestly."""
    if not options.warmup:
        return f"loading {options.model_dir} (no start-up decode: the first request compiles and calibrates)"
    return (
        f"loading {options.model_dir}, then a start-up decode: it loads lookahead's numba kernels (compiles "
        "them on the first start after an install) and measures the model's cost curve; seconds on an idle "
        "machine, a minute or more on a busy one"
    )


def _serving_words(options) -> str:
    names = ", ".join(options.served_model_names)
    parts = [_pool_words(options), f"requests up to {options.max_request_bytes:,} bytes"]
    if names:
        parts.append(f"served as {names}")
    if options.api_key:
        parts.append("API key required")
    return "; ".join(parts)


def _pool_words(options) -> str:
    if not options.keep_pool:
        return "a fresh pool per request"
    kept = (
        f"pool kept, saved to {options.pool_path} every {options.save_every} requests"
        if options.pool_path
        else "pool kept in memory"
    )
    prefixes = f"cache entries up to {options.prefix_cache_mib} MiB" if options.prefix_cache_mib else "no cache entries"
    return f"{kept}; {prefixes}"


def _log_to_stderr() -> None:
    """One line per request on stderr (``lookahead.serve``'s logger)."""
    log = logging.getLogger("lookahead.serve")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s lookahead: %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
