"""An HTTP server for a model directory: `seq2seq serve MODEL_DIR` (FastAPI + uvicorn, the `serve` extra).

    POST /translate  {"text": "A dog runs."}            -> {"text": ..., "score": ..., "logprob": ..., "tokens": [...]}
                     {"texts": ["A dog.", "A man."], "beam": 5} -> {"translations": [{...}, {...}]}
    POST /generate   image/audio models: the file's bytes as the body (options in the query string,
                     ?beam=3), or {"paths": [...], ...} when started with allow_paths
    GET  /health     {"status": "ok", "model": ..., "kind": "text", "queue": 0, ...}

Each result object is what `seq2seq translate --json` (or `caption/transcribe --json`) prints for
that input, with an "nbest" list when nbest > 1. Search options are those of `Translator.search_config`
(beam, nbest, greedy, sample, lenpen, max_len_a, max_len_b, min_len, no_repeat_ngram, topk, topp,
temperature, seed); unset ones keep the model's `decoding` config.

Batching: requests go to one worker thread (the only one that touches the model). It takes the
first waiting request, gathers whatever else arrives within `batch_window_ms` (or until
`max_batch` texts), and runs one Translator call per set of search options, so concurrent
requests share batches. Sampling requests are never merged: a request with a seed gets what
`Translator.translate(texts, sample=True, seed=...)` gives.

Errors are JSON objects `{"error": "message"}`, never a traceback: 400 for a body that is not
JSON, 413 for one over a limit (body bytes, texts per request, characters per text), 422 for a
request that is JSON but wrong (a missing or mistyped field, an unknown or conflicting search
option), 503 when the queue is full or the server is stopping, 500 if the model itself fails
(logged in full on the server). On SIGINT/SIGTERM the server stops accepting connections, lets
the requests in flight finish, then stops the worker (`run_server`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import math
import os
import queue
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("seq2seq.serve.app")

# Search options a request may set, with their JSON types (bool is not accepted as a number).
OPTIONS: dict[str, tuple[type, ...]] = {
    "beam": (int,), "nbest": (int,), "greedy": (bool,), "sample": (bool,), "lenpen": (int, float),
    "max_len_a": (int, float), "max_len_b": (int,), "min_len": (int,), "no_repeat_ngram": (int,),
    "topk": (int,), "topp": (int, float), "temperature": (int, float), "seed": (int,),
}
TYPE_NAMES = {(int,): "an integer", (bool,): "true or false", (int, float): "a number"}


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


# ---- the batching worker ---------------------------------------------------------------------------


@dataclass
class _Job:
    items: list[Any]
    options: dict[str, Any]
    key: Any  # jobs with equal keys may share a model call
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


_STOP = object()


class Batcher:
    """Runs `run(items, options) -> results` (one result per item) on one worker thread, merging the
    items of jobs that arrive within `window_s` of each other and have the same key into one call of
    at most `max_batch` items.

    `calls` counts the model calls, `batch_sizes` records the items of each.
    """

    def __init__(self, run: Callable[[list[Any], dict[str, Any]], list[Any]], max_batch: int, window_s: float,
                 max_queue: int) -> None:
        self.run, self.max_batch, self.window_s, self.max_queue = run, max_batch, window_s, max_queue
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._pending = 0  # items submitted and not yet finished
        self._closed = False
        self.calls = 0
        self.batch_sizes: list[int] = []
        self._thread = threading.Thread(target=self._work, name="seq2seq-serve-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def pending(self) -> int:
        """Items submitted and not finished (waiting or being run)."""
        with self._lock:
            return self._pending

    @property
    def waiting_jobs(self) -> int:
        """Jobs in the queue, not yet taken by the worker."""
        return self._queue.qsize()

    def submit(self, items: list[Any], options: dict[str, Any], mergeable: bool = True) -> concurrent.futures.Future:
        """Queue a job; its future gets the list of results (or the model's exception). RequestError 503
        when the queue is full or the batcher is closed."""
        with self._lock:
            if self._closed:
                raise RequestError(503, "the server is shutting down")
            if self._pending + len(items) > self.max_queue:
                raise RequestError(503, f"the server is busy ({self._pending} texts waiting); try again shortly")
            self._pending += len(items)
        key = json.dumps(options, sort_keys=True) if mergeable else object()
        job = _Job(list(items), dict(options), key)
        self._queue.put(job)
        return job.future

    def close(self, timeout: float | None = None) -> None:
        """Refuse new jobs, finish the queued ones, stop the worker."""
        with self._lock:
            self._closed = True
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout)

    def _work(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is _STOP:
                break
            jobs, n = [first], len(first.items)
            deadline = time.monotonic() + self.window_s
            while n < self.max_batch:
                try:
                    job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is _STOP:
                    stop = True  # run what was gathered, then stop (jobs are never queued after _STOP)
                    break
                jobs.append(job)
                n += len(job.items)
            self._run_jobs(jobs)

    def _run_jobs(self, jobs: list[_Job]) -> None:
        groups: dict[Any, list[_Job]] = {}
        for job in jobs:
            if job.future.set_running_or_notify_cancel():  # False: the client went away
                groups.setdefault(job.key, []).append(job)
            else:
                self._done(len(job.items))
        for group in groups.values():
            chunk: list[_Job] = []
            for job in group:
                if chunk and sum(len(j.items) for j in chunk) + len(job.items) > self.max_batch:
                    self._call(chunk)
                    chunk = []
                chunk.append(job)
            if chunk:
                self._call(chunk)

    def _call(self, jobs: list[_Job]) -> None:
        items = [item for job in jobs for item in job.items]
        try:
            self.calls += 1
            self.batch_sizes.append(len(items))
            results = self.run(items, jobs[0].options) if items else []
        except BaseException as e:  # noqa: BLE001 - handed to the requests, which answer 500
            for job in jobs:
                job.future.set_exception(e)
        else:
            start = 0
            for job in jobs:
                job.future.set_result(results[start: start + len(job.items)])
                start += len(job.items)
        finally:
            self._done(len(items))

    def _done(self, n: int) -> None:
        with self._lock:
            self._pending -= n


# ---- requests ---------------------------------------------------------------------------------------


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
    field or a wrong type, 413 for a beam or nbest over the limit."""
    options = {}
    for name, value in fields.items():
        if name not in OPTIONS:
            raise RequestError(422, f"unknown field {name!r}; search options are {', '.join(OPTIONS)}")
        if value is None:
            continue
        types = OPTIONS[name]
        if isinstance(value, bool) != (types == (bool,)) or not isinstance(value, types):
            raise RequestError(422, f"{name} must be {TYPE_NAMES[types]}, got {json.dumps(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise RequestError(422, f"{name} must be a finite number, got {value}")
        options[name] = value
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


# ---- the app ----------------------------------------------------------------------------------------


def load_model(model_dir: str | Path, device: str = "auto", precision: str = "fp32",
               weights: str | Path | None = None) -> Any:
    """A `Translator` for a text model directory, a `Generator` for an image or audio one."""
    from seq2seq.storage.files import CONFIG, CheckpointError
    from seq2seq.config.schema import ConfigError, from_dict, load_dict
    from seq2seq.model.encoders.base import get_modality
    from seq2seq.config.root import Config

    path = Path(model_dir)
    if not (path / CONFIG).is_file():
        raise CheckpointError(f"{path} is not a model directory ({CONFIG} is missing)")
    try:
        kind = from_dict(Config, load_dict(path / CONFIG)).model.encoder.type
    except ConfigError as e:
        raise CheckpointError(f"{path / CONFIG}: {e}") from None
    if get_modality(kind).processor is None:
        from seq2seq.inference.translator import Translator

        return Translator.load(path, device=device, precision=precision, weights=weights)
    from seq2seq.inference.generator import Generator

    return Generator.load(path, device=device, precision=precision, weights=weights)


def create_app(model: Any, limits: Limits | None = None, allow_paths: bool = False) -> FastAPI:
    """The FastAPI app serving `model` (a `Translator`, or a `Generator` for image/audio models).

    The batching worker starts with the app (its lifespan) and stops after the last request.
    allow_paths: /generate may read files on the server named in {"paths": [...]}.
    """
    from seq2seq.text.lines import formatter
    from seq2seq.inference.translator import Translator

    limits = limits or Limits()
    is_text = isinstance(model, Translator)
    kind = model.loaded.config.model.encoder.type
    model_path = str(model.loaded.path)
    warnings_seen: dict[str, list[str]] = {}  # per path, from Generator.generate(skip_bad=True)

    def run_text(texts: list[str], options: dict[str, Any]) -> list[Any]:
        return model.translate_nbest(texts, batch_tokens=limits.batch_tokens, warn=log.warning, **options)

    def run_files(paths: list[str], options: dict[str, Any]) -> list[Any]:
        def warn(message: str) -> None:
            for p in paths:
                if p in message:
                    warnings_seen.setdefault(p, []).append(message.removesuffix("; its output is empty"))

        return model.generate(paths, batch_tokens=limits.batch_tokens, skip_bad=True, warn=warn, **options)

    batcher = Batcher(run_text if is_text else run_files, limits.max_batch, limits.batch_window_ms / 1000,
                      limits.max_queue)
    state = {"stopping": False}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        log.info("serving %s (%s model) with batches of up to %d texts gathered for %g ms",
                 model_path, kind, limits.max_batch, limits.batch_window_ms)
        try:
            yield
        finally:
            state["stopping"] = True
            await asyncio.to_thread(batcher.close)
            log.info("batching worker stopped after %d model calls", batcher.calls)

    app = FastAPI(title="seq2seq", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.batcher = batcher
    app.state.model = model
    app.state.limits = limits

    @app.exception_handler(RequestError)
    async def request_error(request: Request, e: RequestError) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no such endpoint: {request.method} {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(e.status_code, str(e.detail))
        return JSONResponse({"error": message}, status_code=e.status_code, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> JSONResponse:
        log.exception("request %s %s failed", request.method, request.url.path)
        return JSONResponse({"error": f"internal error: {type(e).__name__}"}, status_code=500)

    async def run(items: list[str], options: dict[str, Any]) -> list[Any]:
        try:
            cfg = model.search_config(**options)
        except ValueError as e:
            raise RequestError(422, str(e)) from None
        if not items:
            return []
        # sampling requests run alone: merged, a seed would give other samples than Translator.translate
        future = batcher.submit(items, options, mergeable=cfg.strategy != "sample")
        try:
            return await asyncio.wrap_future(future)
        except RequestError:
            raise
        except Exception as e:  # noqa: BLE001 - the model failed: logged here, a one-line answer there
            log.error("model call failed: %s: %s", type(e).__name__, e, exc_info=e)
            first = str(e).splitlines()[0] if str(e) else ""
            detail = f"{type(e).__name__}: {first}" if first else type(e).__name__
            raise RequestError(500, f"the model failed on this request: {detail}") from None

    @app.get("/health")
    async def health() -> JSONResponse:
        body = {"status": "stopping" if state["stopping"] else "ok", "model": model_path, "kind": kind,
                "device": str(model.device), "precision": model.precision, "queue": batcher.pending,
                "calls": batcher.calls, "endpoint": "/translate" if is_text else "/generate"}
        return JSONResponse(body, status_code=503 if state["stopping"] else 200)

    @app.post("/translate")
    async def translate(request: Request) -> JSONResponse:
        if not is_text:
            raise RequestError(404, f"this server holds an {kind} model: POST the file to /generate")
        body = await read_json(request, limits.max_body_bytes)
        texts, single, fields = parse_texts(body, limits)
        options = parse_options(fields, limits)
        results = await run(texts, options)
        emit = formatter("json", model.search_config(**options).nbest)
        objects = [json.loads(emit(i, hyps)) for i, hyps in enumerate(results)]
        return JSONResponse(objects[0] if single else {"translations": objects})

    @app.post("/generate")
    async def generate(request: Request) -> JSONResponse:
        if is_text:
            raise RequestError(404, "this server holds a text model: POST {\"text\": ...} to /translate")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        upload: Path | None = None
        if content_type == "application/json":
            body = await read_json(request, limits.max_body_bytes)
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
            options = parse_options(fields, limits)
            sources = list(paths)
        else:
            options = parse_options({k: _query_value(v) for k, v in request.query_params.items()}, limits)
            data = await read_body(request, limits.max_upload_bytes, "uploaded file")
            if not data:
                raise RequestError(422, "the request body is empty: POST an image or audio file's bytes")
            fd, name = tempfile.mkstemp(prefix="seq2seq-upload-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            upload = Path(name)
            sources = [name]
        try:
            results = await run(sources, options)
        finally:
            if upload is not None:
                upload.unlink(missing_ok=True)
        nbest = model.search_config(**options).nbest
        bad = [s for s, hyps in zip(sources, results) if not hyps]
        if upload is not None and bad:
            problems = warnings_seen.pop(str(upload), ["unreadable"])
            raise RequestError(422, "cannot read the uploaded file: " + problems[0].replace(str(upload), "upload"))
        objects = []
        for source, hyps in zip(sources, results):
            if hyps:
                obj = hyps[0].to_json()
                if nbest > 1:
                    obj["nbest"] = [h.to_json() for h in hyps]
            else:
                obj = {"source": source, "text": "", "error": "; ".join(warnings_seen.pop(source, ["unreadable"]))}
            if upload is not None:
                obj.pop("source", None)
            objects.append(obj)
        return JSONResponse(objects[0] if upload is not None else {"generations": objects})

    return app


def _query_value(raw: str) -> Any:
    """A query-string value as JSON would give it (3, 0.6, true), else the string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def run_server(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
               sockets: list[Any] | None = None) -> None:
    """Serve `app` with uvicorn until SIGINT or SIGTERM; then stop accepting connections, finish the
    requests in flight and the batching worker, and return (a second SIGINT forces the exit)."""
    import uvicorn

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
