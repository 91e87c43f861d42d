"""An HTTP server for a model directory: `seq2seq serve MODEL_DIR` (FastAPI + uvicorn, the `serve` extra).

    POST /translate  {"text": "A dog runs."}            -> {"text": ..., "score": ..., "logprob": ..., "tokens": [...]}
                     {"texts": ["A dog.", "A man."], "beam": 5} -> {"translations": [{...}, {...}]}
                     {"text": "...", "prefix": "Ein", "constraints": ["Hund"], "avoid": ["Katze"]}
    POST /generate   image/audio models: the file's bytes as the body (options in the query string,
                     ?beam=3), or {"paths": [...], ...} when started with allow_paths
    GET  /health     {"status": "ok", "model": ..., "kind": "text", "queue": 0, ...}

Each result object is what `seq2seq translate --json` (or `caption/transcribe --json`) prints for
that input, with an "nbest" list when nbest > 1. Search options are those of the command line
(`seq2seq.inference.options.SEARCH_OPTIONS`: beam, nbest, greedy, sample, lenpen, max_len_a,
max_len_b, min_len, no_repeat_ngram, topk, topp, temperature, seed), checked by the same rules
(seq2seq.serve.requests); unset ones keep the model's `decoding` config.

Steering (docs/decoding-controls.md): `prefix`, `constraints` and `avoid` for a request's texts
(or per item of "texts"; for an upload, in the query string), and the server's glossary
(`create_app(glossary=...)`, `seq2seq serve --glossary`), whose target terms become constraints of
the texts holding its source terms. They are checked before the request is queued, by
`seq2seq.inference.steering` as the command line checks them (422 with the message, the input named
as "texts[2]" instead of "line 3"), and travel with each text, so steered and plain requests with
the same search options still share model calls. A result object has "warnings" (a list of lines)
when its input drew any, e.g. constraints that could not be met within the length limit.

Batching (seq2seq.serve.batcher): requests go to one worker thread (the only one that touches the
model). It takes the first waiting request, gathers whatever else arrives within `batch_window_ms`
(or until `max_batch` texts), and runs one model call per set of search options, so concurrent
requests share batches. Sampling requests are never merged: a request with a seed gets what
`Translator.translate(texts, sample=True, seed=...)` gives.

Errors are JSON objects `{"error": "message"}`, never a traceback: 400 for a body that is not
JSON (or nests too deeply), 401 without the API key (when started with one; GET /health stays
open), 413 for one over a limit (body bytes, texts per request, characters per text, pixels of an
image, seconds of audio), 415 for a POST that is not `Content-Type: application/json` (or, for an
upload, the file's image/*, audio/* or application/octet-stream), 422 for a request that is JSON
but wrong (a missing or mistyped field, a text that is not valid Unicode, an unknown or conflicting
search option), 503 when the queue is full or the server is stopping, 500 if the model itself fails
(logged in full on the server). A request's error is its own: if a batch gathered from several
requests fails, the batcher runs them again one by one, and only the culprit fails.

On SIGINT/SIGTERM the server stops accepting connections, lets the requests in flight finish, then
stops the worker (`run_server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import os
import re
import signal
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from seq2seq.inference.formats import formatter
from seq2seq.inference.generator import Transcriber
from seq2seq.inference.glossary import Glossary
from seq2seq.inference.steering import (Steering, SteeringError, check_steering, encode_steering, steer_inputs,
                                       term_mode)
from seq2seq.model.encoders.base import SourceError
from seq2seq.serve.batcher import Batcher
from seq2seq.serve.demo import attention_png, demo_page, model_info
from seq2seq.serve.requests import (
    Limits, RequestError, check_api_key, check_key_format, check_source_size, media_type, parse_options,
    parse_paths, parse_steering, parse_texts, query_options, query_steering, query_value, read_body, read_json,
    require_json, require_upload_type,
)

log = logging.getLogger("seq2seq.serve.app")

__all__ = ["create_app", "load_model", "run_server"]


def load_model(model_dir: str | Path | Sequence[str | Path], device: str = "auto", precision: str = "fp32",
               weights: str | Path | None = None, **ensemble: Any) -> Any:
    """A `Translator` for a model that reads sentences, a `Transcriber` for one that reads recordings
    (long ones in windows, as `seq2seq transcribe`), a `Generator` for other files. Several model
    directories (or ensemble["last_checkpoints"]) are one ensemble (`Translator.load`'s keywords)."""
    from seq2seq.model.encoders.base import source_kind
    from seq2seq.storage import CheckpointError
    from seq2seq.storage.model_dir import ModelDir

    path = Path(model_dir if isinstance(model_dir, (str, Path)) else model_dir[0])
    directory = ModelDir(path)
    if not directory.config_path.is_file():
        raise CheckpointError(f"{path} is not a model directory ({ModelDir.CONFIG} is missing)")
    kind = source_kind(directory.config().model.encoder)
    if kind.reads_files:
        from seq2seq.inference.generator import Generator, Transcriber

        cls = Transcriber if Transcriber.decodes(kind) else Generator  # recordings of any length, in windows
        return cls.load(model_dir, device=device, precision=precision, weights=weights, **ensemble)
    from seq2seq.inference.translator import Translator

    return Translator.load(model_dir, device=device, precision=precision, weights=weights, **ensemble)


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """{"error": message}; characters UTF-8 cannot encode (a lone surrogate echoed back) are escaped."""
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class RequireApiKey:
    """ASGI middleware: 401 for every request without the API key (see `check_api_key`), except
    GET /health, which load balancers and probes poll, and GET / (the demo page: a static file that
    asks for the key and sends it with each request it makes)."""

    OPEN = ("/health", "/")

    def __init__(self, app: Any, key: str) -> None:
        self.app, self.key = app, key

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not (scope["method"] in ("GET", "HEAD") and scope["path"] in self.OPEN):
            try:
                check_api_key(Headers(scope=scope), self.key)
            except RequestError as e:
                await error_response(e.status, e.message, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await self.app(scope, receive, send)


# options of a call that are not search options: a Transcriber's, and a multilingual model's target language
CALL_OPTIONS = ("timestamps", "max_window_seconds", "tgt_lang", "terms", "term_forms")

# The demo page runs only its own inline script and style, loads nothing from elsewhere, and is not framed.
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                           "img-src 'self' blob: data:; media-src blob:; connect-src 'self'; "
                                           "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


@dataclass(frozen=True)
class Unreadable:
    """In place of a source's n-best list: the source could not be read, and why."""

    reason: str


@dataclass(frozen=True)
class Output:
    """What the model call gave one source: its n-best list (or `Unreadable`) and the warnings it drew."""

    hyps: Any
    warnings: list[str]


LINE = re.compile(r"line (\d+): (.*)", re.DOTALL)  # how the model's warnings and SteeringErrors name an input


def renamed(message: str, name: Any) -> str:
    """A message that names its input "line N" (the model's numbering: N = index + 1), naming it
    name(index) instead ("texts[2]"), and the command line's search flags as request fields
    ("--beam 5" -> "beam 5")."""
    from seq2seq.inference.options import SEARCH_OPTIONS

    def field(m: re.Match) -> str:
        name = m[1].replace("-", "_")
        return name if name in SEARCH_OPTIONS else m[0]

    m = LINE.match(message)
    message = f"{name(int(m[1]) - 1)}: {m[2]}" if m else message
    return re.sub(r"--([a-z][a-z-]*[a-z])", field, message)


def create_app(model: Any, limits: Limits | None = None, allow_paths: bool = False,
               api_key: str | None = None, demo: bool = True, glossary: Glossary | str | Path | None = None) -> FastAPI:
    """The FastAPI app serving `model` (a `Translator`, or a `Generator` for image/audio models).

    The batching worker starts with the app (its lifespan) and stops after the last request.
    allow_paths: /generate may read files on the server named in {"paths": [...]}.
    api_key: requests must carry it (`Authorization: Bearer KEY` or `X-API-Key: KEY`), else 401;
        ValueError for an empty key or one with spaces or control characters.
    demo: GET / serves the demo page (`seq2seq.serve.demo`); False: 404 there.
    glossary: a `Glossary` or its TSV file (`seq2seq.inference.glossary`), read once here: where a
        request's text holds a source term, its target term is a constraint of that text. Text models
        only; SteeringError (one line) for a bad file or a model that reads files.
    """
    if api_key is not None:
        check_key_format(api_key)
    if glossary is not None and not isinstance(glossary, Glossary):
        glossary = Glossary.load(glossary)
    check_glossary(model, glossary)
    server = ModelServer(model, limits or Limits(), allow_paths, glossary)
    app = FastAPI(title="seq2seq", lifespan=server.lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.batcher = server.batcher
    app.state.model = model
    app.state.limits = server.limits
    app.state.api_key = api_key
    if api_key is not None:
        app.add_middleware(RequireApiKey, key=api_key)
    add_error_handlers(app)
    app.get("/health")(server.health)
    app.get("/info")(server.info)
    app.post("/translate")(server.translate)
    app.post("/generate")(server.generate)
    app.post("/attention")(server.attention)
    if demo:
        app.get("/")(server.page)
    return app


def check_glossary(model: Any, glossary: Glossary | None) -> None:
    """SteeringError (one line) for a glossary on a model that reads files (it matches source text), or
    with a target term the model's target vocabulary cannot write (naming its line of the file)."""
    if glossary is not None and model.processor.kind.reads_files:
        raise SteeringError(f"a glossary matches terms in source text, but {model.loaded.path} is an "
                            f"{model.processor.kind.name} model; send constraints with the requests instead")
    if glossary is not None:
        glossary.check_writable(model.tokenizers.tgt)


def add_error_handlers(app: FastAPI) -> None:
    """Every error a JSON object {"error": message} with its status; a failure of ours a logged 500."""

    @app.exception_handler(RequestError)
    async def request_error(request: Request, e: RequestError) -> JSONResponse:
        return error_response(e.status, e.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no such endpoint: {request.method} {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(e.status_code, str(e.detail))
        return error_response(e.status_code, message, getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> JSONResponse:
        log.exception("request %s %s failed", request.method, request.url.path)
        return JSONResponse({"error": f"internal error: {type(e).__name__}"}, status_code=500)


class ModelServer:
    """The routes of one model: what its processor reads decides which of /translate (sentences) and
    /generate (files) it answers, and the limits its files are checked against."""

    def __init__(self, model: Any, limits: Limits, allow_paths: bool, glossary: Glossary | None = None) -> None:
        self.model, self.limits, self.allow_paths, self.glossary = model, limits, allow_paths, glossary
        self.processor = model.processor
        self.kind = self.processor.kind
        self.recordings = isinstance(model, Transcriber)  # long recordings in windows, with timestamps
        self.encoder_type = model.loaded.config.model.encoder.type
        self.model_path = str(model.loaded.path)
        run = self._run_files if self.kind.reads_files else self._run_texts
        self.batcher = Batcher(run, limits.max_batch, limits.batch_window_ms / 1000, limits.max_queue)
        self.stopping = False

    @contextlib.asynccontextmanager
    async def lifespan(self, app: FastAPI):
        self.batcher.start()
        log.info("serving %s (%s model) with batches of up to %d texts gathered for %g ms",
                 self.model_path, self.encoder_type, self.limits.max_batch, self.limits.batch_window_ms)
        try:
            yield
        finally:
            self.stopping = True
            await asyncio.to_thread(self.batcher.close)
            log.info("batching worker stopped after %d model calls", self.batcher.calls)

    # ---- the model calls (on the batching worker) -------------------------------------------

    def _run_texts(self, items: list[tuple[str, Steering | None]], options: dict[str, Any]) -> list[Output]:
        """Each text's n-best list; items: (text, its steering or None)."""
        warn, notes = self._warnings(log.warning)
        steering = self._steering_arguments(items)
        if self.glossary is not None:
            steering["glossary"] = self.glossary
        results = self.model.translate_nbest([text for text, _ in items], batch_tokens=self.limits.batch_tokens,
                                             warn=warn, **steering, **options)
        return [Output(hyps, notes.get(i, [])) for i, hyps in enumerate(results)]

    def _run_files(self, items: list[tuple[str, Steering | None]], options: dict[str, Any]) -> list[Output]:
        """Each file's n-best list, or `Unreadable` with the reason it was skipped; items: (path, steering)."""
        skipped: dict[int, str] = {}
        warn, notes = self._warnings(log.info)
        results = self.model.translate_nbest([path for path, _ in items], batch_tokens=self.limits.batch_tokens,
                                             warn=warn, skip_bad=True, skipped=skipped,
                                             **self._steering_arguments(items), **options)
        return [Output(Unreadable(skipped[i]) if i in skipped else hyps, notes.get(i, []))
                for i, hyps in enumerate(results)]

    @staticmethod
    def _warnings(log_it: Any) -> tuple[Any, dict[int, list[str]]]:
        """A `warn` for the model call that logs each warning and keeps those naming an input ("line N:
        ...") in {index: [messages]}."""
        notes: dict[int, list[str]] = {}

        def warn(message: str) -> None:
            log_it(message)
            m = LINE.match(message)
            if m:
                notes.setdefault(int(m[1]) - 1, []).append(m[2])

        return warn, notes

    @staticmethod
    def _steering_arguments(items: list[tuple[str, Steering | None]]) -> dict[str, Any]:
        """translate_nbest's steering arguments for the items (none when no item has any steering:
        the unsteered search, exactly)."""
        steering = [s or Steering() for _, s in items]
        if not any(steering):
            return {}
        return {"prefix": [s.prefix for s in steering], "constraints": [list(s.constraints) for s in steering],
                "avoid": [list(s.avoid) for s in steering]}

    def _steering(self, items: list[str], steering: list[Steering] | None, cfg: Any,
                  name: Any, terms: str | None = None, forms: str = "exact") -> list[Steering | None]:
        """Each item's steering (None for none), checked with the glossary's terms as the model will
        check it (`check_steering`, `encode_steering`) before it is queued: 422 naming the item
        (name(index)) where it cannot be honoured. The terms themselves are found again by the model
        call (`translate_nbest(glossary=...)`), which warns about any the beam cannot hold."""
        if steering is None and self.glossary is None:
            return [None] * len(items)
        steering = steering or [Steering() for _ in items]
        try:
            mode = term_mode(terms, getattr(self.model, "annotates_terms", False), self.model_path)
            steered = steer_inputs(len(items), prefix=[s.prefix for s in steering],
                                   constraints=[s.constraints for s in steering], avoid=[s.avoid for s in steering],
                                   glossary=self.glossary, sources=items) or []
            for i, s in enumerate(steered):
                if s:
                    checked, _ = check_steering(s, cfg, i + 1, mode)
                    encode_steering(checked, self.model.tokenizers.tgt, i + 1, mode, forms=forms)
        except SteeringError as e:
            raise RequestError(422, renamed(str(e), name)) from None
        return [s if s else None for s in steering]

    async def run(self, items: list[str], options: dict[str, Any], steering: list[Steering] | None = None,
                  name: Any = None) -> tuple[list[Any], int, list[list[str]]]:
        """The n-best lists of `items`, the nbest they were asked with and each item's warnings; 422 for
        options the model's `search_config` refuses, or steering (one per item, None for none; the
        glossary's terms are added here) it cannot honour. name(index): how messages call an item."""
        name = name or (lambda i: f"item {i}")
        try:
            cfg = self.model.search_config(**{k: v for k, v in options.items() if k not in CALL_OPTIONS})
            self.model.processor_for(options.get("tgt_lang"))  # LanguageError: none, or unknown
        except ValueError as e:
            raise RequestError(422, str(e)) from None
        if not items:
            return [], cfg.nbest, []
        jobs = list(zip(items, self._steering(items, steering, cfg, name, options.get("terms"),
                                              options.get("term_forms", "exact"))))
        # sampling requests run alone: merged, a seed would give other samples than Translator.translate
        future = self.batcher.submit(jobs, options, mergeable=cfg.strategy != "sample")
        try:
            outputs = await asyncio.wrap_future(future)
        except RequestError:
            raise
        except SteeringError as e:  # found only in the search: a prefix over the length limit, a long recording
            raise RequestError(422, renamed(str(e), name)) from None
        except Exception as e:  # noqa: BLE001 - the model failed: logged here, a one-line answer there
            log.error("model call failed: %s: %s", type(e).__name__, e, exc_info=e)
            first = str(e).splitlines()[0] if str(e) else ""
            detail = f"{type(e).__name__}: {first}" if first else type(e).__name__
            raise RequestError(500, f"the model failed on this request: {detail}") from None
        return [o.hyps for o in outputs], cfg.nbest, [o.warnings for o in outputs]

    # ---- routes ------------------------------------------------------------------------------

    async def health(self) -> JSONResponse:
        body = {"status": "stopping" if self.stopping else "ok", "model": self.model_path, "kind": self.encoder_type,
                "device": str(self.model.device), "precision": self.model.precision, "queue": self.batcher.pending,
                "calls": self.batcher.calls, "endpoint": "/generate" if self.kind.reads_files else "/translate"}
        return JSONResponse(body, status_code=503 if self.stopping else 200)

    async def translate(self, request: Request) -> JSONResponse:
        if self.kind.reads_files:
            raise RequestError(404, f"this server holds an {self.kind.name} model: POST the file to /generate")
        require_json(request.headers)
        body = await read_json(request, self.limits.max_body_bytes)
        texts, single, steering, fields = parse_texts(body, self.limits)
        results, nbest, warnings = await self.run(texts, parse_options(fields, self.limits), steering,
                                                  (lambda i: "text") if single else (lambda i: f"texts[{i}]"))
        emit = formatter("json", nbest)
        objects = [json.loads(emit(i, hyps)) for i, hyps in enumerate(results)]
        for obj, notes in zip(objects, warnings):
            if notes:
                obj["warnings"] = notes
        return JSONResponse(objects[0] if single else {"translations": objects})

    async def generate(self, request: Request) -> JSONResponse:
        if not self.kind.reads_files:
            raise RequestError(404, "this server holds a text model: POST {\"text\": ...} to /translate")
        if media_type(request.headers)[0] == "application/json":
            require_json(request.headers)
            sources, fields = parse_paths(await read_json(request, self.limits.max_body_bytes), self.limits,
                                          self.allow_paths)
            shared = parse_steering(fields, self.limits)
            options = parse_options(fields, self.limits)
            for source in sources:
                check_source_size(source, self.processor, self.limits, source)
            steering = None if shared is None else [shared] * len(sources)
            results, nbest, warnings = await self.run(sources, options, steering, lambda i: f"paths[{i}]")
            return JSONResponse({"generations": [self._generation(hyps, nbest, source, notes)
                                                 for source, hyps, notes in zip(sources, results, warnings)]})
        require_upload_type(request.headers)
        options, steering = self._file_options(request)
        upload = await self._save_upload(request)
        try:  # 413 from the file's header, before anything is decoded
            check_source_size(str(upload), self.processor, self.limits, "the uploaded file")
            results, nbest, warnings = await self.run([str(upload)], options, None if steering is None else [steering],
                                                      lambda i: "the uploaded file")
        finally:
            upload.unlink(missing_ok=True)
        if isinstance(results[0], Unreadable):
            raise RequestError(422, "cannot read the uploaded file: " + results[0].reason.replace(str(upload), "upload"))
        return JSONResponse(self._generation(results[0], nbest, notes=warnings[0]))

    async def info(self) -> JSONResponse:
        """The model and the options the demo page builds its form from (`demo.model_info`)."""
        return JSONResponse(model_info(self.model, self.limits))

    async def page(self) -> HTMLResponse:
        return HTMLResponse(demo_page(), headers=PAGE_HEADERS)

    async def attention(self, request: Request) -> Response:
        """The cross-attention of one source as a PNG (what `--show-attention` draws): a text model
        takes {"text": ..., options}, a file model the file's bytes (options in the query string)."""
        if not self.kind.reads_files:
            require_json(request.headers)
            texts, single, steering, fields = parse_texts(await read_json(request, self.limits.max_body_bytes),
                                                          self.limits)
            if not single:
                raise RequestError(422, "give one \"text\": the attention of one source is drawn")
            results, _, _ = await self.run(texts, {**parse_options(fields, self.limits), "attention_layer": -1},
                                           steering, lambda i: "text")
            if not results[0]:
                raise RequestError(422, "the text is empty: there is no attention to draw")
            return Response(await asyncio.to_thread(attention_png, self.model, results[0][0]), media_type="image/png")
        require_upload_type(request.headers)
        options, steering = self._file_options(request)
        options["attention_layer"] = -1
        if self.recordings:  # one window over the whole recording, as the CLI draws it
            options.update(timestamps=False, max_window_seconds=math.inf)
        upload = await self._save_upload(request)
        try:
            check_source_size(str(upload), self.processor, self.limits, "the uploaded file")
            try:
                view = self.model.attention_view(str(upload))
            except SourceError as e:
                raise RequestError(422, str(e).replace(str(upload), "upload")) from None
            results, _, _ = await self.run([str(upload)], options, None if steering is None else [steering],
                                           lambda i: "the uploaded file")
            if isinstance(results[0], Unreadable):
                raise RequestError(422, "cannot read the uploaded file: " + results[0].reason.replace(str(upload), "upload"))
            png = await asyncio.to_thread(attention_png, self.model, results[0][0], view)
        finally:
            upload.unlink(missing_ok=True)
        return Response(png, media_type="image/png")

    def _file_options(self, request: Request) -> tuple[dict[str, Any], Steering | None]:
        """An upload's options from its query string: search options, and for recordings `timestamps`
        (each window's times and text in "segments", as `transcribe --timestamps --json`); and its
        steering (`query_steering`: prefix, constraints, avoid)."""
        steering = query_steering({k: request.query_params.getlist(k) for k in ("prefix", "constraints", "avoid")
                                   if k in request.query_params}, self.limits)
        params = {k: v for k, v in request.query_params.items() if k not in ("prefix", "constraints", "avoid")}
        timestamps = params.pop("timestamps", None)
        options = query_options(params, self.limits)
        if timestamps is not None:
            if not self.recordings:
                raise RequestError(422, f"timestamps: only for audio models, not an {self.kind.name} model")
            value = query_value(timestamps)
            if not isinstance(value, bool):
                raise RequestError(422, f"timestamps must be true or false, got {timestamps!r}")
            options["timestamps"] = value
        return options, steering

    async def _save_upload(self, request: Request) -> Path:
        """The uploaded file's bytes in a temporary file (the caller removes it): 413 over
        max_upload_bytes, 422 when empty."""
        data = await read_body(request, self.limits.max_upload_bytes, "uploaded file")
        if not data:
            raise RequestError(422, "the request body is empty: POST an image or audio file's bytes")
        fd, name = tempfile.mkstemp(prefix="seq2seq-upload-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return Path(name)

    @staticmethod
    def _generation(hyps: Any, nbest: int, source: str | None = None, notes: list[str] | None = None) -> dict[str, Any]:
        """The JSON object of one file's result (`source`: the path it was given by; None for an upload),
        with its "warnings" (`notes`) if any."""
        if isinstance(hyps, Unreadable):
            return {"source": source, "text": "", "error": hyps.reason}
        obj = hyps[0].to_json()
        if nbest > 1:
            obj["nbest"] = [h.to_json() for h in hyps]
        if source is None:
            obj.pop("source", None)
        if notes:
            obj["warnings"] = notes
        return obj


def is_loopback(host: str) -> bool:
    """Is `host` an address only this machine can reach (127.0.0.0/8, ::1, localhost)?"""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def run_server(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
               sockets: list[Any] | None = None) -> None:
    """Serve `app` with uvicorn until SIGINT or SIGTERM; then stop accepting connections, finish the
    requests in flight and the batching worker, and return (a second SIGINT forces the exit). Logs a
    warning when `host` is reachable from other machines and the app has no API key."""
    import uvicorn

    if not is_loopback(host) and not getattr(getattr(app, "state", None), "api_key", None):
        log.warning("listening on %s without an API key: anyone who can reach this address can use the model; "
                    "set --api-key or SEQ2SEQ_API_KEY, or put the server behind a proxy that authenticates "
                    "(docs/serving.md, Threat model)", host)

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=60)
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal that stopped it to the handlers it found; ours make that a no-op,
    # so a stop by signal is a clean return (exit code 0), not a KeyboardInterrupt or a kill.
    caught: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda s, frame: caught.append(s))
    try:
        server.run(sockets=sockets)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if caught:
        log.info("stopped by %s", signal.Signals(caught[0]).name)
