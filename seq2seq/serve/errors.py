"""How the server answers what went wrong, and what a result drew: every error a JSON object
`{"error": message}` with its HTTP status (`error_response`, the app's handlers: `add_error_handlers`;
`seq2seq.serve.app` lists the statuses), 401 without the API key (`RequireApiKey`), an error of the
model call about one input named as the request names it (`refused`). A result object's warnings are
`seq2seq.inference.results.with_diagnostics`.
"""

from __future__ import annotations

import logging
import re
from typing import Callable, Mapping

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.serve.requests import RequestError, check_api_key

log = logging.getLogger("seq2seq.serve.app")  # the server's log lines keep one name, whichever module logs them


def error_response(status: int, message: str, headers: dict[str, str] | None = None,
                   details: Mapping[str, str | int] | None = None) -> JSONResponse:
    """{"error": message} and the `details` of a refused input ("code", "field", "index"); characters
    UTF-8 cannot encode (a lone surrogate echoed back) are escaped."""
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"error": message, **(details or {})}, status_code=status, headers=headers)


class RequireApiKey:
    """ASGI middleware: 401 for every request without the API key (see `check_api_key`), except
    GET /health, which load balancers and probes poll, and GET / (the demo page: a static file that
    asks for the key and sends it with each request it makes)."""

    OPEN = ("/health", "/")

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self.key = app, key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not (scope["method"] in ("GET", "HEAD") and scope["path"] in self.OPEN):
            try:
                check_api_key(Headers(scope=scope), self.key)
            except RequestError as e:
                await error_response(e.status, e.message, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await self.app(scope, receive, send)


def as_request_field(message: str) -> str:
    """`message` with the command line's search flags named as request fields ("--beam 5" -> "beam 5")."""
    from seq2seq.config.search import SEARCH_OPTIONS

    def field(m: re.Match) -> str:
        name = m[1].replace("-", "_")
        return name if name in SEARCH_OPTIONS else m[0]

    return re.sub(r"--([a-z][a-z-]*[a-z])", field, message)


def refused(e: Seq2SeqError, name: Callable[[int], str]) -> RequestError:
    """422 for an error of the model call about one of its inputs, which the request names name(index)
    ("texts[2]") where the model said "line N" (N = index + 1); the diagnostic's code, field and index
    go in the answer beside the message."""
    d = e.diagnostic
    where = "" if d.index is None else f"{name(d.index)}: "
    return RequestError(422, as_request_field(where + d.message), d)


def add_error_handlers(app: FastAPI) -> None:
    """Every error a JSON object {"error": message} with its status; a failure of ours a logged 500."""

    @app.exception_handler(RequestError)
    async def request_error(request: Request, e: RequestError) -> JSONResponse:
        return error_response(e.status, e.message, details=e.details)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no such endpoint: {request.method} {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(e.status_code, str(e.detail))
        return error_response(e.status_code, message, getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> JSONResponse:
        log.exception("request %s %s failed", request.method, request.url.path)
        return JSONResponse({"error": f"internal error: {type(e).__name__}"}, status_code=500)
