"""One error shape for every answer that is not a success, OpenAI's:
``{"error": {"message", "type", "param", "code"}}`` with the HTTP status (the ``openai`` client
then shows ``message`` as ``e.message``).

``ApiError`` is what lookahead's own checks raise; :func:`install` makes the app answer it, and
turns what transformers and FastAPI raise (``HTTPException``, a body that is no JSON object, an
unknown route) into the same shape. A 500 is only ever our own bug: logged with its traceback
on the server (``gate.Gate``), never shown to the client.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("lookahead.serve")

# OpenAI's error types, by status: what a client switches on besides the status
TYPES = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error", 500: "server_error"}


class ApiError(Exception):
    """A request refused with ``status``: ``message`` says what was wrong, with the value and
    what is allowed; ``param`` names the request field (None when no one field is at fault);
    ``code`` is a short machine-readable reason (``context_length_exceeded``, ...)."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    """The JSON of an error answer."""
    kind = TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None):
    from starlette.responses import JSONResponse

    return JSONResponse(error_body(status, message, param, code), status_code=status)


def install(app) -> None:
    """Answer ``ApiError``, ``HTTPException`` (transformers' handlers, FastAPI's 404 and 405) and
    FastAPI's body validation (``body: dict`` routes) in the OpenAI shape."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    async def api_error(_request, exc: ApiError):
        return error_response(exc.status, exc.message, exc.param, exc.code)

    async def http_error(request, exc: HTTPException):
        if exc.status_code == 404 and exc.detail == "Not Found":
            return error_response(404, f"no route {request.method} {request.url.path}", code="unknown_url")
        if exc.status_code == 405:
            return error_response(405, f"{request.url.path} does not take {request.method}", code="method_not_allowed")
        return error_response(exc.status_code, str(exc.detail))

    async def invalid_body(_request, exc: RequestValidationError):
        return error_response(400, body_message(exc.errors()), code="invalid_json")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_body)


def body_message(errors) -> str:
    """What FastAPI's validation of a ``body: dict`` route found, in words: the body is no JSON,
    or JSON but not an object."""
    kinds = {error.get("type") for error in errors}
    if "json_invalid" in kinds:
        error = next(e for e in errors if e.get("type") == "json_invalid")
        where = error.get("loc", ("body", "?"))[-1]
        reason = (error.get("ctx") or {}).get("error", "not JSON")
        return f"the request body is not valid JSON ({reason} at character {where})"
    if "missing" in kinds:
        return "the request has no body: send a JSON object"
    return "the request body must be a JSON object"
