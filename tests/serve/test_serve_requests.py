"""Bad requests and faults: each gets a clear 4xx (streamed or not) or a clean cancel, and the
server answers the next request exactly. Raw HTTP on loopback, so the client checks nothing."""

from __future__ import annotations

import http.client
import json
import logging
import time

import openai
import pytest
from test_serve_exact import complete
from test_serve_stats import Lines
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


LONG = "x " * 1000  # 1,002 tokens of the embedded model's 1,024 positions
CHAT_LONG = [{"role": "user", "content": LONG}]
HI = [{"role": "user", "content": "hi"}]
# (endpoint, body: JSON or raw bytes, status, the field named as param, words the message holds)
BAD = [
    ("completions", b'{"prompt": "x", "max_tokens": ', 400, None, "not valid JSON"),
    ("completions", b"[1, 2]", 400, None, "must be a JSON object"),
    ("completions", {"prompt": "x", "max_tokens": 4, "bogus": 1}, 422, "bogus", "unknown field 'bogus'"),
    ("completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens", "max_tokens must be an integer >= 1, got 0"),
    ("completions", {"prompt": "x", "max_tokens": -5, "stream": True}, 400, "max_tokens", "got -5"),
    ("completions", {"prompt": "x", "max_tokens": "many"}, 422, "max_tokens", 'must be an integer, got "many"'),
    ("completions", {"prompt": "x", "max_tokens": 1.5}, 422, "max_tokens", "must be an integer, got 1.5"),
    ("completions", {"prompt": "x", "max_tokens": True}, 422, "max_tokens", "must be an integer, got true"),
    ("completions", {"prompt": "x", "max_tokens": 4, "stream": "yes"}, 422, "stream", "true or false"),
    ("completions", {"prompt": "x", "max_tokens": 4, "temperature": -1}, 400, "temperature", "must be >= 0"),
    ("completions", {"prompt": "x", "max_tokens": 4, "temperature": "hot"}, 422, "temperature", "a number"),
    ("completions", {"prompt": "x", "max_tokens": 4, "top_p": 2, "stream": True}, 400, "top_p", "(0, 1]"),
    ("completions", {"prompt": "x", "max_tokens": 4, "seed": "abc"}, 422, "seed", "an integer"),
    ("completions", {"prompt": "x", "max_tokens": 4, "seed": 1 << 70}, 400, "seed", "seed must be in"),
    (
        "completions",
        {"prompt": "x", "max_tokens": 4, "generation_config": "{not json"},
        400,
        "generation_config",
        "no JSON",
    ),
    ("completions", {"prompt": "x", "generation_config": '{"num_beams": 2}'}, 400, "generation_config", "num_beams"),
    ("completions", {"prompt": "x", "max_tokens": 4, "n": 2}, 400, "n", "n=2 is not served"),
    ("completions", {"prompt": "x", "max_tokens": 4, "best_of": 3}, 400, "best_of", "best_of=3 is not served"),
    ("completions", {"prompt": "x", "max_tokens": 4, "logprobs": 2}, 400, "logprobs", "without log-probabilities"),
    ("completions", {"prompt": "x", "max_tokens": 4, "echo": True}, 400, "echo", "echo=true is not served"),
    ("completions", {"prompt": "x", "max_tokens": 4, "suffix": "y"}, 400, "suffix", 'suffix="y" is not served'),
    ("completions", {"prompt": 3, "max_tokens": 4}, 422, "prompt", "prompt must be a string"),
    ("completions", {"prompt": ["a", "b"], "max_tokens": 4}, 400, "prompt", "a list of prompts"),
    ("completions", {"prompt": LONG + "x " * 30}, 400, "prompt", "maximum context length is 1024 tokens"),
    ("completions", {"prompt": LONG, "max_tokens": 100}, 400, "max_tokens", "1102 tokens (1002 in the prompt, 100"),
    ("completions", {"prompt": "x", "max_tokens": 4, "model": "other"}, 404, "model", "'other' does not exist"),
    ("chat", {"max_tokens": 4}, 400, "messages", "non-empty list"),
    ("chat", {"messages": "hi", "max_tokens": 4}, 422, "messages", "a list of messages"),
    ("chat", {"messages": [{"content": "hi"}], "max_tokens": 4}, 422, "messages", "messages[0] must be an object"),
    ("chat", {"messages": HI, "max_tokens": 4, "logprobs": True}, 400, "logprobs", "logprobs=true is not served"),
    ("chat", {"messages": HI, "max_tokens": 4, "top_logprobs": 2}, 400, "top_logprobs", "is not served"),
    ("chat", {"messages": HI, "max_tokens": 4, "n": 3, "stream": True}, 400, "n", "n=3 is not served"),
    ("chat", {"messages": HI, "max_tokens": 4, "response_format": {"type": "json_object"}}, 400, "response_format", ""),
    ("chat", {"messages": CHAT_LONG, "max_completion_tokens": 100}, 400, "max_completion_tokens", "in the messages"),
    ("nowhere", {"prompt": "x"}, 404, None, "no route POST /v1/nowhere"),
]
PATHS = {**PATHS, "nowhere": "/v1/nowhere"}


@pytest.fixture(scope="module")
def plain_answer(servers):
    """Plain serve's answer to the good request each bad one is followed by."""
    return post(servers.plain, PATHS["completions"], with_model(servers.plain, OK))


@pytest.mark.parametrize("endpoint, body, status, param, words", BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_a_bad_request_gets_its_status_in_openais_shape_and_the_next_is_served(
    servers, plain_answer, endpoint, body, status, param, words
):
    live = servers.look
    got, text = post(live, PATHS[endpoint], body if isinstance(body, bytes) else with_model(live, body))
    error = json.loads(text)["error"]
    assert got == status and set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and words in error["message"] and "Error" not in error["message"]
    answer = post(live, PATHS["completions"], with_model(live, OK))
    assert answer[0] == 200 and _text(answer[1]) == _text(plain_answer[1])


def _text(body: bytes) -> str:
    return json.loads(body)["choices"][0]["text"]


def test_the_openai_client_shows_the_servers_message_and_field(servers):
    live = servers.look
    with pytest.raises(openai.BadRequestError) as caught:
        live.client.completions.create(model=live.model, prompt=LONG, max_tokens=100)
    error = caught.value
    assert "1102 tokens (1002 in the prompt, 100 in the completion)" in error.message
    assert (error.status_code, error.param, error.code) == (400, "max_tokens", "context_length_exceeded")
    with pytest.raises(openai.UnprocessableEntityError, match="max_tokens must be an integer, got 1.5"):
        live.client.completions.create(model=live.model, prompt="x", max_tokens=1.5)


def test_with_no_max_tokens_the_answer_stops_at_the_models_last_position(servers):
    """transformers' default (1,024 new tokens) is cut to what the 1,024 positions leave."""
    live = servers.look
    prompt = "x " * 1010  # 1,012 tokens: 12 positions left
    answer = live.client.completions.create(model=live.model, prompt=prompt)
    assert answer.usage.prompt_tokens + answer.usage.completion_tokens <= 1024
    assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 12


def test_another_model_is_neither_served_nor_loaded(servers):
    live = servers.look
    assert post(live, PATHS["completions"], {**OK, "model": "/etc"})[0] == 404
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


def test_a_client_that_gives_up_on_a_whole_answer_cancels_its_request(servers):
    """A non-streamed request whose client went away (its timeout) stops at its next token and is
    logged ``cancelled``, as a streamed one is; the next request then runs."""
    live, log, lines = servers.look, logging.getLogger("lookahead.serve"), Lines()
    impatient = live.client.with_options(timeout=0.5)
    before, level = _cancelled(live), log.level
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    try:
        with pytest.raises(openai.APITimeoutError):
            impatient.completions.create(model=live.model, prompt="# ", max_tokens=1000)  # runs to 1,000 tokens
        deadline = time.monotonic() + CANCEL_TIMEOUT_S
        while _cancelled(live) == before:
            assert time.monotonic() < deadline, "the request went on after its client left"
            time.sleep(0.05)
        assert complete(live, False, max_tokens=16) == complete(servers.plain, False, max_tokens=16)
    finally:
        log.removeHandler(lines)
        log.setLevel(level)
    first = lines.lines[0]
    assert ": cancelled, " in first and int(first.split(", ")[1].split()[0]) < 1000  # its new tokens
    assert ": ok, 16 new tokens" in lines.lines[1]


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
        runner().check(beams)
    served = runner(fallback=True)
    served.check(beams)
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
