"""``lookahead index build PATHS -o corpus.npz``: a suffix index over a corpus, tokenized with
the model's tokenizer, for ``generate --index`` and ``lookahead.generate(lookahead_index=...)``."""

from __future__ import annotations

import argparse
import fnmatch
import os
import time
from pathlib import Path

import numpy as np

from lookahead.cli.options import EXIT_CODES, EXIT_OK, UsageError
from lookahead.drafts.suffix import BYTES_PER_TOKEN, SuffixIndex

EPILOG = f"""\
example:
  lookahead index build src/ docs/ --include '*.py' --include '*.md' -o corpus.npz
  lookahead generate --index corpus.npz --prompt 'def parse_args('

{EXIT_CODES}"""


def register(sub) -> None:
    p = sub.add_parser(
        "index",
        help="build a suffix index over a corpus for the copy guess",
        description="Tokenize text files with the model's tokenizer into a suffix index (8 bytes per token) "
        "that generate drafts from.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="{build}")
    b = actions.add_parser("build", help="index files and folders", epilog=EPILOG)
    b.add_argument("paths", nargs="+", metavar="FILE_OR_DIR", help="files, and folders searched recursively")
    b.add_argument("-o", "--output", required=True, metavar="PATH.npz", help="where to write the index")
    b.add_argument("--model", default=None, help="model folder whose tokenizer to use (default: the embedded model)")
    b.add_argument("--include", action="append", default=None, metavar="GLOB", help="file names to take (default: *)")
    b.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="paths to skip, matched from the folder given (its name included), e.g. '*/test_*'; repeatable",
    )
    b.set_defaults(func=run, validate=None)


def corpus_files(paths: list[str], include: list[str] | None, exclude: list[str]) -> list[Path]:
    """The files under ``paths`` whose names match ``include`` and whose paths (from the
    folder given, its name included: ``src/pkg/test_b.py``) match no ``exclude`` pattern,
    sorted (so an index is the same on every machine)."""
    found = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise UsageError(f"index build: {raw!r} does not exist")
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in candidates:
            if include and not any(fnmatch.fnmatch(file.name, g) for g in include):
                continue
            # from the folder given, its name included: src/pkg/test_b.py for src/
            shown = file.name if path.is_file() else f"{path.resolve().name}/{file.relative_to(path).as_posix()}"
            if any(fnmatch.fnmatch(shown, g) for g in exclude):
                continue
            found.append(file)
    return sorted(set(found))


def tokenize_files(files: list[Path], tokenizer) -> list[np.ndarray]:
    """Each readable UTF-8 file's token ids (no special tokens); others are skipped."""
    texts = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            texts.append(np.asarray(tokenizer(text, add_special_tokens=False, verbose=False).input_ids, dtype=np.int32))
    return texts


def build(files: list[Path], tokenizer) -> tuple[SuffixIndex, dict]:
    """The index over ``files`` and a report: files, tokens, bytes, seconds."""
    started = time.perf_counter()
    texts = tokenize_files(files, tokenizer)
    tokenized = time.perf_counter()
    index = SuffixIndex.from_texts(texts)
    done = time.perf_counter()
    report = {
        "files": len(texts),
        "tokens": len(index),
        "bytes": index.nbytes,
        "tokenize_s": round(tokenized - started, 2),
        "index_s": round(done - tokenized, 2),
    }
    return index, report


def _tokenizer(model: str | None):
    from lookahead.checking import loading
    from lookahead.default_model import default_model_path

    path = model if model is not None else str(default_model_path())
    if not os.path.isdir(path):
        raise UsageError(f"index build: --model {path!r} is not a local model folder")
    return loading._load_tokenizer(path, {"local_files_only": True, "trust_remote_code": False}, required=True)


def run(args) -> int:
    files = corpus_files(args.paths, args.include, args.exclude)
    if not files:
        raise UsageError("index build: no files matched")
    tokenizer = _tokenizer(args.model)
    index, report = build(files, tokenizer)
    index.save(args.output, tokenizer=tokenizer)  # marked: a load with another tokenizer is refused
    print(
        f"indexed {report['files']} files, {report['tokens']:,} tokens into {args.output}: "
        f"{report['bytes'] / 2**20:.1f} MiB ({BYTES_PER_TOKEN} bytes per token); "
        f"tokenized in {report['tokenize_s']} s, indexed in {report['index_s']} s"
    )
    return EXIT_OK
