"""The ``lookahead`` command: ``generate``, ``check``, ``export-custom-generate`` (try it on your
model, check it, ship it), ``serve`` (behind transformers' OpenAI-compatible server), ``index``
(a corpus for its copy guess) and ``bench``, ``sweep`` (measure it).

One module per command, each with ``register(subparsers)`` and the function it runs; the options
they share, their validation, the model loader and the exit codes live in ``options``.
Exit status: 0 ok, 1 mismatch, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
import time

from lookahead import distributed
from lookahead.bench.methods import MethodUnavailable
from lookahead.cli import bench, check, export, generate, index, serve, sweep
from lookahead.cli.options import EXIT_CODES, EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, UsageError, parse_set

__all__ = ["EXIT_MISMATCH", "EXIT_OK", "EXIT_USAGE", "UsageError", "build_parser", "main", "parse_set"]
COMMANDS = (generate, check, export, serve, index, bench, sweep)  # in the order --help lists them


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lookahead", description=__doc__.split("\n\n")[0], epilog=EXIT_CODES)
    names = "{generate,check,export-custom-generate,serve,index,bench,sweep}"
    sub = parser.add_subparsers(dest="command", metavar=names)
    for command in COMMANDS:
        command.register(sub)
    return parser


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
    except (UsageError, MethodUnavailable, ValueError, OSError) as exc:
        print(f"lookahead {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _main_rank_writes(args) -> None:
    """Under torchrun only rank 0 prints and writes files; every rank still runs everything."""
    if not distributed.is_main():
        for name in ("json", "plot"):
            if hasattr(args, name):
                setattr(args, name, None)
        args.no_progress = True
