"""``lookahead export-custom-generate DIR``: write a transformers ``custom_generate`` folder (the
files come from ``lookahead.export``) to push to the Hub."""

from __future__ import annotations

import argparse
import textwrap

from lookahead.cli.options import EXIT_CODES, EXIT_OK

EPILOG = f"""\
example:
  lookahead export-custom-generate ./lookahead-generate
  hf upload YOUR_USER/lookahead-generate ./lookahead-generate
  # then: model.generate(ids, custom_generate="YOUR_USER/lookahead-generate", trust_remote_code=True)

{EXIT_CODES}"""


def register(sub) -> None:
    p = sub.add_parser(
        "export-custom-generate",
        help="write a transformers custom_generate folder for the Hub",
        description=textwrap.fill(
            "Write DIR/custom_generate/generate.py, DIR/custom_generate/requirements.txt and DIR/README.md: "
            'a folder to push to the Hub and use as model.generate(custom_generate="user/repo", '
            "trust_remote_code=True). DIR may be a model folder (its README.md is kept).",
            88,
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", metavar="DIR", help="folder to write into (created if missing)")
    p.add_argument("--force", action="store_true", help="replace custom_generate files that differ")
    p.set_defaults(func=run, validate=None)


def run(args) -> int:
    from lookahead.export import export_custom_generate

    written = export_custom_generate(args.dir, overwrite=args.force)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"{args.dir}: already up to date")
    print(f"next: hf upload YOUR_USER/lookahead-generate {args.dir}")
    print('then: model.generate(ids, custom_generate="YOUR_USER/lookahead-generate", trust_remote_code=True)')
    return EXIT_OK
