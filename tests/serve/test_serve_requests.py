"""Bad requests and faults: each gets a clear 4xx (streamed or not) or a clean cancel, and the
server answers the next request exactly. Raw HTTP on loopback, so the client checks nothing."""

from __future__ import annotations

import http.client
import json
import time

import pytest
from test_serve_exact import complete
from transformers import GenerationConfig

from lookahead.config import LookaheadConfig
from lookahead.drafts.kept import KeptState
from lookahead.serve.runner import BadRequest, Runner
from lookahead.serve.stats import ServeStats
from lookahead.serve.store import PoolStore, save_atomic

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
OK = {"prompt": "def add(a, b):\n", "max_tokens": 8}
CANCEL_TIMEOUT_S = 30


def post(live, path: str, body, stream_bytes: int | None = None) -> tuple[int, bytes]:
    """POST ``body`` (bytes as they are, else JSON) to ``live``; ``(status, body)``. With
    ``stream_bytes``, reads that many bytes of the body and hangs up."""
    host, port = live.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read(stream_bytes) if stream_bytes else response.read()
    finally:
        conn.close()


def with_model(live, body: dict) -> dict:
    return {"model": live.model, **body}


BAD = [
    ("completions", b'{"prompt": "x", "max_tokens": ', 422, "json"),
    ("completions", {"prompt": "x", "max_tokens": 4, "bogus": 1}, 422, "bogus"),
    ("completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("completions", {"prompt": "x", "max_tokens": -5, "stream": True}, 400, "max_tokens"),
    ("completions", {"prompt": "x", "max_tokens": "many"}, 400, "many"),
    ("completions", {"prompt": "x", "max_tokens": 4, "temperature": -1}, 400, "temperature"),
    ("completions", {"prompt": "x", "max_tokens": 4, "temperature": "hot"}, 400, "hot"),
    ("completions", {"prompt": "x", "max_tokens": 4, "top_p": 2, "stream": True}, 400, "top_p"),
    ("completions", {"prompt": "x", "max_tokens": 4, "seed": "abc"}, 400, "abc"),
    ("completions", {"prompt": "x", "max_tokens": 4, "generation_config": "{not json"}, 400, "JSON"),
    ("completions", {"prompt": "x", "generation_config": '{"num_beams": 2}'}, 400, "num_beams"),
    ("completions", {"prompt": "x " * 1100, "max_tokens": 4}, 400, "context"),
    ("completions", {"prompt": 3, "max_tokens": 4}, 400, "prompt must be a string"),
    ("chat", {"max_tokens": 4}, 400, "messages"),
    ("chat", {"messages": "hi", "max_tokens": 4}, 400, "TypeError"),
]


@pytest.mark.parametrize("endpoint, body, status, words", BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_a_bad_request_is_a_4xx_and_the_next_is_served(servers, endpoint, body, status, words):
    live = servers.look
    got, text = post(live, PATHS[endpoint], body if isinstance(body, bytes) else with_model(live, body))
    assert got == status and words.lower() in text.decode().lower()
    assert post(live, PATHS["completions"], with_model(live, OK))[0] == 200


def test_another_model_is_neither_served_nor_loaded(servers):
    live = servers.look
    assert post(live, PATHS["completions"], {**OK, "model": "/etc"})[0] == 400
    status, text = post(live, "/load_model", {"model": "/etc"})
    assert status == 200 and b'"status": "error"' in text and b"serves" in text
    assert post(live, PATHS["completions"], with_model(live, OK))[0] == 200


def test_a_client_gone_mid_stream_cancels_its_request_and_the_server_goes_on(servers, tmp_path):
    """The request stops at its next token; the pool it filed to stays whole (it saves and loads)."""
    live = servers.look
    before = _cancelled(live)
    body = with_model(live, {"prompt": "import os\n", "max_tokens": 600, "stream": True})
    status, first = post(live, PATHS["completions"], body, stream_bytes=64)  # then hang up
    assert status == 200 and first.startswith(b"data: ")
    deadline = time.monotonic() + CANCEL_TIMEOUT_S
    while _cancelled(live) == before:
        assert time.monotonic() < deadline, "the request went on after its client left"
        time.sleep(0.05)
    assert complete(live, False, max_tokens=16) == complete(servers.plain, False, max_tokens=16)
    with live.served.runner.store.lease() as pool:
        save_atomic(pool, str(tmp_path / "pool.npz"))
    assert KeptState.load(tmp_path / "pool.npz").history.tokens.shape == pool.history.tokens.shape


def _cancelled(live) -> int:
    host, port = live.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/lookahead/stats")
        return json.loads(conn.getresponse().read())["outcomes"]["cancelled"]
    finally:
        conn.close()


def loaded(live):
    """The served model and tokenizer, as the server holds them."""
    models = live.served.model_manager
    return models.load_model_and_processor(models.process_model_name(live.model))


class Streamer:
    """A streamer as transformers' server drives one; ``fail_at``: its put raises there."""

    def __init__(self, fail_at: int | None = None):
        self.puts, self.ends, self.fail_at = 0, 0, fail_at

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == self.fail_at:
            raise RuntimeError("the client's queue broke")

    def end(self) -> None:
        self.ends += 1


def runner(fallback: bool = False) -> Runner:
    return Runner(LookaheadConfig(), PoolStore(None, None, None, 1), ServeStats(), fallback=fallback)


def test_fallback_serves_beams_with_plain_generate(servers):
    model, tokenizer = loaded(servers.look)
    ids = tokenizer("def add(a, b):\n", return_tensors="pt").input_ids
    beams = GenerationConfig(num_beams=2, max_new_tokens=6, do_sample=False)
    with pytest.raises(BadRequest, match="num_beams"):
        runner().check(model, {"input_ids": ids}, beams)
    served = runner(fallback=True)
    served.check(model, {"input_ids": ids}, beams)
    out = served.generate(model, "r", input_ids=ids, generation_config=beams)
    assert out.tolist() == model.generate(input_ids=ids, generation_config=beams).tolist()
    assert served.stats.as_dict()["outcomes"]["fallback"] == 1
    assert served.stats.as_dict()["new_tokens"] == out.shape[-1] - ids.shape[-1] == 6


def test_a_stream_that_fails_midway_is_not_ended_as_if_whole(servers):
    """transformers' server reads an ended stream as a finished answer; a failed one must
    reach it as the error instead, as plain generate leaves it."""
    model, tokenizer = loaded(servers.look)
    ids = tokenizer("import os\n", return_tensors="pt").input_ids
    broken, whole, served = Streamer(fail_at=4), Streamer(), runner()
    with pytest.raises(RuntimeError, match="queue broke"):
        served.generate(model, "r1", input_ids=ids, max_new_tokens=16, streamer=broken)
    served.generate(model, "r2", input_ids=ids, max_new_tokens=16, streamer=whole)
    assert (broken.puts, broken.ends) == (4, 0) and (whole.puts, whole.ends) == (17, 1)  # the prompt, 16 tokens
    assert served.stats.as_dict()["outcomes"] == {"ok": 1, "cancelled": 0, "failed": 1, "fallback": 0}
