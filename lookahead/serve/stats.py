"""What the server learnt, per request (one log line) and in total (``GET /lookahead/stats``)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from lookahead.stats import LookaheadStats

SOURCES = ("copy", "pool", "successors", "window")  # the order the log line names them in
OUTCOMES = ("ok", "cancelled", "failed", "fallback")


@dataclass
class RequestRecord:
    """One request: its id, how it ended (one of ``OUTCOMES``), its ``LookaheadStats`` and its
    wall time in ms (decoding on the inference thread, queueing excluded), and how many prompt
    tokens a kept cache held (``reused``: not prefilled again)."""

    request_id: str
    outcome: str
    stats: LookaheadStats
    ms: float
    error: str | None = None
    reused: int = 0

    def log_line(self) -> str:
        """``request ID: ok, 128 new tokens, 2.41 tokens/forward (53 forwards), accepted copy 50
        pool 10 successors 3 window 0, 412 ms`` (and ``, 640 prompt tokens reused`` where a kept
        cache held them)."""
        s = self.stats
        accepted = " ".join(f"{name} {s.source_tokens.get(name, 0)}" for name in SOURCES)
        line = (
            f"request {self.request_id}: {self.outcome}, {s.new_tokens} new tokens, "
            f"{s.tokens_per_forward:.2f} tokens/forward ({s.forwards} forwards), accepted {accepted}, {self.ms:.0f} ms"
        )
        if self.reused:
            line = f"{line}, {self.reused} prompt tokens reused"
        return line if self.error is None else f"{line}: {self.error}"


@dataclass
class ServeStats:
    """Cumulative counts over every request the server ran (thread-safe: the inference thread
    adds, the event loop reads)."""

    started: float = field(default_factory=time.time)
    requests: int = 0
    outcomes: dict = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    new_tokens: int = 0
    forwards: int = 0
    source_tokens: dict = field(default_factory=dict)
    decode_ms: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self.requests += 1
            self.outcomes[record.outcome] = self.outcomes.get(record.outcome, 0) + 1
            self.new_tokens += record.stats.new_tokens
            self.forwards += record.stats.forwards
            for name, tokens in record.stats.source_tokens.items():
                self.source_tokens[name] = self.source_tokens.get(name, 0) + tokens
            self.decode_ms += record.ms

    def as_dict(self) -> dict:
        """The JSON ``GET /lookahead/stats`` returns (the pool's part is the store's)."""
        with self._lock:
            return {
                "uptime_s": round(time.time() - self.started, 3),
                "requests": self.requests,
                "outcomes": dict(self.outcomes),
                "new_tokens": self.new_tokens,
                "forwards": self.forwards,
                "tokens_per_forward": self.new_tokens / self.forwards if self.forwards else 0.0,
                "accepted_by_source": dict(self.source_tokens),
                "decode_ms": round(self.decode_ms, 1),
                "tokens_per_second": self.new_tokens / (self.decode_ms / 1000) if self.decode_ms else 0.0,
            }
