"""Real servers on loopback ports for the ``lookahead serve`` tests (tests/serve/): ``live``
runs an assembled app with uvicorn on a free 127.0.0.1 port in a thread, always stopped."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

import pytest

START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10
SERVER_PACKAGES = ("fastapi", "uvicorn", "openai")  # the serve extra, which CI installs


def need_server_packages() -> None:
    for name in SERVER_PACKAGES:
        pytest.importorskip(name)


@dataclass
class Live:
    """A running server: its base URL, an ``openai`` client, the model name it answers to."""

    url: str
    client: object
    model: str
    served: object


@contextlib.contextmanager
def live(served, model: str):
    """Run ``served.app`` with uvicorn on a free 127.0.0.1 port in a thread; always stopped."""
    import openai
    import uvicorn

    from lookahead.serve.app import bind

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(served.app, log_level="warning", timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=60, max_retries=0)
    try:
        yield Live(url, client, model, served)
    finally:
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S)
        sock.close()


@dataclass
class Pair:
    look: Live
    plain: Live


def embedded_options(**kwargs):
    from lookahead.default_model import default_model_path
    from lookahead.serve.app import ServeOptions

    return ServeOptions(**{"model_dir": str(default_model_path()), **kwargs})
