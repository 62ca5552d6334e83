"""The held-out validation prompts that choose checkpoints (HumanEval is only reported).

About 100 function prompts shaped like HumanEval's, a signature and its docstring, from two
permissively licensed packages that no model of this project was ever trained on: ``sympy``
(BSD-3-Clause) and ``rsa`` (Apache-2.0).  Packages already in the corpus would not do: the
shipped weights, which every run continues, have seen them, so removing them from the corpus
now would not make them unseen.  The prompts are top-level undecorated public functions
with a docstring and a body of 1-25 lines, picked evenly over the sorted candidates of each
package, so the set is the same on every run with the same installed versions.
"""

from __future__ import annotations

import ast
import json
import sysconfig
from pathlib import Path

from train_corpus import EXCLUDED_DIRS, EXTRA_PACKAGES, _dedup_key, _dist_for, _license_of, _py_files, _read

HELD_OUT_PACKAGES = {"sympy": 70, "rsa": 30}  # package -> how many prompts at most
MAX_PROMPT_CHARS = 1200  # keeps prompt + 128 new tokens well inside the 1024 positions


def _prompt_of(node, lines: list[str]) -> str | None:
    body = node.body
    if len(body) < 2 or not isinstance(body[0], ast.Expr) or node.decorator_list:
        return None
    if node.name.startswith("_") or ast.get_docstring(node) is None:
        return None
    doc_end = body[0].end_lineno
    body_lines = node.end_lineno - doc_end
    if not 1 <= body_lines <= 25 or body[1].lineno <= doc_end:
        return None
    prompt = "\n".join(lines[node.lineno - 1 : doc_end]) + "\n"
    return prompt if len(prompt) <= MAX_PROMPT_CHARS else None


def candidates(pkg: str) -> list[dict]:
    root = Path(sysconfig.get_paths()["purelib"]) / pkg
    out = []
    for p in _py_files(root, EXCLUDED_DIRS):
        text = _read(p)
        try:
            tree = ast.parse(text) if text else None
        except (SyntaxError, ValueError, RecursionError):
            tree = None
        if tree is None:
            continue
        lines = text.split("\n")
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                prompt = _prompt_of(node, lines)
                if prompt:
                    out.append({"task_id": f"{pkg}/{p.relative_to(root).as_posix()}::{node.name}", "prompt": prompt})
    return out


def build_validation_prompts() -> tuple[list[dict], list[dict]]:
    """Return (prompts, sources): the prompts in package order, and each package's licence."""
    assert not set(HELD_OUT_PACKAGES) & set(EXTRA_PACKAGES), "a validation package is in the corpus"
    prompts, sources, seen = [], [], set()
    for pkg, quota in HELD_OUT_PACKAGES.items():
        cands = []
        for c in candidates(pkg):
            k = _dedup_key(c["prompt"])
            if k not in seen:
                seen.add(k)
                cands.append(c)
        step = max(1.0, len(cands) / quota)
        picked = [cands[int(i * step)] for i in range(min(quota, len(cands)))]
        prompts += picked
        dist = _dist_for(pkg)
        sources.append(
            {
                "name": pkg,
                "version": dist.version if dist else "unknown",
                "license": _license_of(dist) if dist else "unknown",
                "candidates": len(cands),
                "prompts": len(picked),
                "with_doctest": sum(">>>" in c["prompt"] for c in picked),
            }
        )
    return prompts, sources


def load_validation_prompts(cache: Path) -> tuple[list[dict], list[dict]]:
    """Build once per work folder; later runs and ``--eval-only`` read the same file."""
    if cache.is_file():
        d = json.loads(cache.read_text())
        return d["prompts"], d["sources"]
    prompts, sources = build_validation_prompts()
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"sources": sources, "prompts": prompts}, indent=1))
    return prompts, sources


if __name__ == "__main__":
    ps, src = build_validation_prompts()
    print(json.dumps(src, indent=1))
    print(len(ps), "prompts; first:\n" + ps[0]["prompt"])
