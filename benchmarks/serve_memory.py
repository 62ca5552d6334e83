#!/usr/bin/env python
"""``lookahead serve``'s memory and responsiveness under refused requests (issue 60).

Starts ``lookahead serve`` (the embedded model, ``--no-warmup``, one thread) in its own process
on a loopback port and reads its resident memory (``VmRSS`` of ``/proc/PID/status``):

1. after one small request (the baseline);
2. after ``--requests`` bodies of ``--max-request-bytes`` + 1 bytes, each sent whole: 413s
   answered from the headers, never read;
3. after ``--requests`` prompts just under the limit: each read, tokenized (about a million tokens
   at 4 MiB) and refused with a 400 (far past the model's 1,024 positions), while another
   connection polls ``/health``: its slowest answer is reported.

Every request is bounded in time; the server is stopped at the end. Run on an idle machine::

    python benchmarks/serve_memory.py                      # 20 of each at the default 4 MiB
    python benchmarks/serve_memory.py --requests 3 --max-request-bytes 1048576   # a minute
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time

from serve_bench import copy_lines  # this folder is the script's: on sys.path

START_TIMEOUT_S, REQUEST_TIMEOUT_S = 300, 600


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        line = next(line for line in fh if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def start(limit: int, log) -> tuple[subprocess.Popen, str, int, threading.Thread]:
    """The server, its address, and the thread that copies its stdout (uvicorn's access log and
    the request lines) to ``log``: a pipe nobody reads fills after a few hundred lines and stops
    the server inside a log write."""
    argv = ["serve", "--port", "0", "--no-warmup", "--threads", "1", "--max-request-bytes", str(limit)]
    command = [sys.executable, "-m", "lookahead", *argv]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and child.poll() is None:
        if not select.select([child.stdout], [], [], 1)[0]:
            continue
        raw = child.stdout.readline()
        log.write(raw)
        line = raw.decode()
        if " on http://" in line:
            host, port = line.split(" on http://", 1)[1].split("/")[0].rsplit(":", 1)
            copier = threading.Thread(target=copy_lines, args=(child.stdout, log), daemon=True)
            copier.start()
            return child, host, int(port), copier
    child.kill()
    raise SystemExit(f"lookahead serve did not start (exit status {child.poll()})")


def post(host: str, port: int, body: bytes) -> int:
    """The status of a POST of ``body`` to /v1/completions, the body sent whole (or until the
    server answers and closes)."""
    with socket.create_connection((host, port), timeout=REQUEST_TIMEOUT_S) as sock:
        head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        try:
            sock.sendall(head.encode() + body)
        except OSError:  # refused from the headers: the server closed before the body was in
            pass
        answer = sock.recv(64)
    return int(answer.split()[1]) if answer.startswith(b"HTTP/1.1") else 0


def health_s(host: str, port: int) -> float:
    conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_S)
    started = time.perf_counter()
    try:
        conn.request("GET", "/health")
        conn.getresponse().read()
        return time.perf_counter() - started
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20, help="refused requests of each kind (default: 20)")
    parser.add_argument("--max-request-bytes", type=int, default=4 << 20, help="the server's limit (default: 4 MiB)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    limit = args.max_request_bytes
    log = tempfile.NamedTemporaryFile("wb", prefix="serve-memory-", suffix=".log", delete=False)
    child, host, port, copier = start(limit, log)
    figures = {"max_request_bytes": limit, "requests": args.requests}
    try:
        assert post(host, port, json.dumps({"prompt": "def add(a, b):\n", "max_tokens": 8}).encode()) == 200
        figures["baseline_mb"] = rss_mb(child.pid)
        oversized = b"x" * (limit + 1)
        statuses = {post(host, port, oversized) for _ in range(args.requests)}
        figures["after_oversized_mb"], figures["oversized_statuses"] = rss_mb(child.pid), sorted(statuses)
        envelope = len(json.dumps({"prompt": "", "max_tokens": 4}))
        prompt = ("total = add(total, b) + 1; " * (limit // 16))[: limit - envelope - 64]
        near = json.dumps({"prompt": prompt, "max_tokens": 4}).encode()
        statuses, waits, seconds, peak = set(), [], [], 0.0
        for _ in range(args.requests):
            started = time.perf_counter()
            sender = threading.Thread(target=lambda: statuses.add(post(host, port, near)))
            sender.start()
            while sender.is_alive():
                waits.append(health_s(host, port))
                peak = max(peak, rss_mb(child.pid))
                time.sleep(0.05)
            sender.join()
            seconds.append(time.perf_counter() - started)
        time.sleep(1)  # the memory is handed back just after each answer
        ordered = sorted(waits) or [0.0]
        figures.update(
            after_near_limit_mb=rss_mb(child.pid),
            near_limit_peak_mb=peak,
            near_limit_statuses=sorted(statuses),
            near_limit_bytes=len(near),
            near_limit_seconds_mean=sum(seconds) / len(seconds),
            health_polls=len(waits),
            health_slowest_s=ordered[-1],
            health_median_s=ordered[len(ordered) // 2],
            health_p99_s=ordered[int(len(ordered) * 0.99)],
            health_over_half_s=sum(w > 0.5 for w in waits),
        )
    finally:
        child.terminate()
        child.wait(60)
        copier.join(10)  # the pipe ends with the server
        log.close()
        figures["server_log_bytes"] = os.path.getsize(log.name)
        print(f"the server's log: {log.name}")
    for name, value in figures.items():
        print(f"{name:28} {value:.1f}" if isinstance(value, float) else f"{name:28} {value}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**figures, "cpus": os.sched_getaffinity(0).__len__()}, fh, indent=1)


if __name__ == "__main__":
    main()
