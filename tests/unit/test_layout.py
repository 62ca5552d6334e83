"""The package's rooms import only rooms below them (docs/design.md, "The modules").

The imports are read from the source with `ast`, lazy imports inside functions included, so a
shortcut from a lower room to a higher one fails here before it tangles the step.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "lookahead"

# leaves every room may use
LEAVES = {"config", "stats", "files", "distributed", "compat", "default_model", "__version__"}
# each room may import the leaves, itself and rooms of a lower rank
RANKS = {
    "sampling": 1,
    "drafts": 2,
    "verify": 3,
    "step": 4,
    "classic": 5,
    "runtime": 5,
    "arguments": 5,
    "warmup": 5,
    "support": 6,
    "api": 7,
    "export": 7,
    "__init__": 8,
    "serve": 9,
    "vllm": 9,
    "checking": 10,
    "bench": 11,
    "testing": 11,
    "cli": 12,
    "__main__": 13,
}


# pairs of rooms that stay apart although their ranks would allow it (docs/design.md)
APART = {("verify", "drafts")}


def room(module: str) -> str:
    """``lookahead.step.loop`` -> ``step``; ``lookahead`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def room_of(path: Path, package: Path = PACKAGE) -> str:
    """The room of the file ``path`` under ``package`` (the package's own ``__init__.py``:
    ``__init__``)."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return room(".".join(parts[:-1] if path.name == "__init__.py" else parts))


def imports(path: Path, package: Path = PACKAGE) -> set[str]:
    """Every ``lookahead...`` module ``path`` (a file under ``package``) imports, at any depth
    of its code."""
    relative = path.relative_to(package.parent).with_suffix("")
    parent = list(relative.parts) if path.name == "__init__.py" else list(relative.parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = parent[: len(parent) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            # `from lookahead import files` names a module; `from .x import f` a function
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] == "lookahead"}


def edges() -> list[tuple[str, str, str]]:
    """(file, its room, an imported room) for every import that leaves its room for one that
    is no leaf."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = room_of(path)
        for target in sorted({room(name) for name in imports(path)} - LEAVES - {"__init__", own}):
            found.append((str(path.relative_to(PACKAGE.parent)), own, target))
    return found


def test_every_room_has_a_rank():
    rooms = {room_of(path) for path in PACKAGE.rglob("*.py")} - {"models"}
    assert rooms - LEAVES - set(RANKS) == set()


@pytest.mark.parametrize("source, own, target", edges())
def test_rooms_import_only_rooms_below(source, own, target):
    assert target in RANKS, f"{source} imports lookahead.{target}, which has no rank here"
    assert RANKS[target] < RANKS[own], f"{source} ({own}) imports lookahead.{target}, a room above or beside it"
    assert (own, target) not in APART, f"{source} ({own}) imports lookahead.{target}, which it stays apart from"


def test_the_draft_room_stays_free_of_torch():
    for path in (PACKAGE / "drafts").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {n for n in names if n.split(".")[0] == "torch"}, path


def test_the_check_sees_a_lazy_import_from_above(tmp_path):
    """The reader finds an import inside a function, the shortcut a layering slip takes."""
    module = tmp_path / "lookahead" / "drafts" / "slip.py"
    module.parent.mkdir(parents=True)
    module.write_text("def f():\n    from lookahead.step import loop\n    from ..verify import tree\n")
    assert imports(module, tmp_path / "lookahead") == {"lookahead.step.loop", "lookahead.verify.tree"}
