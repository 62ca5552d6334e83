#!/usr/bin/env python
"""``lookahead serve`` against plain transformers serve, through HTTP with the ``openai`` client.

Servers, each in its own process on a loopback port, all started and taking turns: each unit
of a workload (a session, or one request) runs on every server in turn, one server at a time
(the others idle), the order rotating unit by unit, so that a machine whose speed drifts over
seconds slows all alike: ``plain`` (transformers' own app
and managers, as ``transformers serve MODEL`` runs them: this script's ``--serve-plain`` mode),
``kept`` (``lookahead serve``: one pool and recent requests' cache entries across requests),
``fresh`` (``lookahead serve --no-keep-pool``: nothing kept) and ``pool-only`` (``lookahead serve
--prefix-cache-mib 0``: the pool kept, no cache entries); with ``--base REV``, ``base`` too
(``lookahead serve`` as ``kept``, from a detached worktree of commit REV: an A/B of two versions
taking turns in one run). The servers are started anew for
each workload and round, so every workload starts from an empty pool. An idle server must not
spin: with ``OMP_WAIT_POLICY=ACTIVE`` its OpenMP threads busy-wait forever and slow the others.
Workloads (greedy, streamed):

- ``sessions``: multi-turn sessions, code (``/v1/completions``) and chat
  (``/v1/chat/completions``): each turn re-sends the conversation so far (earlier tasks and the
  server's own answers) plus a new HumanEval task, as an editor or an agent does;
- ``overlap``: several clients asking for similar code: HumanEval tasks in variants (renamed, a
  comment on top), interleaved, each a fresh prompt, where only state kept across requests helps;
- ``single``: one-off requests of 32 new tokens: the server's overhead per request.

Every answer's text is checked against plain's. Reported per workload and server: end-to-end new
tokens per second (client side, requests back to back), speed-up over plain, mean time to first
token, mean latency per request, and the first request after start. ``--soak N``: N requests to
one ``lookahead serve``, RSS and latency every 25. Run on an otherwise idle machine::

    python benchmarks/serve_bench.py --threads 2 --rounds 3 --json runs/serve.json
    python benchmarks/serve_bench.py --quick          # a minute: does it work
    python benchmarks/serve_bench.py --servers kept --base 40589c7 --workloads sessions,overlap
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package, installed or not
sys.path.insert(0, str(ROOT / "benchmarks"))
from ab import worktree  # noqa: E402 - a detached worktree of a commit, made once

# lookahead serve flags; None: --serve-plain
SERVERS = {"plain": None, "kept": [], "fresh": ["--no-keep-pool"], "pool-only": ["--prefix-cache-mib", "0"]}
START_TIMEOUT_S = 300


# -- the requests ---------------------------------------------------------------------------------


def humaneval(limit: int) -> list[dict]:
    """The first ``limit`` HumanEval tasks: ``{"prompt", "entry_point"}`` each."""
    from lookahead.bench.prompts import humaneval_prompts

    return [{"prompt": p.text, "entry_point": p.meta["entry_point"]} for p in humaneval_prompts(limit)]


def session_turns(args) -> list[list[tuple[str, str]]]:
    """Sessions of ``args.turns`` tasks each, alternately code and chat; a session ends early
    where its prompt would leave no room for the answer in the model's context."""
    rows, sessions = humaneval(args.sessions * args.turns), []
    for s in range(args.sessions):
        kind = "code" if s % 2 == 0 else "chat"
        sessions.append([(kind, row["prompt"]) for row in rows[s * args.turns : (s + 1) * args.turns]])
    return sessions


def overlap_prompts(args) -> list[str]:
    """``args.overlap`` tasks in three variants, interleaved: task 0..k-1, then their variants."""
    rows = humaneval(args.overlap)
    variants = []
    for v in range(3):
        for row in rows:
            text, name = row["prompt"], row["entry_point"]
            if v == 1:
                text = text.replace(f"def {name}(", f"def {name}_v2(", 1)
            elif v == 2:
                text = f"# client {v}: the same task again\n{text}"
            variants.append(text)
    return variants


# -- one request ------------------------------------------------------------------------------------


def stream(client, model: str, kind: str, payload, max_tokens: int) -> dict:
    """One streamed greedy request: its text, new tokens, time to first token and latency."""
    started, first, parts, tokens = time.perf_counter(), None, [], 0
    if kind == "code":
        chunks = client.completions.create(model=model, prompt=payload, max_tokens=max_tokens, stream=True)
    else:
        chunks = client.chat.completions.create(model=model, messages=payload, max_tokens=max_tokens, stream=True)
    for chunk in chunks:
        for choice in chunk.choices:
            text = choice.text if kind == "code" else (choice.delta.content or "")
            if text and first is None:
                first = time.perf_counter()
            parts.append(text or "")
        if getattr(chunk, "usage", None) is not None:
            tokens = chunk.usage.completion_tokens
    done = time.perf_counter()
    return {"text": "".join(parts), "tokens": tokens, "ttft": (first or done) - started, "latency": done - started}


def units(workload: str, args) -> list:
    """A workload cut into the units the servers take turns on: a whole session (its turns build
    on its own answers), or one request."""
    if workload == "sessions":
        return session_turns(args)
    if workload == "overlap":
        return [("code", prompt, args.max_tokens) for prompt in overlap_prompts(args)]
    rows = humaneval(args.overlap + args.single)[args.overlap :]  # single: not the overlap set's tasks
    return [("code", row["prompt"], 32) for row in rows]


def run_unit(client, model, workload: str, unit, args, tokenizer) -> list[dict]:
    if workload == "sessions":
        return run_session(client, model, unit, args, tokenizer)
    kind, prompt, max_tokens = unit
    return [stream(client, model, kind, prompt, max_tokens)]


def run_session(client, model, turns, args, tokenizer) -> list[dict]:
    """Each turn: the conversation so far (tasks and this server's answers) plus a new task."""
    out, history, messages = [], "", []
    for t, (kind, task) in enumerate(turns):
        prompt = f"{history}# Task {t + 1}\n{task}"
        if len(tokenizer(prompt).input_ids) + args.max_tokens >= args.context:
            break
        messages = [*messages, {"role": "user", "content": task}]
        result = stream(client, model, kind, prompt if kind == "code" else messages, args.max_tokens)
        out.append(result)
        history = f"{prompt}{result['text']}\n\n"
        messages = [*messages, {"role": "assistant", "content": result["text"]}]
    return out


# -- the servers ----------------------------------------------------------------------------------


def start(name: str, args) -> tuple[subprocess.Popen, str]:
    """Start server ``name`` on a free loopback port; ``(process, base URL)`` once it listens."""
    root = worktree(args.base) if name == "base" else ROOT
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS=str(args.threads))
    common = ["--port", "0", "--threads", str(args.threads), "--model", args.model]
    flags = SERVERS["kept"] if name == "base" else SERVERS[name]
    if flags is None:
        command = [sys.executable, __file__, "--serve-plain", *common]
    else:
        command = [sys.executable, "-m", "lookahead", "serve", *common, *flags]
    log = open(Path(args.logs) / f"{name}.log", "ab")  # noqa: SIM115 - the server writes it until it stops
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=env, cwd=root)
    deadline = time.monotonic() + START_TIMEOUT_S
    while (left := deadline - time.monotonic()) > 0 and select.select([proc.stdout], [], [], left)[0]:
        line = proc.stdout.readline().decode()
        if not line:
            break
        if " on http://" in line:
            # uvicorn's access log goes to stdout: drained, a full pipe would stop the server
            # (after about 1,000 requests, in a soak)
            threading.Thread(target=copy_lines, args=(proc.stdout, log), daemon=True).start()
            return proc, line.split(" on ", 1)[1].split()[0]
    proc.kill()
    raise RuntimeError(f"server {name} did not start; see {log.name}")


def copy_lines(source, log) -> None:
    """Copy a server's output to ``log`` (binary) until the server closes it."""
    for line in source:
        log.write(line)
        log.flush()


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def serve_plain(argv: list[str]) -> None:
    """``--serve-plain``: transformers' app with its own managers, no lookahead (the reference)."""
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--model", default=None)
    opts = p.parse_args(argv)
    import torch

    from lookahead.default_model import default_model_path
    from lookahead.serve import app

    if opts.threads:
        torch.set_num_threads(opts.threads)
    options = app.ServeOptions(model_dir=opts.model or str(default_model_path()), threads=opts.threads)
    sock = app.bind("127.0.0.1", opts.port)
    served = app.build_app(options, lookahead=False)
    print(f"plain transformers serve: {options.model_dir} on http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True)
    app.run(served, sock, log_level="warning")


# -- a round, the report ----------------------------------------------------------------------------


def measure(names: list[str], workload: str, args, tokenizer, model: str, turn: int) -> dict[str, list[dict]]:
    """Every server started (each idle while another serves), then the workload's units one by
    one, each on every server in turn, the order rotating unit by unit: a machine whose speed
    drifts over seconds falls on all servers alike. ``{server: its results}``."""
    import openai

    started = {}
    try:
        for name in names:
            started[name] = start(name, args)
        clients = {
            name: openai.OpenAI(base_url=url, api_key="unused", timeout=600, max_retries=0)
            for name, (_proc, url) in started.items()
        }
        results: dict[str, list[dict]] = {name: [] for name in names}
        for i, unit in enumerate(units(workload, args)):
            k = (i + turn) % len(names)
            for name in names[k:] + names[:k]:
                results[name].extend(run_unit(clients[name], model, workload, unit, args, tokenizer))
        return results
    finally:
        for proc, _url in started.values():
            stop(proc)


def summary(results: list[dict]) -> dict:
    tokens, seconds = sum(r["tokens"] for r in results), sum(r["latency"] for r in results)
    return {
        "requests": len(results),
        "new_tokens": tokens,
        "tokens_per_s": tokens / seconds if seconds else 0.0,
        "ttft_ms": 1000 * statistics.mean(r["ttft"] for r in results),
        "latency_ms": 1000 * statistics.mean(r["latency"] for r in results),
        "first_request_ms": 1000 * results[0]["latency"],
    }


def bench(args, tokenizer, model: str) -> dict:
    """Every workload on every server, ``args.rounds`` times (:func:`measure`)."""
    names, report = ["plain", *(n for n in args.servers if n != "plain")], {}
    for workload in args.workloads:
        runs: dict[str, list[dict]] = {name: [] for name in names}
        mismatches = 0
        for r in range(args.rounds):
            texts = measure(names, workload, args, tokenizer, model, r)
            for name in names:
                runs[name].append(summary(texts[name]))
                mismatches += sum(a["text"] != b["text"] for a, b in zip(texts[name], texts["plain"]))
        report[workload] = {"servers": {n: _mean(runs[n]) for n in names}, "texts_differing": mismatches}
        _print(workload, report[workload])
    return report


def _mean(runs: list[dict]) -> dict:
    return {key: statistics.mean(run[key] for run in runs) for key in runs[0]}


def _print(workload: str, found: dict) -> None:
    plain = found["servers"]["plain"]["tokens_per_s"]
    print(f"\n{workload}: texts differing from plain: {found['texts_differing']}")
    print(f"  {'server':<9} {'tok/s':>8} {'speed-up':>9} {'TTFT ms':>8} {'latency ms':>11} {'first ms':>9}")
    for name, s in found["servers"].items():
        ratio = s["tokens_per_s"] / plain if plain else 0.0
        print(
            f"  {name:<9} {s['tokens_per_s']:8.1f} {ratio:8.2f}x {s['ttft_ms']:8.1f} "
            f"{s['latency_ms']:11.1f} {s['first_request_ms']:9.1f}"
        )


def soak(args, tokenizer, model: str) -> list[dict]:
    """``args.soak`` requests to one ``lookahead serve`` (kept pool): RSS and latency every 25."""
    import openai

    proc, url = start("kept", args)
    client = openai.OpenAI(base_url=url, api_key="unused", timeout=600, max_retries=0)
    prompts, points, window = overlap_prompts(args), [], []
    try:
        for i in range(args.soak):
            window.append(stream(client, model, "code", prompts[i % len(prompts)], 64)["latency"])
            if (i + 1) % 25 == 0:
                point = {"requests": i + 1, "rss_mib": rss_mib(proc.pid), "latency_ms": 1000 * statistics.mean(window)}
                print("  soak {requests:4d} requests: RSS {rss_mib:7.1f} MiB, {latency_ms:.0f} ms".format(**point))
                points.append(point)
                window = []
    finally:
        stop(proc)
    return points


def rss_mib(pid: int) -> float:
    """A process's resident memory (Linux: /proc/PID/status)."""
    return int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0]) / 1024


def main() -> None:
    if sys.argv[1:2] == ["--serve-plain"]:
        return serve_plain(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="local model folder (default: the embedded model)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--sessions", type=int, default=6, help="multi-turn sessions (half code, half chat)")
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--overlap", type=int, default=8, help="tasks sent in 3 variants each")
    p.add_argument("--single", type=int, default=20, help="one-off requests of 32 new tokens")
    p.add_argument("--workloads", default="sessions,overlap,single")
    p.add_argument("--servers", default=",".join(SERVERS), help=f"of {', '.join(SERVERS)} (plain always runs)")
    p.add_argument("--base", default=None, metavar="REV", help="also run server 'base': kept, from commit REV")
    p.add_argument("--soak", type=int, default=0, help="then N requests to one lookahead serve: RSS, latency")
    p.add_argument("--context", type=int, default=1024, help="the model's context: longer sessions end early")
    p.add_argument("--logs", default=None, help="folder for the servers' logs (default: a temp folder)")
    p.add_argument("--json", default=None, help="write the report there")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one round: check that it works")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.max_tokens, args.sessions, args.turns, args.overlap, args.single = 1, 16, 2, 2, 2, 2
        args.soak = min(args.soak, 25)
    args.workloads = args.workloads.split(",")
    args.servers = args.servers.split(",")
    unknown = set(args.servers) - set(SERVERS)
    if unknown:
        p.error(f"--servers: unknown {sorted(unknown)}; choose from {', '.join(SERVERS)}")
    if args.base:
        args.servers.append("base")
    if args.logs is None:
        import tempfile

        args.logs = tempfile.mkdtemp(prefix="serve-bench-")
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    from transformers import AutoTokenizer

    from lookahead.default_model import default_model_path

    # named in full, so that every server (a base checkout's too) answers to the same name
    model = args.model = args.model or str(default_model_path())
    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    print(f"servers' logs: {args.logs}")
    report = {"args": vars(args), "workloads": bench(args, tokenizer, model)}
    if args.soak:
        report["soak"] = soak(args, tokenizer, model)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
