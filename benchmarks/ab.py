#!/usr/bin/env python
"""A/B two versions of lookahead: the working tree against a commit, in alternated runs.

Each run is one ``lookahead bench --methods greedy,lookahead`` process (its own warm-up, its
own plain ``generate`` baseline), so a version's figure is its speed-up over greedy within the
same run. Runs alternate base/new, then new/base, round after round, so that a machine's
drift falls on both alike. The base runs from a detached git worktree of ``--base``
(``PYTHONPATH`` puts it first). Run on an otherwise idle machine.

Example (issue 50's set, docs/benchmarks.md)::

    python benchmarks/ab.py --base f85cd9e --rounds 3 --json runs/ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {  # name: bench flags
    "greedy-fp32": [],
    "greedy-bf16": ["--dtype", "bfloat16"],
    "sampled-bf16": ["--dtype", "bfloat16", "--sample", "--temperature", "0.7", "--top-p", "0.95"],
    "sampled-fp32": ["--sample", "--temperature", "0.7", "--top-p", "0.95"],
    "multiturn-fp32": ["--prompts", "multiturn"],  # long contexts, as a server's sessions have
}


def worktree(rev: str) -> Path:
    """A detached worktree of ``rev`` (made once, reused)."""
    path = Path(tempfile.gettempdir()) / f"lookahead-ab-{rev}"
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True)
    return path


def run(source: Path, flags: list[str], args) -> dict:
    """One bench process over ``source``'s package: lookahead's figures in that run."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, "-m", "lookahead", "bench", "--methods", "greedy,lookahead", "--no-progress"]
        command += ["--threads", str(args.threads), "--limit", str(args.limit)]
        command += ["--max-new-tokens", str(args.max_new_tokens), "--json", out.name, *flags]
        env = dict(os.environ, PYTHONPATH=str(source))
        subprocess.run(command, check=True, env=env, cwd=source, stdout=subprocess.DEVNULL)
        found = json.load(open(out.name))["methods"]["lookahead"]
    return {key: found[key] for key in ("speedup", "tokens_per_forward", "mismatches", "source_tokens")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="f85cd9e", help="the commit to compare with (default: f85cd9e)")
    parser.add_argument("--modes", default="greedy-fp32,greedy-bf16,sampled-bf16", help=f"from {', '.join(MODES)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="write every run here")
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"--modes: unknown {sorted(unknown)}; allowed: {', '.join(MODES)}")
    versions = {"base": worktree(args.base), "new": ROOT}
    runs: dict = {mode: {"base": [], "new": []} for mode in modes}
    for r in range(args.rounds):
        for mode in modes:
            order = ("base", "new") if r % 2 == 0 else ("new", "base")
            for name in order:
                runs[mode][name].append(run(versions[name], MODES[mode], args))
                print(f"round {r + 1} {mode} {name}: {runs[mode][name][-1]}", flush=True)
    print(f"\n{'mode':14} {'base speed-ups':24} {'new speed-ups':24} new/base  TPF base/new")
    for mode in modes:
        base, new = ([x["speedup"] for x in runs[mode][v]] for v in ("base", "new"))
        tpf = [statistics.mean(x["tokens_per_forward"] for x in runs[mode][v]) for v in ("base", "new")]
        shown = [" ".join(f"{x:.2f}" for x in xs) for xs in (base, new)]
        ratio = statistics.mean(new) / statistics.mean(base)
        print(f"{mode:14} {shown[0]:24} {shown[1]:24} {ratio:8.3f}  {tpf[0]:.2f} / {tpf[1]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"base": args.base, "args": vars(args), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
