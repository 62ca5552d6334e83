"""The ``lookahead`` command: ``bench``, ``sweep``, ``generate``, ``check`` and ``export-custom-generate``.

``lookahead bench`` runs decoding methods side by side on the same model and prompts, prints a
summary table, checks that every greedy-mode method produced exactly greedy's tokens, and can
write a JSON document (``--json``, schema in docs/bench.md) and a plot (``--plot``).
``lookahead sweep`` runs lookahead over a window x ngram x guesses grid and draws a heatmap.
``generate``, ``check`` and ``export-custom-generate`` (try it on your model, check it, ship it)
live in ``lookahead.commands``. Exit status: 0 ok, 1 mismatch, 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import asdict, replace

from lookahead import distributed
from lookahead.bench import methods, report
from lookahead.bench import sweep as sweeping
from lookahead.bench.runner import Variant

DEFAULT_METHODS = ("greedy", "prompt-lookup", "lookahead")
DEFAULT_LIMIT = 20
SWEEP_LIMIT = 6
SWEEP_MAX_NEW = 64
EXIT_MISMATCH = 1
FULL_PRECISION = ("float32", "float64")  # where any mismatch is a bug, not a rounding near-tie
EXIT_USAGE = 2


class UsageError(Exception):
    """A bad option value found after parsing (exit status 2)."""


def model_options(p: argparse.ArgumentParser) -> None:
    """The options that choose and load the model (shared by every command that runs one)."""
    g = p.add_argument_group("model")
    g.add_argument("--model", default=None, help="local model directory or hub id (default: the embedded model)")
    g.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16 | auto (default: %(default)s)")
    g.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto (default: %(default)s)")
    g.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    g.add_argument("--attn", default=None, help="attn_implementation to load the model with, e.g. sdpa, eager")
    g.add_argument("--allow-download", action="store_true", help="let --model fetch from the hub (default: local files only)")
    g.add_argument("--trust-remote-code", action="store_true", help="run the model repository's own code")


def _common_options(p: argparse.ArgumentParser, limit: int, max_new: int) -> None:
    model_options(p)
    p.add_argument_group("tensor parallel").add_argument(
        "--tp", action="store_true",
        help="shard the model over the ranks of a torchrun job (transformers' tp_plan='auto'); run as "
        "`torchrun --nproc-per-node N -m lookahead bench --tp ...`: rank 0 prints and writes files",
    )  # fmt: skip
    g = p.add_argument_group("prompts")
    g.add_argument(
        "--prompts",
        default="humaneval",
        help="built-in set (humaneval, grounded, adversarial) or a JSONL file of {\"prompt\": ...} lines (default: %(default)s)",
    )
    g.add_argument("--limit", type=int, default=limit, help="use the first N prompts, 0 = all (default: %(default)s)")
    g.add_argument("--max-new-tokens", type=int, default=max_new, help="tokens to generate per prompt (default: %(default)s)")
    g.add_argument("--batch-size", type=int, default=1,
                   help="prompts per batch, left-padded; methods that take one prompt only are skipped (default: %(default)s)")
    g = p.add_argument_group("sampling (default: greedy)")
    g.add_argument("--sample", action="store_true", help="sample instead of greedy decoding (exactness is then not checked)")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: %(default)s)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="base seed; prompt i runs every method with seed+i (default: %(default)s)")
    g = p.add_argument_group("lookahead options")
    g.add_argument(
        "--set", metavar="FIELD=VALUE", action="append", default=[],
        help="any other LookaheadConfig field, repeatable, e.g. --set adaptive=false --set copy_length=0",
    )  # fmt: skip
    g.add_argument("--keep-pool", action="store_true", help="keep each lookahead variant's n-gram pool from prompt to prompt")
    g = p.add_argument_group("measurement")
    g.add_argument("--repeats", type=int, default=1, help="run each prompt's round R times; keep each method's median-time run (default: %(default)s)")
    g.add_argument("--no-warmup", action="store_true", help="skip the warm-up run of each method")
    g = p.add_argument_group("output")
    g.add_argument("--json", metavar="PATH", default=None, help="write the full per-prompt record as JSON (see docs/bench.md)")
    g.add_argument("--strict", action="store_true", help="also fail on mismatches in bfloat16/float16 (float32 always fails)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    from lookahead import commands  # it imports this module's helpers, so it is imported late

    parser = argparse.ArgumentParser(prog="lookahead", description=__doc__.split("\n\n")[0], epilog=commands.EXIT_CODES)
    sub = parser.add_subparsers(dest="command", metavar="{generate,check,export-custom-generate,bench,sweep}")
    commands.register(sub)
    bench = sub.add_parser(
        "bench",
        help="compare decoding methods on one model and prompt set",
        description="Run decoding methods interleaved per prompt after a warm-up, compare speed and check exactness against greedy.",
    )
    _common_options(bench, DEFAULT_LIMIT, 128)
    bench.add_argument(
        "--methods",
        default=None,
        help=f"comma-separated, from {', '.join(methods.METHODS)}, or 'all'; greedy always runs as the baseline "
        f"(default: {','.join(DEFAULT_METHODS)}, those available)",
    )
    shape = bench.add_argument_group("lookahead shape (default: LookaheadConfig's defaults)")
    shape.add_argument("--window", type=int, default=None, help="W: Jacobi window columns")
    shape.add_argument("--ngram", type=int, default=None, help="N: n-gram length (window levels = N-1)")
    shape.add_argument("--guesses", type=int, default=None, help="G: candidate n-grams verified per step")
    bench.add_argument("--plot", metavar="PATH.png", default=None, help="per-prompt speed-up and tokens-per-forward plot")
    bench.set_defaults(func=cmd_bench, validate=_check_common)
    sw = sub.add_parser(
        "sweep",
        help="grid-search the lookahead shape (window x ngram x guesses)",
        description="Run lookahead over a window x ngram x guesses grid against greedy on the same prompts; "
        "print the best exact setting and write a heatmap of speed-up.",
    )
    _common_options(sw, SWEEP_LIMIT, SWEEP_MAX_NEW)
    sw.add_argument("--method", default="lookahead", choices=methods.ENGINE_METHODS, help="engine method (default: %(default)s)")
    sw.add_argument("--window", default=None, help=f"values, e.g. 1,2,4,8 or 2-6 (default: {_csv(sweeping.DEFAULT_WINDOWS)})")
    sw.add_argument("--ngram", default=None, help=f"values (default: {_csv(sweeping.DEFAULT_NGRAMS)})")
    sw.add_argument("--guesses", default=None, help=f"values (default: {_csv(sweeping.DEFAULT_GUESSES)})")
    sw.add_argument("--plot", metavar="PATH.png", default="lookahead-sweep.png", help="heatmap path (default: %(default)s)")
    sw.set_defaults(func=cmd_sweep, validate=_check_common)
    return parser


def _csv(values) -> str:
    return ",".join(str(v) for v in values)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    args.started_at = time.gmtime()
    try:
        if args.validate is not None:
            args.validate(args)
        _main_rank_writes(args)
        with distributed.quiet_unless_main():
            return args.func(args)
    except (UsageError, methods.MethodUnavailable, ValueError, OSError) as exc:
        print(f"lookahead {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _main_rank_writes(args) -> None:
    """Under torchrun only rank 0 prints and writes files; every rank still runs everything."""
    if not distributed.is_main():
        for name in ("json", "plot"):
            if hasattr(args, name):
                setattr(args, name, None)
        args.no_progress = True


def _check_common(args) -> None:
    if args.limit < 0 or args.max_new_tokens < 1 or args.repeats < 1:
        raise UsageError("--limit must be >= 0, --max-new-tokens and --repeats >= 1")
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be >= 1")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.temperature <= 0 or not 0 < args.top_p <= 1:
        raise UsageError("--temperature must be > 0 and --top-p in (0, 1]")


def parse_set(items: list[str]) -> dict:
    """``["adaptive=false", "copy_length=0"]`` -> ``{"adaptive": False, "copy_length": 0}``."""
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
    bad = set(fields) & {"window", "ngram", "guesses", "method"}
    if bad:
        raise UsageError(f"set {', '.join(sorted(bad))} with their own options, not --set")
    return fields


def _select_methods(spec: str | None) -> list[str]:
    if spec is None:
        chosen = [m for m in DEFAULT_METHODS if methods.available(m)]
        skipped = [m for m in DEFAULT_METHODS if m not in chosen]
        if skipped:
            print(f"note: skipping unavailable method(s): {', '.join(skipped)}", file=sys.stderr)
    else:
        chosen = [m.strip() for m in spec.split(",") if m.strip()]
        if chosen == ["all"]:
            chosen = [m for m in methods.METHODS if methods.available(m)]
        unknown = [m for m in chosen if m not in methods.METHODS]
        if unknown:
            raise UsageError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(methods.METHODS)}")
        missing = [m for m in chosen if not methods.available(m)]
        if missing:
            raise methods.MethodUnavailable(f"method(s) not available here: {', '.join(missing)}")
    chosen = list(dict.fromkeys(chosen))
    if methods.BASELINE in chosen:
        chosen.remove(methods.BASELINE)
    return [methods.BASELINE] + chosen


def _setup(args):
    """Threads, quiet logs, model, prompts and the base settings shared by all methods."""
    import torch
    import transformers

    from lookahead.bench import loading, prompts

    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    model, tokenizer = loading.load(
        args.model, args.dtype, args.device,
        allow_download=args.allow_download, trust_remote_code=args.trust_remote_code,
        attn_implementation=args.attn, tp=getattr(args, "tp", False),
    )  # fmt: skip
    chosen = prompts.load_prompts(args.prompts, tokenizer, args.limit or None)
    max_len = loading.max_prompt_len(model, args.max_new_tokens)
    encoded = [prompts.encode(p, tokenizer, max_len) for p in chosen]
    settings = methods.Settings(
        max_new_tokens=args.max_new_tokens, do_sample=args.sample, temperature=args.temperature,
        top_p=args.top_p, seed=args.seed, pad_token_id=loading.pad_token_id(model, tokenizer),
        keep_pool=args.keep_pool,
    )  # fmt: skip
    return model, chosen, encoded, settings


def _versions() -> dict:
    import numpy
    import torch
    import transformers

    import lookahead

    return {
        "lookahead": getattr(lookahead, "__version__", None),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }


def _config(args, model, chosen, encoded, labels, shape: dict) -> dict:
    import torch

    from lookahead.bench import loading

    return {
        "command": args.command,
        "model": args.model or loading.DEFAULT_MODEL,
        "model_name": loading.model_name(args.model),
        "model_type": getattr(model.config, "model_type", None),
        "model_params": sum(p.numel() for p in model.parameters()),
        "dtype": loading.dtype_name(loading.model_dtype(model)),
        "device": str(next(model.parameters()).device),
        "tp_size": getattr(model, "tp_size", None) or 1,
        "threads": torch.get_num_threads(),
        "prompts": args.prompts,
        "n_prompts": len(chosen),
        "prompt_tokens": sum(len(e) for e in encoded),
        "max_new_tokens": args.max_new_tokens,
        "batch_size": args.batch_size,
        "methods": labels,
        "baseline": methods.BASELINE,
        "lookahead": shape,
        "prompt_lookup": {
            "prompt_lookup_num_tokens": methods.Settings.prompt_lookup_num_tokens,
            "max_matching_ngram_size": methods.Settings.max_matching_ngram_size,
        },
        "sample": {"do_sample": args.sample, "temperature": args.temperature, "top_p": args.top_p, "seed": args.seed},
        "warmup": not args.no_warmup,
        "keep_pool": args.keep_pool,
        "repeats": args.repeats,
        "versions": _versions(),
        "platform": {"system": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", args.started_at),
    }


def _validate_shape(settings: methods.Settings) -> None:
    """Bad lookahead options fail before any measuring."""
    try:
        settings.lookahead_config("lookahead")
    except TypeError as err:
        raise UsageError(str(err)) from err


def _resolved_shape(settings: methods.Settings) -> dict:
    try:
        return asdict(settings.lookahead_config("lookahead"))
    except (TypeError, ValueError):
        return dict(settings.shape)


def _measure(args, model, chosen, encoded, variants):
    """Records, and the labels that ran (variants whose method cannot run here are dropped, loudly)."""
    from lookahead.bench import runner

    records, skipped = runner.run(
        model, chosen, encoded, variants,
        check_exact=not args.sample, warmup=not args.no_warmup, progress=not args.no_progress,
        repeats=args.repeats, batch_size=args.batch_size,
    )  # fmt: skip
    for label, reason in skipped.items():
        print(f"SKIPPED: {label}: {reason}", file=sys.stderr)
    return records, [v.label for v in variants if v.label not in skipped], skipped


def _finish(args, doc: dict) -> int:
    """Loud mismatch report; the exit status (fatal in float32, or with --strict)."""
    lines = report.mismatch_lines(doc)
    if not lines:
        if not args.sample:
            print("exactness: every method produced exactly greedy's tokens")
        return 0
    banner = "!" * 72
    print(f"\n{banner}\n" + "\n".join(lines) + f"\n{banner}", file=sys.stderr)
    fatal = args.strict or (doc["config"]["dtype"] in FULL_PRECISION and not report.only_ties(doc))
    if not fatal:
        print(
            f"note: {doc['config']['dtype']} batched verification can flip near-ties; "
            "not fatal without --strict",
            file=sys.stderr,
        )
    return EXIT_MISMATCH if fatal else 0


def _plot(draw, data, path: str, **kwargs) -> None:
    """A plot that cannot be drawn (no matplotlib, bad path) is a warning: the numbers are out already."""
    try:
        draw(data, path, **kwargs)
        print(f"wrote {path}")
    except (RuntimeError, OSError, ValueError) as err:
        print(f"warning: no plot written to {path}: {err}", file=sys.stderr)


def cmd_bench(args) -> int:
    labels = _select_methods(args.methods)
    shape = {k: v for k in ("window", "ngram", "guesses") if (v := getattr(args, k)) is not None}
    shape.update(parse_set(args.set))
    model, chosen, encoded, settings = _setup(args)
    settings.shape = shape
    if any(m in methods.ENGINE_METHODS for m in labels):
        _validate_shape(settings)
    variants = [Variant(m, m, replace(settings, state={})) for m in labels]
    records, labels, skipped = _measure(args, model, chosen, encoded, variants)
    config = _config(args, model, chosen, encoded, labels, _resolved_shape(settings))
    config["skipped"] = skipped
    doc = report.document(config, records, labels, methods.BASELINE, exactness=not args.sample)
    print(report.headline(doc["config"]))
    print(report.table(doc))
    for line in report.explain(doc):
        print(line)
    if args.json:
        report.write_json(doc, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        from lookahead.bench import plot

        _plot(plot.bench_plot, doc, args.plot)
    status = _finish(args, doc)
    return status or (EXIT_USAGE if skipped and args.methods else 0)


def cmd_sweep(args) -> int:
    if not methods.available(args.method):
        raise methods.MethodUnavailable(f"method {args.method} is not available here")
    grid = [
        sweeping.parse_grid(args.window, sweeping.DEFAULT_WINDOWS, "window"),
        sweeping.parse_grid(args.ngram, sweeping.DEFAULT_NGRAMS, "ngram"),
        sweeping.parse_grid(args.guesses, sweeping.DEFAULT_GUESSES, "guesses"),
    ]
    extra = parse_set(args.set)
    model, chosen, encoded, settings = _setup(args)
    settings.shape = extra
    _validate_shape(settings)
    variants = sweeping.grid_variants(settings, *grid, method=args.method)
    if len(variants) < 2:
        raise UsageError("no valid lookahead shape in the grid")
    records, labels, skipped = _measure(args, model, chosen, encoded, variants)
    variants = [v for v in variants if v.label in labels]
    if len(variants) < 2:
        raise methods.MethodUnavailable(f"{args.method} could not run any grid point: {next(iter(skipped.values()))}")
    shapes = dict(zip(("window", "ngram", "guesses"), (list(g) for g in grid)))
    config = _config(args, model, chosen, encoded, labels, {"method": args.method, "grid": shapes, **extra})
    doc = report.document(config, records, labels, methods.BASELINE, exactness=not args.sample)
    cells = sweeping.cells(doc, variants)
    print(report.headline(doc["config"]))
    print(sweeping.ranking(cells))
    top = sweeping.best(cells)
    if top:
        print(
            f"best: --window {top['window']} --ngram {top['ngram']} --guesses {top['guesses']} "
            f"({top['speedup']:.2f}x vs greedy, {top['tokens_per_forward']:.2f} tokens/forward)"
        )
    if args.json:
        report.write_json({**doc, "grid": cells, "best": top}, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        from lookahead.bench import plot

        _plot(plot.sweep_heatmap, cells, args.plot, title=f"{config['model_name']} · {config['dtype']} · {args.prompts}")
    return _finish(args, doc)


if __name__ == "__main__":
    sys.exit(main())
