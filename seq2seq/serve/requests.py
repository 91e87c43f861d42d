"""Reading and checking request bodies: limits, JSON, the texts of /translate, search options, steering.

The search options a request may hold are `seq2seq.config.search.SEARCH_OPTIONS` (the options
of the command line), each checked by the same `check_type` and, in the app, resolved by the
model's `search_config` (`resolve_search`): a request and the command line accept and refuse the
same values with the same message. Every refusal is a `RequestError` with its HTTP status.

A request is checked before anything of it reaches the model: its API key (401), its Content-Type
(415), its body size (413), JSON syntax and depth (400), shape and values (422): a text must be
valid Unicode (no lone surrogate such as "\\ud800", which JSON can spell but UTF-8 cannot).

Steering (docs/decoding-controls.md): a request may hold `prefix` (a string: each output starts
with it), `constraints` (a list of strings that must each appear) and `avoid` (a list of strings
that must not appear), for all its texts; an item of "texts" may be an object {"text": ...,
"prefix": ..., "constraints": [...], "avoid": [...]} holding its own (its constraints and avoid add
to the request's; a prefix given for both is refused). Their shape is checked here (422, 413 over
the limits); whether the model can honour them (an empty phrase, text its vocabulary cannot write,
more constraints than the beam holds, constraints without beam search) is checked by the app with
`seq2seq.inference.steering`, also 422.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, TypedDict, cast

from seq2seq.config import json_reader
from seq2seq.config.json_reader import JSONObject, JSONValue
from seq2seq.config.diagnostics import Diagnostic, Seq2SeqError
from seq2seq.documents.formats import FORMAT_NAMES
from seq2seq.documents.line_translation import PIPELINE_STEPS
from seq2seq.inference.inputs import (
    PHRASE_FIELDS, SHARED_FIELDS, CallOptions, FieldError, SourceInput, read_input,
    read_steering_fields,
)
from seq2seq.inference.inputs import check_unicode as check_field_unicode
from seq2seq.config.search import SEARCH_OPTIONS, check_type
from seq2seq.inference.controls import SteeringError
from seq2seq.model.encoders.sources import SourceLimits, SourceProcessor, SourceTooLarge

if TYPE_CHECKING:
    from fastapi import Request
    from starlette.datastructures import Headers

MAX_JSON_DEPTH = 32  # nested arrays/objects in a request body; no valid request needs more than 3
UPLOAD_TYPES = ("application/octet-stream", "image/", "audio/")  # media types a /generate upload may have
# A request's fields for the call that are not search options (each checked by the model), with an example:
CALL_FIELDS = {"tgt_lang": '"de"', "terms": '"annotate", "constrain" or "both"', "term_forms": '"exact" or "inflected"',
               "adapter": '"de-med"'}  # adapter: one of `serve --adapter NAME=DIR` (seq2seq.adapters.serving)


class PipelineSteps(TypedDict, total=False):
    """The text pipeline's steps (`PIPELINE_STEPS`, `translate_lines`' switches), each on or off."""

    split_sentences: bool
    casing: bool
    loop_guard: bool
    spans: bool
    markup: bool


class RequestOptions(CallOptions, PipelineSteps, total=False):
    """A request's options as `parse_options` checks them: its search options and the `Call` fields a
    request may give (tgt_lang, terms, term_forms; an upload's timestamps, the attention route's
    attention_layer), the text pipeline's steps, what each text is (`format`) and the adapter it runs
    with."""

    adapter: str
    format: str


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
    max_pixels: int = 40_000_000  # width x height of an image (read from its header, before decoding)
    max_audio_seconds: float = 300.0  # duration of an audio file (read from its header, before decoding)
    max_phrases: int = 256  # constraints + avoid phrases per text (each at most max_chars characters)
    max_len: int = 512  # the largest max_len_b (output tokens beyond max_len_a x the source) a request may ask for
    max_work: int = 1_000_000  # decoder steps a request may ask for: its length limits x beam (`serve.budget`)
    request_timeout_s: float = 30.0  # from the queue to the answer; past it 504, its search stopped
    read_timeout_s: float = 10.0  # the most a request's head may take to arrive, and its body between two reads

    def __post_init__(self) -> None:
        for name in ("max_texts", "max_chars", "max_body_bytes", "max_upload_bytes", "max_beam", "max_batch",
                     "max_queue", "batch_tokens", "max_pixels", "max_phrases", "max_len", "max_work"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.max_audio_seconds > 0:
            raise ValueError(f"max_audio_seconds must be > 0, got {self.max_audio_seconds}")
        for name in ("request_timeout_s", "read_timeout_s"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a number of seconds > 0, got {getattr(self, name)}")
        if self.batch_window_ms < 0:
            raise ValueError(f"batch_window_ms must be >= 0, got {self.batch_window_ms}")
        if self.max_queue < self.max_texts:
            raise ValueError(f"max_queue ({self.max_queue}) must be >= max_texts ({self.max_texts})")

    def source_limits(self) -> SourceLimits:
        """The limits on one source file, for its processor's `check_limits`."""
        return SourceLimits(max_pixels=self.max_pixels, max_seconds=self.max_audio_seconds)


class RequestError(Seq2SeqError):
    """A request the server refuses: HTTP status and a message for the client; `cause`, for an input
    the model or a field reader refused, is that error's `Diagnostic`, whose code, field and index
    (`details`) go in the answer beside the message."""

    def __init__(self, status: int, message: str, cause: Diagnostic | None = None) -> None:
        super().__init__(message)
        self.status, self.cause = status, cause

    @property
    def message(self) -> str:
        return self.diagnostic.message

    @property
    def details(self) -> dict[str, str | int]:
        """{"code", "field", "index"} of the refused input (those it has), or {} for a request as a whole."""
        return self.cause.details() if self.cause is not None else {}


def media_type(headers: Headers) -> tuple[str, str | None]:
    """(media type, charset) of a request's Content-Type, lower-cased; ("", None) when there is none."""
    kind, *params = headers.get("content-type", "").split(";")
    charset = None
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
    return kind.strip().lower(), charset


def require_json(headers: Headers) -> None:
    """415 unless the request says it holds JSON (`Content-Type: application/json`, optionally with
    charset=utf-8). A web page can POST text/plain or a form to any address without asking (no CORS
    preflight), but not application/json: so other sites' pages cannot use the server."""
    kind, charset = media_type(headers)
    if kind != "application/json" or charset not in (None, "utf-8", "utf8"):
        got = headers.get("content-type")
        raise RequestError(415, "send the body as JSON with the header Content-Type: application/json "
                                f"(got {'no Content-Type' if got is None else repr(got)})")


def require_upload_type(headers: Headers) -> None:
    """415 unless a /generate body that is not JSON declares itself a file (`UPLOAD_TYPES`)."""
    kind = media_type(headers)[0]
    if not kind.startswith(UPLOAD_TYPES):
        raise RequestError(415, "POST the file's bytes with its type (Content-Type: image/png, audio/wav, ... "
                                "or application/octet-stream), or JSON {\"paths\": [...]} as application/json "
                                f"(got {'no Content-Type' if not kind else repr(kind)})")


def check_key_format(key: str) -> None:
    """ValueError unless `key` can be an API key: not empty, no spaces or control characters (a
    header value cannot carry them intact)."""
    if not key or not key.isprintable() or any(c.isspace() for c in key):
        raise ValueError("the API key must be a non-empty string without spaces or control characters")


def check_api_key(headers: Headers, key: str) -> None:
    """401 unless the request carries `key` as `Authorization: Bearer KEY` or `X-API-Key: KEY`
    (compared in constant time)."""
    scheme, _, given = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer":
        given = headers.get("x-api-key", "")
    # header values arrive as latin-1 strings: their bytes are what the client sent
    if not given or not hmac.compare_digest(given.strip().encode("latin-1"), key.encode("utf-8")):
        raise RequestError(401, "this server needs an API key: send the header Authorization: Bearer KEY"
                                if not given else "wrong API key")


async def read_json(request: Request, limit: int, idle_timeout: float | None = None) -> JSONValue:
    """The request body parsed as JSON: 413 over `limit` bytes, 408 when the client sends nothing for
    `idle_timeout` seconds (`read_body`), 400 for anything that is not JSON or nests arrays/objects
    deeper than MAX_JSON_DEPTH."""
    body = await read_body(request, limit, "request body", idle_timeout)
    too_deep_message = f"the request body nests JSON arrays/objects more than {MAX_JSON_DEPTH} levels deep"
    try:
        value: JSONValue = json_reader.loads(body.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise RequestError(400, f"the request body is not UTF-8 (byte {e.start})") from None
    except json_reader.JSONLimitError as e:  # a number of 5,000 digits, or nesting past the parser's limit
        raise RequestError(400, too_deep_message if e.nesting else f"the request body is not valid JSON: {e}") from None
    except json.JSONDecodeError as e:
        raise RequestError(400, f"the request body is not valid JSON: {e}") from None
    if too_deep(value, MAX_JSON_DEPTH):
        raise RequestError(400, too_deep_message)
    return value


def too_deep(value: JSONValue, limit: int) -> bool:
    """Does `value` nest lists/dicts more than `limit` levels deep? (Iterative: any depth is safe.)"""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def check_unicode(text: str, where: str) -> None:
    """422 for a string that UTF-8 cannot encode: a lone surrogate (\\ud800 to \\udfff), which JSON
    can spell as an escape; the model's tokenizer would fail on it (`seq2seq.inference.inputs.check_unicode`)."""
    try:
        check_field_unicode(text, where)
    except FieldError as e:
        raise RequestError(422, str(e), e.diagnostic) from None


async def read_body(request: Request, limit: int, what: str, idle_timeout: float | None = None) -> bytes:
    """The request's body: 413 over `limit` bytes (by its Content-Length, or as it arrives), 408 when no
    byte of it arrives for `idle_timeout` seconds (None: no limit), as nginx's client_body_timeout."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestError(413, f"the {what} has {int(length)} bytes; the limit is {limit}")
    chunks, size = [], 0
    stream = request.stream()
    while True:
        try:
            chunk = await asyncio.wait_for(anext(stream), idle_timeout)
        except StopAsyncIteration:
            break
        except TimeoutError:
            raise RequestError(408, f"the {what} stopped arriving: nothing came for {idle_timeout:g} s "
                                    f"after {size} bytes") from None
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"the {what} is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_options(fields: Mapping[str, JSONValue], limits: Limits) -> RequestOptions:
    """Search options from a request's fields (already without text/texts/paths), `tgt_lang` (a
    multilingual model's target language), `terms` and `term_forms` (how terms reach the model,
    docs/terminology.md), `split_sentences`, `casing` and `loop_guard` (the text pipeline's steps), `format` (what each
    text is: text, html, xml or markdown; seq2seq.documents.formats): 422 for an unknown field or a value of the wrong type, 413
    for a beam or nbest over the limit, or a max_len_b over max_len. None leaves an option unset. The values are then resolved against the model's defaults by its `search_config`."""
    checked: dict[str, JSONValue] = {}  # (the call fields' strings, the search options' numbers and switches)
    for name, value in fields.items():
        if name in PIPELINE_STEPS:  # the text pipeline's steps, true or false; unset: the model's defaults
            if value is not None and not isinstance(value, bool):
                raise RequestError(422, f"{name} must be true or false, got {json.dumps(value)[:40]}")
            if value is not None:
                checked[name] = value
            continue
        if name == "format":  # what each text is: seq2seq.documents.formats
            if value is not None and value not in FORMAT_NAMES:
                raise RequestError(422, f"format must be one of {', '.join(FORMAT_NAMES)}, got {json.dumps(value)[:40]}")
            if value is not None:
                checked[name] = value
            continue
        if name in CALL_FIELDS:  # a multilingual model's target language; how terms reach the model
            example = CALL_FIELDS[name]
            if value is not None and not isinstance(value, str):
                raise RequestError(422, f"{name} must be a string such as {example}, got {json.dumps(value)[:40]}")
            if value is not None:
                checked[name] = value  # (checked by the model)
            continue
        if name not in SEARCH_OPTIONS:
            raise RequestError(422, f"unknown field {name!r}; search options are {', '.join(SEARCH_OPTIONS)}; "
                                    f"steering: {', '.join(SHARED_FIELDS)}; {'; '.join(CALL_FIELDS)}; "
                                    f"{', '.join(PIPELINE_STEPS)}; format")
        if value is None:
            continue
        try:
            checked[name] = check_type(name, value)
        except ValueError as e:
            raise RequestError(422, str(e)) from None
    # every key is one of the fields above and every value of its type: the options a request may give
    options = cast(RequestOptions, checked)
    for name, size in (("beam", options.get("beam")), ("nbest", options.get("nbest"))):
        if size is not None and size > limits.max_beam:
            raise RequestError(413, f"{name} {size} is over this server's limit of {limits.max_beam}")
    max_len_b = options.get("max_len_b")
    if max_len_b is not None and max_len_b > limits.max_len:
        raise RequestError(413, f"max_len_b {max_len_b} is over this server's limit of {limits.max_len} "
                                "output tokens")
    return options


def parse_texts(body: JSONValue, limits: Limits) -> tuple[list[SourceInput], bool, JSONObject]:
    """(inputs, single, other fields) of a /translate body: {"text": str} or {"texts": [...]}, each item
    of "texts" one input's JSON form (`seq2seq.inference.inputs`: a string or an object {"text": str,
    "prefix", "constraints", "avoid"}, read as `translate --json-input` reads a line), the request's
    own steering fields merged into each (`SourceInput.with_shared`; see the module docstring)."""
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
        _check_text(text, "text", limits)
        inputs = [SourceInput(text)]
    else:
        items = fields.pop("texts")
        if not isinstance(items, list):
            raise RequestError(422, f"\"texts\" must be a list of strings, got {json.dumps(items)[:80]}")
        if len(items) > limits.max_texts:
            raise RequestError(413, f"{len(items)} texts in one request; the limit is {limits.max_texts}")
        inputs = [_read_item(item, f"texts[{i}]", limits) for i, item in enumerate(items)]  # one input's JSON form
    shared = parse_steering(fields, limits)
    return [with_shared(x, shared, f"texts[{i}]", limits) for i, x in enumerate(inputs)], single, fields


def parse_steering(fields: JSONObject, limits: Limits, where: str = "") -> SourceInput:
    """The steering fields a request gives all its texts (`SHARED_FIELDS`) popped from `fields`, read as every front-end reads them
    (`seq2seq.inference.inputs`): 422 for a wrong type or text that is not valid Unicode, 413
    over max_chars characters (a prefix or phrase) or max_phrases phrases. The fields as an input without
    text, whose fields not given (or null) are None, for `SourceInput.with_shared`. `where` prefixes the
    names in messages."""
    try:
        shared = read_steering_fields(fields, where, lambda text, name: _check_text(text, name, limits),
                                      SHARED_FIELDS)
    except FieldError as e:
        raise RequestError(422, str(e), e.diagnostic) from None
    _check_phrase_count(shared, where.rstrip(".") or "the request", limits)
    return shared


def with_shared(given: SourceInput, shared: SourceInput, name: str, limits: Limits) -> SourceInput:
    """One input with the request's steering (`shared`) merged in (`SourceInput.with_shared`): 422 for
    a prefix in both, 413 over max_phrases phrases. `name`: how messages call the input ("texts[2]")."""
    try:
        merged = given.with_shared(shared, f"{name}.", "the request's")
    except SteeringError as e:
        raise RequestError(422, str(e)) from None
    _check_phrase_count(merged, name, limits)
    return merged


def _read_item(item: JSONValue, name: str, limits: Limits) -> SourceInput:
    """An item of "texts" read as every front-end reads an input (`seq2seq.inference.inputs.read_input`):
    422 for a wrong shape, 413 over the limits."""
    try:
        return read_input(item, name, ".", lambda text, where: _check_text(text, where, limits))
    except FieldError as e:
        raise RequestError(422, str(e), e.diagnostic) from None


def _check_text(text: str, where: str, limits: Limits) -> None:
    if len(text) > limits.max_chars:
        raise RequestError(413, f"{where} has {len(text)} characters; the limit is {limits.max_chars}")
    check_unicode(text, where)


def _check_phrase_count(steering: SourceInput, where: str, limits: Limits) -> None:
    n = sum(len(getattr(steering, name) or []) for name in PHRASE_FIELDS)
    if n > limits.max_phrases:
        raise RequestError(413, f"{where} has {n} constraints and avoid phrases; the limit is {limits.max_phrases}")


def parse_paths(body: JSONValue, limits: Limits, allow_paths: bool) -> tuple[list[str], JSONObject]:
    """(paths, other fields) of a JSON /generate body {"paths": [str, ...], ...}: 403 unless the server
    reads files of its own (allow_paths)."""
    if not isinstance(body, dict) or not isinstance(paths := body.get("paths"), list):
        raise RequestError(422, "a JSON body must be {\"paths\": [\"file\", ...]}; or POST the file's bytes")
    if not allow_paths:
        raise RequestError(403, "this server reads no files of its own (start it with --allow-paths); "
                                "POST the file's bytes instead")
    fields = {k: v for k, v in body.items() if k != "paths"}
    if len(paths) > limits.max_texts:
        raise RequestError(413, f"{len(paths)} paths in one request; the limit is {limits.max_texts}")
    names = [p for p in paths if isinstance(p, str)]
    if len(names) != len(paths):
        raise RequestError(422, "\"paths\" must be a list of strings")
    for i, p in enumerate(names):
        check_unicode(p, f"paths[{i}]")
    return names, fields


def query_options(params: Mapping[str, str], limits: Limits) -> RequestOptions:
    """Search options from a query string (?beam=3&lenpen=0.6), its values read as JSON would give them."""
    return parse_options({k: query_value(v) for k, v in params.items()}, limits)


def query_steering(params: dict[str, list[str]], limits: Limits) -> SourceInput:
    """Steering from an upload's query string (popped from `params`, a dict of lists): `prefix` as
    written (one value); `constraints` and `avoid` each a JSON list of strings (?avoid=["a cat","dog"]),
    or one phrase per value (?avoid=dog&avoid=a%20cat). Checked as `parse_steering` checks a body's."""
    fields: JSONObject = {}
    prefix = params.pop("prefix", None)
    if prefix is not None:
        if len(prefix) != 1:
            raise RequestError(422, f"prefix is given {len(prefix)} times in the query string; give it once")
        fields["prefix"] = prefix[0]
    for name in PHRASE_FIELDS:
        values = params.pop(name, None)
        if values is None:
            continue
        listed = query_value(values[0]) if len(values) == 1 else None
        fields[name] = listed if isinstance(listed, list) else list(values)
    return parse_steering(fields, limits)


def query_value(raw: str) -> JSONValue:
    """A query-string value as JSON would give it (3, 0.6, true), else (not JSON, or nested too
    deeply) the string."""
    try:
        value: JSONValue = json_reader.loads(raw)
    except json.JSONDecodeError:
        return raw
    return raw if too_deep(value, MAX_JSON_DEPTH) else value


def check_source_size(path: str, processor: SourceProcessor, limits: Limits, name: str) -> None:
    """413 when the source file is over the server's limits (pixels of an image, seconds of audio),
    read by the model's processor from the file's header before anything is decoded
    (`SourceProcessor.check_limits`: every kind of source, Hugging Face backbones included). `name`
    is how the message calls the file. A file that cannot be probed passes: the processor then refuses
    it, naming what is wrong (422)."""
    try:
        processor.check_limits(path, limits.source_limits(), name)
    except SourceTooLarge as e:
        raise RequestError(413, str(e)) from None
