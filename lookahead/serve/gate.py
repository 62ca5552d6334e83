"""The ASGI middleware every request passes first: the API key, the body's size, whether the
client is still there, and a 500 for our own bugs.

It sits outside FastAPI's routing (``app.add_middleware``, added last, so outermost but for
Starlette's own error middleware) and reads only headers before it decides:

- ``--api-key``: every route but ``/health`` needs ``Authorization: Bearer KEY``: 401 otherwise,
  before the body is read;
- ``--max-request-bytes``: a ``Content-Length`` over the limit is a 413 before one body byte is
  read; a body without one (chunked) is counted as it arrives and refused once past the limit;
- the client going away: once the body is read, one task waits for the disconnect and sets
  :data:`client_gone`'s event (the handlers hand it to the decode, which stops at its next step);
- an exception no handler answered: logged with its traceback, a 500 saying only that (the
  client never sees our internals);
- after a request with a large body, the memory it took is handed back to the system
  (``malloc_trim``): a refused 4 MiB prompt does not leave the process 1 GB larger.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import hmac
import logging
import threading

from lookahead.serve.errors import error_body

logger = logging.getLogger("lookahead.serve")
OPEN_PATHS = ("/health",)  # answered without the API key: a load balancer's probe
TRIM_AFTER_BYTES = 64 << 10  # a prompt this large takes tens of MB to tokenize: worth handing back
client_gone: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("client_gone", default=None)


class Refused(Exception):
    """A request the gate answers itself, before the app sees it."""

    def __init__(self, status: int, message: str, code: str, headers: tuple = ()):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers


class Gate:
    """The middleware (see the module's docstring); ``api_key`` None: no key needed."""

    def __init__(self, app, max_request_bytes: int, api_key: str | None = None):
        self.app, self.limit, self.api_key = app, max_request_bytes, api_key

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        try:
            self._check_key(scope["path"], headers.get("authorization"))
            declared = self._check_length(headers.get("content-length"))
            body = [] if declared is not None else await self._read_counted(receive)
        except Refused as refused:
            await _answer(send, refused.status, refused.message, refused.code, refused.headers)
            return
        await self._run(scope, receive, send, body)
        if (declared or sum(len(m.get("body", b"")) for m in body)) >= TRIM_AFTER_BYTES:
            await asyncio.to_thread(_hand_back_memory)

    def _check_key(self, path: str, authorization: str | None) -> None:
        if self.api_key is None or path in OPEN_PATHS:
            return
        scheme, _, given = (authorization or "").partition(" ")
        if not authorization:
            message = "this server needs an API key: send the header Authorization: Bearer KEY"
        elif scheme.lower() != "bearer":
            message = f"the Authorization header must be 'Bearer KEY', not a {scheme!r} credential"
        elif not hmac.compare_digest(given.strip().encode(), self.api_key.encode()):
            message = "the API key given is not this server's"  # never echoed: logs and proxies keep answers
        else:
            return
        raise Refused(401, message, "invalid_api_key", ((b"www-authenticate", b"Bearer"),))

    def _check_length(self, declared: str | None) -> int | None:
        if declared is None:
            return None
        if not declared.strip().isdigit():
            raise Refused(400, f"Content-Length must be a byte count, got {declared!r}", "invalid_content_length")
        length = int(declared)
        if length > self.limit:
            raise Refused(413, _too_large(f"{length:,} bytes", self.limit), "request_too_large")
        return length

    async def _read_counted(self, receive) -> list[dict]:
        """A body without ``Content-Length`` (chunked, or none), read here up to the limit: the
        messages that carried it, for the app to read in turn."""
        messages, total = [], 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            total += len(message.get("body", b""))
            if total > self.limit:
                raise Refused(413, _too_large(f"over {total:,} bytes", self.limit), "request_too_large")
            if not message.get("more_body", False):
                return messages

    async def _run(self, scope, receive, send, body: list[dict]) -> None:
        """The app, given the body (``body``: the messages read already, else from ``receive``)
        and then, once it is read, a disconnect only when the client has really gone; an
        exception it raised before answering is a logged 500."""
        gone, watcher, started = threading.Event(), None, False
        waiting = asyncio.Event()
        pending = list(body)

        async def watch() -> None:
            message = {"type": ""}
            while message["type"] != "http.disconnect":
                message = await receive()
            gone.set()
            waiting.set()

        async def app_receive():
            nonlocal watcher
            if pending:
                message = pending.pop(0)
            elif watcher is None:
                message = await receive()
            else:  # the body is read: only a disconnect is left to report, and the watcher reports it
                await waiting.wait()
                return {"type": "http.disconnect"}
            if message["type"] == "http.request" and not message.get("more_body", False) and watcher is None:
                watcher = asyncio.ensure_future(watch())
            return message

        async def app_send(message) -> None:
            nonlocal started
            started = True
            await send(message)

        token = client_gone.set(gone)
        try:
            await self.app(scope, app_receive, app_send)
        except Exception:
            logger.exception("internal error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await _answer(send, 500, "internal server error: the server logged it", None)
        finally:
            client_gone.reset(token)
            if watcher is not None:
                watcher.cancel()


async def _answer(send, status: int, message: str, code: str | None, headers: tuple = ()) -> None:
    import json

    payload = json.dumps(error_body(status, message, None, code)).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": payload})


def _too_large(size: str, limit: int) -> str:
    return f"the request body is {size}; this server takes at most {limit:,} (--max-request-bytes)"


def _hand_back_memory() -> None:
    """Hand glibc's free pages back to the system: without it the memory a large prompt took to
    tokenize (about 250 bytes a byte of prompt) stays with the process."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator decides
        pass
