"""Corpus for ``train_default_model.py``: whole files, and functions as documents.

The training text is the running interpreter's standard library (``*.py``, without its
``test``/``tests``/``idle_test`` folders, which are held out for evaluation) plus the
pure-Python sources of a few permissively licensed installed packages, read in sorted path
order and deduplicated by whitespace-normalised content.  Every ``val_every``-th file goes to
validation.

Besides whole files, the training split yields *functions as documents*: every top-level
function and every method (nested in classes, not in other functions) of a training file,
3-80 lines with its decorators, dedented to column 0 and ended by EOS like a file.  That is
the shape of a code-completion request (signature, docstring, body, then stop).  Functions are
deduplicated by normalised text too; those with a docstring are marked, so the sampler can
prefer them.  Functions of validation files are not extracted, so validation stays unseen.

A third kind, *requests*, is shaped like a HumanEval prompt and its answer: a top-level,
undecorated function with a docstring and a short body, after the module's imports that the
function uses (``from typing import List`` then two blank lines, as HumanEval writes them).
The stdlib's docs are not installed here, so their ``doctest`` examples are not used.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
import sysconfig
import textwrap
from importlib import metadata
from pathlib import Path

EXCLUDED_DIRS = {"test", "tests", "idle_test", "testing", "__pycache__", "site-packages"}
HELD_OUT_DIRS = {"test", "tests", "idle_test"}
# Permissively licensed pure-Python packages that the project's own dependencies install;
# small utility code with documented functions first.  Licences land in the manifest.
EXTRA_PACKAGES = [
    "numpy",
    "click",
    "networkx",
    "sortedcontainers",
    "dateutil",
    "packaging",
    "pyparsing",
    "jinja2",
    "werkzeug",
    "jmespath",
    "requests",
    "idna",
    "rich",
    "mpmath",
]


def _py_files(root: Path, exclude: set[str]) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in exclude)
        out += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
    return sorted(out)


def _read(p: Path) -> str | None:
    try:
        text = p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    return text if text.strip() else None


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _parse(text: str):
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None


def function_score(tree, text: str, max_lines: int = 40) -> float:
    """Share of a file's lines that lie in short documented functions, in [0.2, 1].

    HumanEval-style requests are a signature, a docstring and a short body; files made of such
    functions teach that, while framework internals, generated tables and long dispatch
    functions teach little of it.  The floor keeps every file in the mix.
    """
    if tree is None:
        return 0.2
    total = max(1, text.count("\n") + 1)
    covered = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n <= max_lines and ast.get_docstring(node):
                covered.update(range(node.lineno, node.lineno + n))
    return min(1.0, max(0.2, len(covered) / total))


def extract_functions(tree, text: str, min_lines: int = 3, max_lines: int = 80):
    """Yield (qualname, source, has_docstring) for top-level functions and methods.

    The source runs from the first decorator to the function's last line, dedented; a
    function whose lines cannot be dedented to column 0 (a string literal running at a
    smaller indent) is skipped.
    """
    if tree is None:
        return
    lines = text.split("\n")
    stack = [(tree.body, "")]
    while stack:
        body, prefix = stack.pop(0)
        for node in body:
            if isinstance(node, ast.ClassDef):
                stack.append((node.body, f"{prefix}{node.name}."))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([d.lineno for d in node.decorator_list] + [node.lineno])
                last = node.end_lineno or node.lineno
                if not min_lines <= last - first + 1 <= max_lines:
                    continue
                src = textwrap.dedent("\n".join(ln.rstrip("\r") for ln in lines[first - 1 : last]))
                if src[:1].isspace():
                    continue
                yield f"{prefix}{node.name}", src.rstrip() + "\n", ast.get_docstring(node) is not None


def _import_header(tree, func) -> str:
    """The module-level imports that bind a name ``func`` uses, only those names kept."""
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
    out = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names = [a for a in node.names if (a.asname or a.name.split(".")[0]) in used]
            if names:
                out.append(ast.unparse(ast.Import(names=names)))
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            names = [a for a in node.names if (a.asname or a.name) in used]
            if names:
                out.append(ast.unparse(ast.ImportFrom(module=node.module, names=names, level=node.level)))
    return "\n".join(out)


def request_documents(tree, text: str, max_body: int = 30):
    """Yield (name, document) for top-level undecorated documented functions, body 1-``max_body``
    lines after the docstring, each after the imports it uses."""
    if tree is None:
        return
    lines = text.split("\n")
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.decorator_list or ast.get_docstring(node) is None:
            continue
        if len(node.body) < 2 or not 1 <= node.end_lineno - node.body[0].end_lineno <= max_body:
            continue
        src = "\n".join(ln.rstrip("\r") for ln in lines[node.lineno - 1 : node.end_lineno]).rstrip() + "\n"
        header = _import_header(tree, node)
        yield node.name, (header + "\n\n\n" if header else "") + src


def _dedup_key(text: str) -> str:
    return hashlib.sha1(" ".join(text.split()).encode()).hexdigest()


def build_corpus(extra_packages: list[str], val_every: int, with_functions: bool = True, request_max_body: int = 30):
    """Return (train_files, val_files, functions, requests, manifest).

    Files are (label, text, weight) with ``weight`` = :func:`function_score`; functions are
    (label, text, has_docstring) and requests (label, text), from training files only.  All
    in sorted order.
    """
    sources = [("stdlib", stdlib_root(), _py_files(stdlib_root(), EXCLUDED_DIRS))]
    purelib = Path(sysconfig.get_paths()["purelib"])
    for pkg in extra_packages:
        root = purelib / pkg
        if not root.is_dir():
            raise SystemExit(f"extra package {pkg!r} not found under {purelib}")
        sources.append((pkg, root, _py_files(root, EXCLUDED_DIRS)))
    train, val, funcs, requests, manifest = [], [], [], [], {"sources": []}
    seen: set[str] = set()
    # a request without imports has the same text as its function document: a set of its own
    seen_requests: set[str] = set()
    i = 0
    for name, root, files in sources:
        entry = {
            "name": name,
            "root": str(root),
            "files": [],
            "duplicates_dropped": 0,
            "functions": 0,
            "functions_documented": 0,
            "function_bytes": 0,
            "requests": 0,
        }
        if name == "stdlib":
            entry["version"] = sys.version.split()[0]
            entry["license"] = "PSF-2.0 (Python Software Foundation License)"
        else:
            dist = _dist_for(name)
            entry["version"] = dist.version if dist else "unknown"
            entry["license"] = _license_of(dist) if dist else "unknown"
        for p in files:
            text = _read(p)
            if text is None:
                continue
            key = _dedup_key(text)
            if key in seen:
                entry["duplicates_dropped"] += 1
                continue
            seen.add(key)
            rel = f"{name}/{p.relative_to(root).as_posix()}"
            tree = _parse(text)
            weight = function_score(tree, text)
            is_val = i % val_every == val_every - 1
            (val if is_val else train).append((rel, text, weight))
            entry["files"].append(
                {
                    "path": rel,
                    "bytes": len(text.encode()),
                    "split": "val" if is_val else "train",
                    "weight": round(weight, 3),
                }
            )
            i += 1
            if is_val or not with_functions:
                continue
            for qual, src, doc in extract_functions(tree, text):
                k = _dedup_key(src)
                if k in seen:
                    continue
                seen.add(k)
                funcs.append((f"{rel}::{qual}", src, doc))
                entry["functions"] += 1
                entry["functions_documented"] += doc
                entry["function_bytes"] += len(src.encode())
            for qual, src in request_documents(tree, text, request_max_body):
                k = _dedup_key(src)
                if k not in seen_requests:
                    seen_requests.add(k)
                    requests.append((f"{rel}::{qual}", src))
                    entry["requests"] += 1
        manifest["sources"].append(entry)
    return train, val, funcs, requests, manifest


def heldout_test_docs(max_files: int | None = None):
    """The stdlib test folders (never trained on), sorted."""
    root = stdlib_root()
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in {"__pycache__", "site-packages"})
        parts = set(Path(dirpath).relative_to(root).parts)
        if parts & HELD_OUT_DIRS:
            files += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    docs = []
    for p in sorted(files):
        t = _read(p)
        if t is not None:
            docs.append((p.relative_to(root).as_posix(), t))
    return docs[:max_files] if max_files else docs


def _dist_for(pkg: str):
    names = metadata.packages_distributions().get(pkg, [])
    if names:
        return metadata.distribution(names[0])
    for d in metadata.distributions():
        try:
            top = (d.read_text("top_level.txt") or "").split()
        except Exception:
            top = []
        if pkg in top or (d.metadata["Name"] or "").lower().replace("-", "_") == pkg.lower():
            return d
    return None


def _license_of(dist) -> str:
    md = dist.metadata
    if md.get("License-Expression"):
        return md["License-Expression"]
    lic = md.get("License") or ""
    if lic and len(lic) < 80:
        return lic
    cls = [c.split("::")[-1].strip() for c in md.get_all("Classifier") or [] if c.startswith("License")]
    return ", ".join(cls) or "see package metadata"
