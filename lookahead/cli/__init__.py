"""The ``lookahead`` command: :func:`main` here, the commands in ``app`` and one module each.

This module stays light: a decoding command on a fresh install starts the kernels' compile
(``lookahead.warmup``) on the other core before torch and transformers are imported, which
takes most of the seconds that compile needs.
"""

from __future__ import annotations

import importlib
import sys

DECODING = ("generate", "check", "serve", "bench", "sweep")  # the commands that run lookahead.generate


def main(argv: list[str] | None = None) -> int:
    """Run the ``lookahead`` command on ``argv`` (default ``sys.argv[1:]``); its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in DECODING:
        from lookahead import warmup

        warmup.start_helper()
    return importlib.import_module("lookahead.cli.app").main(argv)


def __getattr__(name: str):  # build_parser, parse_set, UsageError and the exit codes live in app
    return getattr(importlib.import_module("lookahead.cli.app"), name)
