"""What the server learnt is visible: one log line per request (new tokens, tokens per forward,
accepted tokens by source, ms) and cumulative counts at ``GET /lookahead/stats``."""

from __future__ import annotations

import json
import logging
import re
import urllib.error
import urllib.request

from test_serve_exact import complete


def stats(live) -> dict:
    with urllib.request.urlopen(f"{live.url}/lookahead/stats", timeout=10) as response:
        return json.loads(response.read())


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_stats_count_every_request_and_each_logs_one_line(servers):
    live, log, lines = servers.look, logging.getLogger("lookahead.serve"), Lines()
    log.addHandler(lines)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        before = stats(live)
        usage = [
            live.client.completions.create(model=live.model, prompt=p, max_tokens=20).usage.completion_tokens
            for p in ("def square(x):\n", "def square(x):\n", "import re\n")
        ]
        after = stats(live)
    finally:
        log.removeHandler(lines)
        log.setLevel(level)
    assert after["requests"] - before["requests"] == 3
    assert after["outcomes"]["ok"] - before["outcomes"]["ok"] == 3
    assert after["new_tokens"] - before["new_tokens"] == sum(usage)
    accepted = sum(after["accepted_by_source"].values()) - sum(before["accepted_by_source"].values())
    forwards = after["forwards"] - before["forwards"]
    assert forwards < sum(usage) and accepted > 0  # the repeated prompt at least was guessed
    pattern = r"request \S+: ok, 20 new tokens, [\d.]+ tokens/forward \(\d+ forwards\), accepted copy \d+ pool \d+ "
    assert len(lines.lines) == 3 and all(
        re.match(pattern + r"successors \d+ window \d+, \d+ ms$", x) for x in lines.lines
    )


def test_stats_describe_the_kept_pool_and_its_bound(servers):
    complete(servers.look, False, max_tokens=8)
    pool = stats(servers.look)["pool"]
    assert pool["kept"] and pool["file"] is None and pool["keys"] > 0 and pool["history_tokens"] > 0
    assert 1 << 20 < pool["memory_bound_bytes"] < 1 << 24  # a few MiB at the defaults, whatever is sent


def test_the_plain_reference_has_no_stats_route(servers):
    try:
        stats(servers.plain)
    except urllib.error.HTTPError as err:
        assert err.code == 404
    else:
        raise AssertionError("the plain app grew a lookahead route")
