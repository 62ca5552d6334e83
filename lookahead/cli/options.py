"""What the ``lookahead`` commands share: exit codes, ``UsageError``, the option groups (each
declared once), their validation, the ``LookaheadConfig`` built from them, the model loader and
where output goes (``--json PATH``, ``-`` for stdout).

Nothing here imports the benchmark harness (``lookahead.bench``): ``generate``, ``check`` and
``export-custom-generate`` only need this module, ``lookahead.checking.loading`` and the library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields as dataclass_fields

from lookahead.checking.exactness import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE  # noqa: F401 - the commands take them from here
from lookahead.config import ENGINE_METHODS

EXIT_CODES = "exit status: 0 ok, 1 mismatch (token ids differ from model.generate), 2 usage error"
SHAPE_FIELDS = ("window", "ngram", "guesses")
STDOUT = "-"  # --json - writes the JSON document to stdout (the human-readable lines go to stderr)


class UsageError(Exception):
    """A bad option value found after parsing (exit status 2)."""


# -- option groups -------------------------------------------------------------------------------


def model_options(p: argparse.ArgumentParser) -> None:
    """The options that choose and load the model (every command that runs one)."""
    g = p.add_argument_group("model")
    g.add_argument("--model", default=None, help="local model directory or hub id (default: the embedded model)")
    placement_options(g)
    g.add_argument(
        "--attn",
        default=None,
        help="attn_implementation to load the model with, e.g. sdpa, eager, lookahead_sdpa "
        "(sdpa without repeat_kv on masked GQA steps)",
    )
    g.add_argument(
        "--allow-download", action="store_true", help="let --model fetch from the hub (default: local files only)"
    )
    g.add_argument("--trust-remote-code", action="store_true", help="run the model repository's own code")


def placement_options(g) -> None:
    """``--dtype``, ``--device`` and ``--threads``: how a loaded model runs."""
    g.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16 | auto (default: %(default)s)")
    g.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto (default: %(default)s)")
    g.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


def max_new_tokens_option(p, default: int, help: str = "tokens to generate per prompt") -> None:
    p.add_argument("--max-new-tokens", type=int, default=default, help=f"{help} (default: %(default)s)")


def sampling_options(p, sample_help: str, seed_help: str) -> None:
    g = p.add_argument_group("sampling (default: greedy)")
    g.add_argument("--sample", action="store_true", help=sample_help)
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: %(default)s)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help=f"{seed_help} (default: %(default)s)")


def shape_options(p, method: bool = False) -> argparse._ArgumentGroup:
    """``--window/--ngram/--guesses`` (one value each), ``--set`` and, with ``method``, ``--method``."""
    g = p.add_argument_group("lookahead shape (default: LookaheadConfig's defaults)")
    g.add_argument("--window", type=int, default=None, help="W: Jacobi window columns")
    g.add_argument("--ngram", type=int, default=None, help="N: n-gram length (window levels = N-1)")
    g.add_argument("--guesses", type=int, default=None, help="G: candidate n-grams verified per step")
    if method:
        g.add_argument("--method", choices=ENGINE_METHODS, default=None, help="decoding method (default: lookahead)")
    set_option(g)
    return g


def set_option(g) -> None:
    g.add_argument(
        "--set",
        metavar="FIELD=VALUE",
        action="append",
        default=[],
        help="any other LookaheadConfig field, repeatable, e.g. --set successors=0 --set copy_length=0",
    )


def strict_option(p) -> None:
    p.add_argument("--strict", action="store_true", help="also fail on mismatches in bfloat16/float16")


def json_option(p, help: str, optional_path: bool = False) -> None:
    """``--json PATH``; ``-`` writes to stdout. ``optional_path``: a bare ``--json`` means ``-``."""
    extra = {"nargs": "?", "const": STDOUT} if optional_path else {}
    p.add_argument("--json", metavar="PATH", default=None, help=f"{help}; - writes it to stdout", **extra)


# -- validation ----------------------------------------------------------------------------------

_LOWER_BOUNDS = (  # option attribute, its flag, the smallest value it takes
    ("max_new_tokens", "--max-new-tokens", 1),
    ("threads", "--threads", 1),
    ("limit", "--limit", 0),
    ("repeats", "--repeats", 1),
    ("batch_size", "--batch-size", 1),
    ("examples", "--examples", 1),
)


def validate(args) -> None:
    """Every option value the parser cannot check itself, for whichever of them ``args`` has."""
    for name, flag, low in _LOWER_BOUNDS:
        value = getattr(args, name, None)
        if value is not None and value < low:
            raise UsageError(f"{flag} must be >= {low}, got {value}")
    if hasattr(args, "temperature") and (args.temperature <= 0 or not 0 < args.top_p <= 1):
        raise UsageError(f"--temperature must be > 0 and --top-p in (0, 1], got {args.temperature} and {args.top_p}")
    path = getattr(args, "json", None)
    if path not in (None, STDOUT) and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise UsageError(f"--json {path!r}: its folder does not exist")  # found now, not after the run


def parse_set(items: list[str]) -> dict:
    """``["prompt_ngrams=false", "copy_length=0"]`` -> ``{"prompt_ngrams": False, "copy_length": 0}``."""
    fields = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set takes FIELD=VALUE, got {item!r}")
        value = raw.strip()
        lowered = value.lower()
        if lowered in ("true", "false"):
            fields[key.strip()] = lowered == "true"
        else:
            try:
                fields[key.strip()] = int(value)
            except ValueError:
                fields[key.strip()] = value
    bad = set(fields) & {*SHAPE_FIELDS, "method"}
    if bad:
        raise UsageError(f"set {', '.join(sorted(bad))} with their own options, not --set")
    return fields


def config_fields(args, names=(*SHAPE_FIELDS, "method")) -> dict:
    """The ``LookaheadConfig`` fields the options name: those of ``names`` that were given
    (``--window/--ngram/--guesses/--method``) and ``--set``'s; an unknown field is a ``UsageError``."""
    from lookahead.config import LookaheadConfig

    chosen = {k: v for k in names if (v := getattr(args, k, None)) is not None}
    chosen.update(parse_set(args.set))
    known = [f.name for f in dataclass_fields(LookaheadConfig)]
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise UsageError(f"--set: unknown LookaheadConfig field(s) {', '.join(unknown)}; fields: {', '.join(known)}")
    return chosen


def config_from_args(args, **extra):
    """The ``LookaheadConfig`` the options describe (``extra``: fields set by the command)."""
    return make_config({**config_fields(args), **extra})


def make_config(fields: dict):
    """``LookaheadConfig(**fields)``; a wrongly typed value (e.g. ``prompt_ngrams=3``) is a ``UsageError``."""
    from lookahead.config import LookaheadConfig

    try:
        return LookaheadConfig(**fields)
    except TypeError as err:
        raise UsageError(str(err)) from err


# -- the model -----------------------------------------------------------------------------------


def prepare_torch(threads: int | None) -> None:
    """Threads set, transformers' logging and progress bars quiet (stderr carries our lines only)."""
    import torch
    import transformers

    if threads:
        torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def load_model(args, need_tokenizer: bool = True):
    """``(model, tokenizer)`` as the model options say, in eval mode (``tokenizer`` is ``None``
    when the folder has none and the command does without: ``need_tokenizer=False``)."""
    from lookahead.checking import loading

    prepare_torch(args.threads)
    return loading.load(
        args.model,
        args.dtype,
        args.device,
        allow_download=args.allow_download,
        trust_remote_code=args.trust_remote_code,
        attn_implementation=args.attn,
        tp=getattr(args, "tp", False),
        need_tokenizer=need_tokenizer,
        positions=getattr(args, "positions", None),
    )


def load_index(path: str | None, model, tokenizer=None):
    """The corpus index ``--index`` names (``lookahead index build``), checked against the
    model's vocabulary and, where both are known, its tokenizer; None without ``--index``."""
    if path is None:
        return None
    from lookahead.drafts.suffix import SuffixIndex

    try:
        return SuffixIndex.load(path, getattr(model.config, "vocab_size", None), tokenizer=tokenizer)
    except ValueError as err:
        raise UsageError(f"--index {err}") from err


def model_meta(args, model) -> dict:
    """``{"model", "model_name", "dtype", "device"}`` for the JSON records."""
    from lookahead.checking import loading
    from lookahead.checking.exactness import dtype_name

    return {
        "model": args.model or loading.DEFAULT_MODEL,
        "model_name": loading.model_name(args.model),
        "dtype": dtype_name(loading.model_dtype(model)),
        "device": str(next(model.parameters()).device),
    }


# -- output --------------------------------------------------------------------------------------


def human(args):
    """Where the human-readable lines go: stderr when ``--json -`` takes stdout, else stdout."""
    return sys.stderr if getattr(args, "json", None) == STDOUT else sys.stdout


def write_json(doc: dict, path: str, out=None) -> None:
    """``doc`` to ``path`` (indented, then "wrote PATH" on ``out``), or one line on stdout for ``-``."""
    if path == STDOUT:
        print(json.dumps(doc))
        return
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")
    print(f"wrote {path}", file=out if out is not None else sys.stdout)
