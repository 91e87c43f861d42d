"""Reading and checking request bodies: limits, JSON, the texts of /translate, search options.

The search options a request may hold are `seq2seq.inference.options.SEARCH_OPTIONS` (the options
of the command line), each checked by the same `check_type` and, in the app, resolved by the
model's `search_config` (`resolve_search`): a request and the command line accept and refuse the
same values with the same message. Every refusal is a `RequestError` with its HTTP status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seq2seq.inference.options import SEARCH_OPTIONS, check_type

if TYPE_CHECKING:
    from fastapi import Request


@dataclass
class Limits:
    """What one request may ask for, and how requests are batched."""

    max_texts: int = 64  # texts (or files) per request
    max_chars: int = 2000  # characters per text
    max_body_bytes: int = 1 << 20  # request body (JSON); an uploaded file may have max_upload_bytes
    max_upload_bytes: int = 20 << 20
    max_beam: int = 16  # beam and nbest
    max_batch: int = 64  # texts per model call gathered from concurrent requests (a larger request runs alone)
    batch_window_ms: float = 5.0  # how long the worker waits for more requests to join a batch
    max_queue: int = 1024  # texts waiting; more: 503
    batch_tokens: int = 4000  # padded source tokens per batch inside a model call

    def __post_init__(self) -> None:
        for name in ("max_texts", "max_chars", "max_body_bytes", "max_upload_bytes", "max_beam", "max_batch",
                     "max_queue", "batch_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_window_ms < 0:
            raise ValueError(f"batch_window_ms must be >= 0, got {self.batch_window_ms}")
        if self.max_queue < self.max_texts:
            raise ValueError(f"max_queue ({self.max_queue}) must be >= max_texts ({self.max_texts})")


class RequestError(Exception):
    """A request the server refuses: HTTP status and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


async def read_json(request: Request, limit: int) -> Any:
    """The request body parsed as JSON: 413 over `limit` bytes, 400 for anything that is not JSON."""
    body = await read_body(request, limit, "request body")
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise RequestError(400, f"the request body is not UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise RequestError(400, f"the request body is not valid JSON: {e}") from None


async def read_body(request: Request, limit: int, what: str) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestError(413, f"the {what} has {int(length)} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"the {what} is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_options(fields: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """Search options from a request's fields (already without text/texts/paths): 422 for an unknown
    field or a value of the wrong type, 413 for a beam or nbest over the limit. None leaves an option
    unset. The values are then resolved against the model's defaults by its `search_config`."""
    options = {}
    for name, value in fields.items():
        if name not in SEARCH_OPTIONS:
            raise RequestError(422, f"unknown field {name!r}; search options are {', '.join(SEARCH_OPTIONS)}")
        if value is None:
            continue
        try:
            options[name] = check_type(name, value)
        except ValueError as e:
            raise RequestError(422, str(e)) from None
    for name in ("beam", "nbest"):
        if options.get(name, 0) > limits.max_beam:
            raise RequestError(413, f"{name} {options[name]} is over this server's limit of {limits.max_beam}")
    return options


def parse_texts(body: Any, limits: Limits) -> tuple[list[str], bool, dict[str, Any]]:
    """(texts, single, other fields) of a /translate body: {"text": str} or {"texts": [str, ...]}."""
    if not isinstance(body, dict):
        raise RequestError(422, f"the request body must be a JSON object such as {{\"text\": \"...\"}}, "
                                f"not {type(body).__name__}")
    fields = dict(body)
    if ("text" in fields) == ("texts" in fields):
        raise RequestError(422, "give either \"text\" (one string) or \"texts\" (a list of strings)")
    single = "text" in fields
    if single:
        text = fields.pop("text")
        if not isinstance(text, str):
            raise RequestError(422, f"\"text\" must be a string, got {json.dumps(text)[:80]}")
        texts = [text]
    else:
        texts = fields.pop("texts")
        if not isinstance(texts, list):
            raise RequestError(422, f"\"texts\" must be a list of strings, got {json.dumps(texts)[:80]}")
        if len(texts) > limits.max_texts:
            raise RequestError(413, f"{len(texts)} texts in one request; the limit is {limits.max_texts}")
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise RequestError(422, f"texts[{i}] must be a string, got {json.dumps(t)[:80]}")
    for i, t in enumerate(texts):
        if len(t) > limits.max_chars:
            where = "text" if single else f"texts[{i}]"
            raise RequestError(413, f"{where} has {len(t)} characters; the limit is {limits.max_chars}")
    return texts, single, fields


def parse_paths(body: Any, limits: Limits, allow_paths: bool) -> tuple[list[str], dict[str, Any]]:
    """(paths, other fields) of a JSON /generate body {"paths": [str, ...], ...}: 403 unless the server
    reads files of its own (allow_paths)."""
    if not isinstance(body, dict) or not isinstance(body.get("paths"), list):
        raise RequestError(422, "a JSON body must be {\"paths\": [\"file\", ...]}; or POST the file's bytes")
    if not allow_paths:
        raise RequestError(403, "this server reads no files of its own (start it with --allow-paths); "
                                "POST the file's bytes instead")
    fields = dict(body)
    paths = fields.pop("paths")
    if len(paths) > limits.max_texts:
        raise RequestError(413, f"{len(paths)} paths in one request; the limit is {limits.max_texts}")
    if not all(isinstance(p, str) for p in paths):
        raise RequestError(422, "\"paths\" must be a list of strings")
    return list(paths), fields


def query_options(params: Any, limits: Limits) -> dict[str, Any]:
    """Search options from a query string (?beam=3&lenpen=0.6), its values read as JSON would give them."""
    return parse_options({k: query_value(v) for k, v in params.items()}, limits)


def query_value(raw: str) -> Any:
    """A query-string value as JSON would give it (3, 0.6, true), else the string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw
