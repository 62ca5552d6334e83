"""``lookahead check``: the property check of ``lookahead.checking.check`` on the user's own model, from the
command line (the options, the progress counter, the report and its exit status)."""

from __future__ import annotations

import argparse
import sys
import textwrap

import lookahead
import lookahead.cli.options as options
from lookahead.checking.check import report, run_check
from lookahead.checking.loading import has_vocabulary
from lookahead.cli.options import EXIT_CODES, UsageError

EPILOG = f"""\
examples:
  lookahead check                                        # embedded model, 30 examples
  lookahead check --model ./my-model --dtype bfloat16 --examples 100 --seed 1
  lookahead check --sample                               # seeded sampling against seeded model.generate

A mismatch is shrunk to a minimal example and printed with the first differing position and
plain decoding's top-2 score margin there (a tiny margin in bfloat16 is a rounding near-tie);
with --sample, the two tokens' gap in the seeded sampling race and the verdict: a rounding flip
of the race, one at a support boundary (top-k, top-p, min-p, typical-p, epsilon, eta), or likely a bug.
{EXIT_CODES} (in bfloat16/float16 a mismatch exits 1 only with --strict)"""


def register(sub) -> None:
    p = sub.add_parser(
        "check",
        help="property-check lookahead against model.generate on your model",
        description=textwrap.fill(
            "Compare lookahead.generate with model.generate(do_sample=False) on hypothesis-drawn prompts "
            "(random and repetitive, from the model's vocabulary), LookaheadConfigs, EOS lists and logits "
            "processors. Needs hypothesis (pip install hypothesis).",
            88,
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.model_options(p)
    p.add_argument("--examples", type=int, default=30, help="examples to draw (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed (default: %(default)s)")
    options.max_new_tokens_option(p, 32, help="most new tokens per example")
    p.add_argument(
        "--sample",
        action="store_true",
        help="also draw sampling settings and a torch seed per example, and compare with seeded "
        "model.generate(do_sample=True) token for token",
    )
    options.strict_option(p)
    p.set_defaults(func=run_command, validate=_validate)


def _validate(args) -> None:
    options.validate(args)
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")


def run_command(args) -> int:
    try:
        import hypothesis  # noqa: F401 - only to fail early with a clear message
    except ImportError:
        raise UsageError("lookahead check needs hypothesis: pip install hypothesis") from None
    model, tokenizer = options.load_model(args, need_tokenizer=False)
    meta = options.model_meta(args, model)
    print(
        f"lookahead check: {meta['model_name']} · {meta['dtype']} · {meta['device']} · "
        f"{args.examples} {'sampled ' if args.sample else ''}examples, seed {args.seed}, "
        f"up to {args.max_new_tokens} new tokens"
    )
    if not has_vocabulary(tokenizer, getattr(model.config, "vocab_size", None)):
        print(
            f"note: no tokenizer with a vocabulary here; drawing token ids from config.vocab_size "
            f"({getattr(model.config, 'vocab_size', None)}) instead",
            file=sys.stderr,
        )
    progress = _progress(args.examples)
    try:
        result = run_check(
            model,
            tokenizer,
            examples=args.examples,
            seed=args.seed,
            max_new_tokens=args.max_new_tokens,
            progress=progress,
            sample=args.sample,
        )
    except lookahead.Unsupported as err:
        raise UsageError(f"lookahead cannot serve this model: {err}") from err
    finally:
        if progress is not None:
            print(file=sys.stderr)
    return report(result, strict=args.strict)


def _progress(total: int):
    """A counter on stderr when it is a terminal; nothing otherwise."""
    if not sys.stderr.isatty():
        return None

    def show(runs: int) -> None:
        print(f"\r  run {runs} (of {total} examples, more when shrinking)", end="", file=sys.stderr, flush=True)

    return show
