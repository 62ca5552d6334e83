"""The try-it commands of the ``lookahead`` CLI: ``generate``, ``check`` and
``export-custom-generate`` (their options, and the glue from parsed options to
``lookahead.try_generate``, ``lookahead.check`` and ``lookahead.export``)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from dataclasses import fields as dataclass_fields

from lookahead.cli import UsageError, model_options, parse_set

EXIT_CODES = "exit status: 0 ok, 1 mismatch (token ids differ from model.generate), 2 usage error"
DEFAULT_PROMPT = "def fibonacci(n):\n"

GENERATE_EPILOG = f"""\
examples:
  lookahead generate "def quicksort(xs):"                 # embedded model, streamed
  lookahead generate --model ./my-model --compare "Once upon a time"
  echo "import numpy as np" | lookahead generate - --json

{EXIT_CODES} (--compare: greedy float32/float64 only)"""

CHECK_EPILOG = f"""\
examples:
  lookahead check                                        # embedded model, 30 examples
  lookahead check --model ./my-model --dtype bfloat16 --examples 100 --seed 1

A mismatch is shrunk to a minimal example and printed with the first differing position and
plain decoding's top-2 score margin there (a tiny margin in bfloat16 is a rounding near-tie).
{EXIT_CODES} (in bfloat16/float16 a mismatch exits 1 only with --strict)"""

EXPORT_EPILOG = f"""\
example:
  lookahead export-custom-generate ./lookahead-generate
  hf upload YOUR_USER/lookahead-generate ./lookahead-generate
  # then: model.generate(ids, custom_generate="YOUR_USER/lookahead-generate", trust_remote_code=True)

{EXIT_CODES}"""


def register(sub) -> None:
    """Add the three subcommands to the ``lookahead`` parser's subparsers."""
    _generate_parser(sub)
    _check_parser(sub)
    _export_parser(sub)


def _parser(sub, name: str, help: str, description: str, epilog: str) -> argparse.ArgumentParser:
    # Raw formatting keeps the epilog's example lines; the description is wrapped here instead.
    return sub.add_parser(name, help=help, description=textwrap.fill(description, 88), epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _generate_parser(sub) -> None:
    p = _parser(sub, "generate", "stream one continuation with lookahead decoding",
                "Generate a continuation of PROMPT with lookahead.generate, streamed to stdout as tokens are "
                "accepted, then one line of statistics on stderr.", GENERATE_EPILOG)
    p.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT, metavar="PROMPT",
                   help=f"text to continue; - reads it from stdin (default: {DEFAULT_PROMPT!r})")
    model_options(p)
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens to generate (default: %(default)s)")
    g = p.add_argument_group("sampling (default: greedy)")
    g.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: %(default)s)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="torch seed for sampling (default: %(default)s)")
    g = p.add_argument_group("lookahead shape (default: LookaheadConfig's defaults)")
    g.add_argument("--window", type=int, default=None, help="W: Jacobi window columns")
    g.add_argument("--ngram", type=int, default=None, help="N: n-gram length (window levels = N-1)")
    g.add_argument("--guesses", type=int, default=None, help="G: candidate n-grams verified per step")
    g.add_argument("--method", choices=("lookahead", "jacobi"), default=None, help="decoding method (default: lookahead)")
    g.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any other LookaheadConfig field, repeatable, e.g. --set adaptive=false")
    g = p.add_argument_group("output")
    g.add_argument("--compare", action="store_true",
                   help="also run plain model.generate: wall-clock speed-up and whether the token ids are identical")
    g.add_argument("--json", action="store_true", help="print one JSON record to stdout instead of streaming")
    p.set_defaults(func=cmd_generate, validate=_validate_generate)


def _check_parser(sub) -> None:
    p = _parser(sub, "check", "property-check lookahead against model.generate on your model",
                "Compare lookahead.generate with model.generate(do_sample=False) on hypothesis-drawn prompts "
                "(random and repetitive, from the model's vocabulary), LookaheadConfigs, EOS lists and logits "
                "processors. Needs hypothesis (pip install hypothesis).", CHECK_EPILOG)
    model_options(p)
    p.add_argument("--examples", type=int, default=30, help="examples to draw (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="most new tokens per example (default: %(default)s)")
    p.add_argument("--strict", action="store_true", help="also fail on mismatches in bfloat16/float16")
    p.set_defaults(func=cmd_check, validate=_validate_check)


def _export_parser(sub) -> None:
    p = _parser(sub, "export-custom-generate", "write a transformers custom_generate folder for the Hub",
                "Write DIR/custom_generate/generate.py, DIR/custom_generate/requirements.txt and DIR/README.md: "
                "a folder to push to the Hub and use as model.generate(custom_generate=\"user/repo\", "
                "trust_remote_code=True). DIR may be a model folder (its README.md is kept).", EXPORT_EPILOG)
    p.add_argument("dir", metavar="DIR", help="folder to write into (created if missing)")
    p.add_argument("--force", action="store_true", help="replace custom_generate files that differ")
    p.set_defaults(func=cmd_export, validate=None)


def _validate_common(args) -> None:
    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")


def _validate_generate(args) -> None:
    _validate_common(args)
    if args.temperature <= 0 or not 0 < args.top_p <= 1:
        raise UsageError(f"--temperature must be > 0 and --top-p in (0, 1], got {args.temperature} and {args.top_p}")


def _validate_check(args) -> None:
    _validate_common(args)
    if args.examples < 1 or args.seed < 0:
        raise UsageError(f"--examples must be >= 1 and --seed >= 0, got {args.examples} and {args.seed}")


def _lookahead_config(args):
    import lookahead

    fields = {k: v for k in ("window", "ngram", "guesses", "method") if (v := getattr(args, k)) is not None}
    fields.update(parse_set(args.set))
    known = [f.name for f in dataclass_fields(lookahead.LookaheadConfig)]
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise UsageError(f"--set: unknown LookaheadConfig field(s) {', '.join(unknown)}; fields: {', '.join(known)}")
    try:
        return lookahead.LookaheadConfig(**fields)
    except TypeError as err:  # a wrongly typed value, e.g. adaptive=3
        raise UsageError(str(err)) from err


def _load(args):
    """``(model, tokenizer)`` as the options say; threads set and transformers' logging quiet."""
    import torch
    import transformers

    from lookahead.bench import loading

    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # stderr carries only the command's own lines
    return loading.load(
        args.model, args.dtype, args.device,
        allow_download=args.allow_download, trust_remote_code=args.trust_remote_code,
        attn_implementation=args.attn,
    )  # fmt: skip


def _read_prompt(prompt: str) -> str:
    if prompt != "-":
        return prompt
    text = sys.stdin.read()
    if not text:
        raise UsageError("PROMPT - read an empty prompt from stdin")
    return text


def cmd_generate(args) -> int:
    from lookahead import Unsupported, try_generate
    from lookahead.bench import loading
    from lookahead.bench.methods import Settings

    config = _lookahead_config(args)  # bad --set fails before the model loads
    prompt = _read_prompt(args.prompt)
    model, tokenizer = _load(args)
    settings = Settings(
        max_new_tokens=args.max_new_tokens, do_sample=args.sample, temperature=args.temperature,
        top_p=args.top_p, seed=args.seed, pad_token_id=loading.pad_token_id(model, tokenizer),
    )  # fmt: skip
    try:
        outcome = try_generate.run(model, tokenizer, prompt, settings, config, stream=not args.json,
                                   compare=args.compare)
    except Unsupported as err:
        raise UsageError(f"lookahead cannot serve this model: {err}") from err
    dtype = loading.model_dtype(model)
    if args.json:
        meta = {"model": args.model or loading.DEFAULT_MODEL, "model_name": loading.model_name(args.model),
                "dtype": loading.dtype_name(dtype), "device": str(next(model.parameters()).device)}
        print(json.dumps(try_generate.record(outcome, prompt, settings, config, meta)))
    else:
        print(try_generate.stats_line(outcome), file=sys.stderr)
        if outcome.compare is not None:
            print(try_generate.compare_line(outcome, args.sample), file=sys.stderr)
    return try_generate.exit_status(outcome, settings, dtype)


def cmd_check(args) -> int:
    try:
        import hypothesis  # noqa: F401 - only to fail early with a clear message
    except ImportError:
        raise UsageError("lookahead check needs hypothesis: pip install hypothesis") from None
    from lookahead import Unsupported, check
    from lookahead.bench import loading

    model, tokenizer = _load(args)
    dtype = loading.dtype_name(loading.model_dtype(model))
    print(f"lookahead check: {loading.model_name(args.model)} · {dtype} · {next(model.parameters()).device} · "
          f"{args.examples} examples, seed {args.seed}, up to {args.max_new_tokens} new tokens")
    progress = _progress(args.examples)
    try:
        result = check.run_check(model, tokenizer, examples=args.examples, seed=args.seed,
                                 max_new_tokens=args.max_new_tokens, progress=progress)
    except Unsupported as err:
        raise UsageError(f"lookahead cannot serve this model: {err}") from err
    finally:
        if progress is not None:
            print(file=sys.stderr)
    return check.report(result, strict=args.strict)


def _progress(total: int):
    """A counter on stderr when it is a terminal; nothing otherwise."""
    if not sys.stderr.isatty():
        return None

    def show(runs: int) -> None:
        print(f"\r  run {runs} (of {total} examples, more when shrinking)", end="", file=sys.stderr, flush=True)

    return show


def cmd_export(args) -> int:
    from lookahead.export import export_custom_generate

    written = export_custom_generate(args.dir, overwrite=args.force)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"{args.dir}: already up to date")
    print(f"next: hf upload YOUR_USER/lookahead-generate {args.dir}")
    print('then: model.generate(ids, custom_generate="YOUR_USER/lookahead-generate", trust_remote_code=True)')
    return 0

