"""``lookahead bench``: decoding methods side by side on one model and prompt set.

Prints a summary table, checks that every greedy-mode method produced exactly greedy's tokens,
and can write a JSON document (``--json``, schema in docs/bench.md) and a plot (``--plot``).
The helpers below (the options, the setup, the measuring and the verdict) are shared with
``lookahead sweep``.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import asdict, replace

import lookahead.cli.options as options
from lookahead.bench import methods, report
from lookahead.bench.runner import Variant
from lookahead.checking.exactness import full_precision
from lookahead.cli.options import EXIT_MISMATCH, EXIT_USAGE, UsageError

DEFAULT_METHODS = ("greedy", "prompt-lookup", "lookahead")
DEFAULT_LIMIT = 20
DEFAULT_MAX_NEW = 128


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="compare decoding methods on one model and prompt set",
        description="Run decoding methods interleaved per prompt after a warm-up, compare speed and check "
        "exactness against greedy.",
    )
    harness_options(p, DEFAULT_LIMIT, DEFAULT_MAX_NEW)
    p.add_argument(
        "--methods",
        default=None,
        help=f"comma-separated, from {', '.join(methods.METHODS)}, or 'all'; greedy always runs as the baseline "
        f"(default: {','.join(DEFAULT_METHODS)}, those available)",
    )
    options.shape_options(p)
    p.add_argument("--plot", metavar="PATH.png", default=None, help="per-prompt speed-up and tokens-per-forward plot")
    p.set_defaults(func=run, validate=options.validate)


def harness_options(p, limit: int, max_new: int) -> None:
    """The options of ``bench`` and ``sweep``: model, tensor parallel, prompts, sampling, measurement, output."""
    options.model_options(p)
    p.add_argument_group("tensor parallel").add_argument(
        "--tp",
        action="store_true",
        help="shard the model over the ranks of a torchrun job (transformers' tp_plan='auto'); run as "
        "`torchrun --nproc-per-node N -m lookahead bench --tp ...`: rank 0 prints and writes files",
    )
    g = p.add_argument_group("prompts")
    g.add_argument(
        "--prompts",
        default="humaneval",
        help="built-in set (humaneval, grounded, adversarial, multiturn, stdlib-tests) or a JSONL file of "
        '{"prompt": ...} lines (default: %(default)s)',
    )
    g.add_argument("--limit", type=int, default=limit, help="use the first N prompts, 0 = all (default: %(default)s)")
    options.max_new_tokens_option(g, max_new)
    g.add_argument(
        "--positions",
        type=int,
        default=None,
        metavar="N",
        help="stretch the model's rotary positions to N (linear interpolation), for long prompts such as "
        "the code-4k and code-12k sets (every method decodes the same stretched model)",
    )
    g.add_argument(
        "--batch-size",
        type=int,
        default=1,
        help="prompts per batch, left-padded; methods that take one prompt only are skipped (default: %(default)s)",
    )
    options.sampling_options(
        p,
        sample_help="sample instead of greedy decoding (each prompt seeded; lookahead and jacobi are then checked "
        "token for token against seeded model.generate)",
        seed_help="base seed; prompt i runs every method with seed+i",
    )
    g = p.add_argument_group("measurement")
    g.add_argument(
        "--keep-pool", action="store_true", help="keep each lookahead variant's n-gram pool from prompt to prompt"
    )
    g.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run each prompt's round R times; keep each method's median-time run (default: %(default)s)",
    )
    g.add_argument(
        "--index",
        default=None,
        metavar="PATH.npz",
        help="a corpus index (lookahead index build) that lookahead's copy guess also drafts from",
    )
    g.add_argument("--no-warmup", action="store_true", help="skip the warm-up run of each method")
    g.add_argument(
        "--profile",
        action="store_true",
        help="print where each method's time goes per step: planning, inputs, forward, logits, verify, learn, "
        "commit (the JSON always has it)",
    )
    g.add_argument(
        "--compile",
        action="store_true",
        help="every method on a static cache with a compiled forward, transformers' fast path (greedy = "
        "model.generate(cache_implementation='static') compiled); the warm-up compiles every step size",
    )
    g = p.add_argument_group("output")
    options.json_option(g, "write the full per-prompt record as JSON (see docs/bench.md)")
    options.strict_option(g)
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def select_methods(spec: str | None) -> list[str]:
    """The methods ``--methods`` names (available ones by default), greedy first."""
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


def setup(args):
    """Model, prompts and the base settings shared by all methods."""
    from lookahead.bench import prompts
    from lookahead.checking import loading

    model, tokenizer = options.load_model(args)
    chosen = prompts.load_prompts(args.prompts, tokenizer, args.limit or None)
    max_len = loading.max_prompt_len(model, args.max_new_tokens)
    encoded = [prompts.encode(p, tokenizer, max_len) for p in chosen]
    settings = methods.Settings.from_args(
        args,
        loading.pad_token_id(model, tokenizer),
        keep_pool=args.keep_pool,
        compile=args.compile,
        index=options.load_index(args.index, model, tokenizer),
        # one cache length for every prompt: a compiled forward is specialised to it
        max_cache_len=max(len(e) for e in encoded) + args.max_new_tokens if args.compile else None,
    )
    return model, chosen, encoded, settings


def versions() -> dict:
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


def run_config(args, model, chosen, encoded, labels, lookahead_fields: dict) -> dict:
    """The ``config`` part of the JSON document: the run's settings, model and machine."""
    import torch

    return {
        "command": args.command,
        **options.model_meta(args, model),
        "model_type": getattr(model.config, "model_type", None),
        "model_params": sum(p.numel() for p in model.parameters()),
        "tp_size": getattr(model, "tp_size", None) or 1,
        "threads": torch.get_num_threads(),
        "prompts": args.prompts,
        "n_prompts": len(chosen),
        "prompt_tokens": sum(len(e) for e in encoded),
        "max_new_tokens": args.max_new_tokens,
        "batch_size": args.batch_size,
        "methods": labels,
        "baseline": methods.BASELINE,
        "lookahead": lookahead_fields,
        "prompt_lookup": {
            "prompt_lookup_num_tokens": methods.Settings.prompt_lookup_num_tokens,
            "max_matching_ngram_size": methods.Settings.max_matching_ngram_size,
        },
        "sample": {"do_sample": args.sample, "temperature": args.temperature, "top_p": args.top_p, "seed": args.seed},
        "warmup": not args.no_warmup,
        "compile": args.compile,
        "keep_pool": args.keep_pool,
        "index": args.index,
        "repeats": args.repeats,
        "versions": versions(),
        "platform": {"system": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", args.started_at),
    }


def measure(args, model, chosen, encoded, variants):
    """Records, the labels that ran (variants whose method cannot run here are dropped, loudly),
    the dropped ones, and each label's warm-up seconds."""
    from lookahead.bench import runner

    warm: dict[str, float] = {}
    records, skipped = runner.run(
        model,
        chosen,
        encoded,
        variants,
        check_exact=True,
        warmup=not args.no_warmup,
        progress=not args.no_progress,
        repeats=args.repeats,
        batch_size=args.batch_size,
        warmup_s=warm,
    )
    for label, reason in skipped.items():
        print(f"SKIPPED: {label}: {reason}", file=sys.stderr)
    return records, [v.label for v in variants if v.label not in skipped], skipped, warm


def verdict(args, doc: dict) -> int:
    """Loud mismatch report; the exit status (fatal in float32, or with --strict)."""
    lines = report.mismatch_lines(doc)
    if not lines:
        line = (
            "exactness: every seed-exact method produced exactly seeded model.generate's tokens"
            if args.sample
            else "exactness: every method produced exactly greedy's tokens"
        )
        print(line, file=options.human(args))
        return 0
    banner = "!" * 72
    print(f"\n{banner}\n" + "\n".join(lines) + f"\n{banner}", file=sys.stderr)
    dtype = doc["config"]["dtype"]
    fatal = args.strict or (full_precision(dtype) and not report.only_ties(doc))
    if not fatal:
        print(f"note: {dtype} batched verification can flip near-ties; not fatal without --strict", file=sys.stderr)
    return EXIT_MISMATCH if fatal else 0


def plot(draw, data, path: str, out, **kwargs) -> None:
    """A plot that cannot be drawn (no matplotlib, bad path) is a warning: the numbers are out already."""
    try:
        draw(data, path, **kwargs)
        print(f"wrote {path}", file=out)
    except (RuntimeError, OSError, ValueError) as err:
        print(f"warning: no plot written to {path}: {err}", file=sys.stderr)


def run(args) -> int:
    labels = select_methods(args.methods)
    fields = options.config_fields(args)
    model, chosen, encoded, settings = setup(args)
    settings.config_fields = fields
    if any(m in methods.ENGINE_METHODS for m in labels):
        options.make_config({"method": "lookahead", **fields})  # bad lookahead options fail before measuring
    variants = [Variant(m, m, replace(settings, state={})) for m in labels]
    records, labels, skipped, warm = measure(args, model, chosen, encoded, variants)
    config = run_config(args, model, chosen, encoded, labels, _resolved(fields))
    config["skipped"] = skipped
    config["warmup_s"] = {label: round(s, 3) for label, s in warm.items() if label in labels}
    config["cost_curve"] = _curve_used(args, model, labels, config["lookahead"])
    doc = report.document(config, records, labels, methods.BASELINE, exactness=True)
    out = options.human(args)
    print(report.headline(doc["config"]), file=out)
    print(report.table(doc), file=out)
    for line in (
        report.explain(doc) + report.source_lines(doc) + report.warmup_lines(doc) + report.curve_lines(doc["config"])
    ):
        print(line, file=out)
    if args.profile:
        print(report.profile_table(doc), file=out)
    if args.json:
        options.write_json(doc, args.json, out)
    if args.plot:
        from lookahead.bench import plot as plots

        plot(plots.bench_plot, doc, args.plot, out)
    status = verdict(args, doc)
    return status or (EXIT_USAGE if skipped and args.methods else 0)


def _curve_used(args, model, labels, fields: dict) -> dict | None:
    """The cost curve lookahead priced its steps with (its memo, or the cache file it came
    from) and where it is kept; None where none priced them: lookahead did not run, or its
    steps ran compiled (their own bucketed curve) or sharded."""
    from lookahead import distributed
    from lookahead.runtime import calibration

    if "lookahead" not in labels or args.compile or distributed.is_sharded(model):
        return None
    curve = calibration.cost_curve(model, rows=args.batch_size).as_dict()
    return {**curve, "file": str(calibration.default_cache_dir() / "costs.json")}


def _resolved(fields: dict) -> dict:
    """Every ``LookaheadConfig`` field lookahead ran with (the given ones if they do not make one)."""
    from lookahead.config import LookaheadConfig

    try:
        return asdict(LookaheadConfig(method="lookahead", **fields))
    except (TypeError, ValueError):
        return dict(fields)
