"""The routes of the server (`ModelServer`): /translate, /generate, /attention, /health, /info and
the demo page, each request's fields checked (`seq2seq.serve.requests`) and its steering checked
before it is queued on the batching worker (`run`); `seq2seq.serve.app` builds the app around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from seq2seq.adapters.serving import check_adapter
from seq2seq.config.diagnostics import Diagnostic, Seq2SeqError
from seq2seq.config.search import SearchConfig
from seq2seq.documents.line_translation import PIPELINE_STEPS
from seq2seq.inference.results import formatter
from seq2seq.inference.generator import Generator, Transcriber
from seq2seq.inference.glossary import Glossary
from seq2seq.inference.memory import SearchMemoryError
from seq2seq.inference.engine import Engine
from seq2seq.inference.inputs import SHARED_FIELDS, Call, SourceInput, call_of
from seq2seq.inference.results import Translation, with_diagnostics
from seq2seq.inference.steering import SteeringError
from seq2seq.model.encoders.sources import SourceError
from seq2seq.serve.batcher import Batcher
from seq2seq.serve.budget import check_work, wait_for_result
from seq2seq.serve.demo import attention_png, demo_page, model_info
from seq2seq.serve.errors import refused
from seq2seq.serve.model_calls import Item, ModelCalls, Output, ServedCall, Unreadable
from seq2seq.serve.requests import (
    Limits, RequestError, RequestOptions, check_source_size, media_type, parse_options, parse_paths, parse_steering, parse_texts,
    query_options, query_steering, query_value, read_body, read_json, require_json, require_upload_type,
)

log = logging.getLogger("seq2seq.serve.app")  # the server's log lines keep one name, whichever module logs them

# a request's options that are not the engine's `Call`: what each text is, the adapter, the text pipeline's steps
SERVER_OPTIONS = ("format", "adapter", *PIPELINE_STEPS)

STOP_WORKER_S = 5.0  # at shutdown, how long to wait for the worker to leave a model call no request waits for

# The demo page runs only its own inline script and style, loads nothing from elsewhere, and is not framed.
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                           "img-src 'self' blob: data:; media-src blob:; connect-src 'self'; "
                                           "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


class ModelServer:
    """The routes of one model: what its processor reads decides which of /translate (sentences) and
    /generate (files) it answers, and the limits its files are checked against."""

    def __init__(self, model: Engine, limits: Limits, allow_paths: bool, glossary: Glossary | None = None) -> None:
        self.model, self.limits, self.allow_paths, self.glossary = model, limits, allow_paths, glossary
        self.processor = model.processor
        self.kind = self.processor.kind
        self.recordings = isinstance(model, Transcriber)  # long recordings in windows, with timestamps
        self.encoder_type = model.config.model.encoder.type
        self.model_path = str(model.path)
        calls = ModelCalls(model, limits, glossary)
        run = calls.run_files if self.kind.reads_files else calls.run_texts
        self.batcher: Batcher[Item, ServedCall, Output] = Batcher(run, limits.max_batch, limits.batch_window_ms / 1000, limits.max_queue)
        self.stopping = False

    @contextlib.asynccontextmanager
    async def lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        self.batcher.start()
        log.info("serving %s (%s model) with batches of up to %d texts gathered for %g ms",
                 self.model_path, self.encoder_type, self.limits.max_batch, self.limits.batch_window_ms)
        try:
            yield
        finally:
            self.stopping = True
            # (the requests in flight have been answered; a call no request waits for stops within a step)
            await asyncio.to_thread(self.batcher.close, STOP_WORKER_S)
            if self.batcher.alive:
                log.warning("the batching worker is still in a model call after %g s; exiting without it",
                            STOP_WORKER_S)
            log.info("batching worker stopped after %d model calls", self.batcher.calls)

    def _call(self, options: RequestOptions) -> tuple[Call, SearchConfig]:
        """The engine's `Call` of a request's options, its search options resolved once against the model
        (`Engine.search_config`: ValueError for options it refuses) for every step that decodes it: the
        steering check before queueing, the model call; with the server's glossary and batch_tokens."""
        call = call_of({k: v for k, v in options.items() if k not in SERVER_OPTIONS})
        cfg = self.model.search_config(**call.search)
        return dataclasses.replace(call, glossary=self.glossary, batch_tokens=self.limits.batch_tokens,
                                   resolved=cfg), cfg

    def _check_steering(self, inputs: list[SourceInput], call: Call, name: Callable[[int], str]) -> None:
        """Each input's steering checked before it is queued by the step the model call starts with
        (`Engine.prepare`: the glossary's terms included, each input encoded as the search will encode
        it): 422 naming the input (name(index)) where it cannot be honoured. The terms themselves are
        found again by the model call, which warns about any the beam cannot hold."""
        if self.glossary is None and not any(x.steered for x in inputs):
            return
        try:
            self.model.prepare(inputs, call, 1, lambda diagnostic: None)
        except SteeringError as e:
            raise refused(e, name) from None

    async def run(self, inputs: list[SourceInput], options: RequestOptions, name: Callable[[int], str] | None = None,
                  request: Request | None = None) -> tuple[list[list[Translation] | Unreadable], int,
                                                           list[list[Diagnostic]]]:
        """The n-best lists of `inputs` (each a text or file's path and its steering), the nbest they
        were asked with and each input's warnings; 422 for options the model's `search_config` refuses,
        or steering (the glossary's terms added here) it cannot honour; 413 for more work than `max_work`; 504 past
        the time budget and 499 when the client of `request` (None: not watched) went away, the model
        call stopped (`seq2seq.serve.budget`); 503 once the server is stopping. name(index): how messages
        call an input."""
        deadline = time.monotonic() + self.limits.request_timeout_s
        if self.stopping:
            raise RequestError(503, "the server is shutting down")
        name = name or (lambda i: f"item {i}")
        try:
            call, cfg = self._call(options)
            self.model.processor_for(options.get("tgt_lang"))  # LanguageError: none, or unknown
            check_adapter(self.model, options.get("adapter"))  # ValueError: not one this server has
        except Seq2SeqError as e:
            raise RequestError(422, str(e), e.diagnostic) from None
        except ValueError as e:
            raise RequestError(422, str(e)) from None
        if not inputs:
            return [], cfg.nbest, []
        if options.get("format", "text") != "text" and any(x.steered for x in inputs):
            raise RequestError(422, f"format {options['format']} translates each text as a whole document; prefix, "
                                    "constraints and avoid steer sentences: drop them, or use format text")
        self._check_work([x.text for x in inputs], cfg)
        self._check_steering(inputs, call, name)
        # sampling requests run alone: merged, a seed would give other samples than Translator.translate;
        # requests of equal options share a model call
        abandoned = threading.Event()
        future = self.batcher.submit(inputs, ServedCall(call, options), mergeable=cfg.strategy != "sample",
                                     deadline=deadline, abandoned=abandoned, key=json.dumps(options, sort_keys=True))
        try:
            outputs = await wait_for_result(future, abandoned, deadline, request, self.limits)
        except RequestError:
            raise
        except SteeringError as e:  # found only in the search: a prefix over the length limit, a long recording
            raise refused(e, name) from None
        except SearchMemoryError as e:  # its longest source, with this beam, needs more memory than the search may take
            raise RequestError(413, str(e), e.diagnostic) from None
        except Exception as e:  # noqa: BLE001 - the model failed: logged here, a one-line answer there
            log.error("model call failed: %s: %s", type(e).__name__, e, exc_info=e)
            first = str(e).splitlines()[0] if str(e) else ""
            detail = f"{type(e).__name__}: {first}" if first else type(e).__name__
            raise RequestError(500, f"the model failed on this request: {detail}") from None
        return [o.hyps for o in outputs], cfg.nbest, [o.warnings for o in outputs]

    def _check_work(self, items: list[str], cfg: SearchConfig) -> None:
        """413 for items whose search may take more than `max_work` decoder steps (`budget.check_work`):
        a text's length limit from its source tokens, a file's the model's cap. Texts are tokenized only
        when even every item at the cap could be over the limit."""
        positions = self.model.config.model.max_positions
        if len(items) * cfg.length_cap(positions) * cfg.rows_per_source <= self.limits.max_work:
            return
        lengths: list[int | None] = [None] * len(items)
        if not self.kind.reads_files:  # (an empty text has no example: its limit counts as 0 tokens)
            lengths = [len(x) for x in self.processor.prepare(items).values()]
        check_work(cfg, lengths, positions, self.limits)

    def begin_stop(self) -> None:
        """The server is stopping (a signal came): /health says so (503), new requests get 503, the
        requests in flight go on until their answer or their time budget."""
        self.stopping = True
        self.batcher.refuse_new()

    # ---- routes ------------------------------------------------------------------------------

    async def health(self) -> JSONResponse:
        body = {"status": "stopping" if self.stopping else "ok", "model": self.model_path, "kind": self.encoder_type,
                "device": str(self.model.device), "precision": self.model.precision, "queue": self.batcher.pending,
                "calls": self.batcher.calls, "endpoint": "/generate" if self.kind.reads_files else "/translate"}
        adapters = getattr(self.model, "adapters", None)
        if adapters is not None:  # `serve --adapter NAME=DIR`: the names a request's "adapter" may take
            body["adapters"] = adapters.names()
        return JSONResponse(body, status_code=503 if self.stopping else 200)

    async def translate(self, request: Request) -> JSONResponse:
        if self.kind.reads_files:
            raise RequestError(404, f"this server holds an {self.kind.name} model: POST the file to /generate")
        require_json(request.headers)
        body = await read_json(request, self.limits.max_body_bytes, self.limits.read_timeout_s)
        inputs, single, fields = parse_texts(body, self.limits)
        options = parse_options(fields, self.limits)
        results, nbest, warnings = await self.run(inputs, options,
                                                  (lambda i: "text") if single else (lambda i: f"texts[{i}]"),
                                                  request)
        emit = formatter("json", nbest, documents=options.get("format", "text") != "text")
        objects = [json.loads(emit(i, hyps, notes)) for i, (hyps, notes) in enumerate(zip(_texts(results), warnings))]
        return JSONResponse(objects[0] if single else {"translations": objects})

    async def generate(self, request: Request) -> JSONResponse:
        if not self.kind.reads_files:
            raise RequestError(404, "this server holds a text model: POST {\"text\": ...} to /translate")
        if media_type(request.headers)[0] == "application/json":
            require_json(request.headers)
            body = await read_json(request, self.limits.max_body_bytes, self.limits.read_timeout_s)
            sources, fields = parse_paths(body, self.limits,
                                          self.allow_paths)
            shared = parse_steering(fields, self.limits)
            options = parse_options(fields, self.limits)
            for source in sources:
                check_source_size(source, self.processor, self.limits, source)
            inputs = [SourceInput(source).with_shared(shared, f"paths[{i}].", "the request's") for i, source in enumerate(sources)]
            results, nbest, warnings = await self.run(inputs, options, lambda i: f"paths[{i}]", request)
            return JSONResponse({"generations": [self._generation(hyps, nbest, source, notes)
                                                 for source, hyps, notes in zip(sources, results, warnings)]})
        require_upload_type(request.headers)
        options, shared = self._file_options(request)
        upload = await self._save_upload(request)
        try:  # 413 from the file's header, before anything is decoded
            check_source_size(str(upload), self.processor, self.limits, "the uploaded file")
            results, nbest, warnings = await self.run([SourceInput(str(upload)).with_shared(shared, "the uploaded file's ", "the request's")],
                                                      options, lambda i: "the uploaded file", request)
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
            body = await read_json(request, self.limits.max_body_bytes, self.limits.read_timeout_s)
            inputs, single, fields = parse_texts(body, self.limits)
            if not single:
                raise RequestError(422, "give one \"text\": the attention of one source is drawn")
            options = parse_options(fields, self.limits)
            options["attention_layer"] = -1
            results, _, _ = await self.run(inputs, options, lambda i: "text", request)
            hyps = _texts(results)[0]
            if not hyps:
                raise RequestError(422, "the text is empty: there is no attention to draw")
            return Response(await asyncio.to_thread(attention_png, self.model, hyps[0]), media_type="image/png")
        require_upload_type(request.headers)
        options, shared = self._file_options(request)
        options["attention_layer"] = -1
        if self.recordings:  # one window over the whole recording, as the CLI draws it
            options["timestamps"], options["max_window_seconds"] = False, math.inf
        upload = await self._save_upload(request)
        try:
            check_source_size(str(upload), self.processor, self.limits, "the uploaded file")
            try:
                assert isinstance(self.model, Generator)  # (what reads files: `load_engine`)
                view = self.model.attention_view(str(upload))
            except SourceError as e:
                raise RequestError(422, str(e).replace(str(upload), "upload")) from None
            results, _, _ = await self.run([SourceInput(str(upload)).with_shared(shared, "the uploaded file's ", "the request's")],
                                           options, lambda i: "the uploaded file", request)
            result = results[0]
            if isinstance(result, Unreadable):
                raise RequestError(422, "cannot read the uploaded file: " + result.reason.replace(str(upload), "upload"))
            png = await asyncio.to_thread(attention_png, self.model, result[0], view)
        finally:
            upload.unlink(missing_ok=True)
        return Response(png, media_type="image/png")

    def _file_options(self, request: Request) -> tuple[RequestOptions, SourceInput]:
        """An upload's options from its query string: search options, and for recordings `timestamps`
        (each window's times and text in "segments", as `transcribe --timestamps --json`); and its
        steering (`query_steering`: prefix, constraints, avoid)."""
        steering = query_steering({k: request.query_params.getlist(k) for k in SHARED_FIELDS
                                   if k in request.query_params}, self.limits)
        params = {k: v for k, v in request.query_params.items() if k not in SHARED_FIELDS}
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
        data = await read_body(request, self.limits.max_upload_bytes, "uploaded file", self.limits.read_timeout_s)
        if not data:
            raise RequestError(422, "the request body is empty: POST an image or audio file's bytes")
        fd, name = tempfile.mkstemp(prefix="seq2seq-upload-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return Path(name)

    @staticmethod
    def _generation(hyps: list[Translation] | Unreadable, nbest: int, source: str | None = None,
                    notes: list[Diagnostic] | None = None) -> dict[str, object]:
        """The JSON object of one file's result (`source`: the path it was given by; None for an upload),
        with its "warnings" (`notes`) if any."""
        if isinstance(hyps, Unreadable):
            return {"source": source, "text": "", "error": hyps.reason}
        obj = hyps[0].to_json()
        if nbest > 1:
            obj["nbest"] = [h.to_json() for h in hyps]
        if source is None:
            obj.pop("source", None)
        return with_diagnostics(obj, notes or [])


def _texts(results: list[list[Translation] | Unreadable]) -> list[list[Translation]]:
    """The n-best lists of a text model's call (only a file can be `Unreadable`)."""
    return [hyps for hyps in results if not isinstance(hyps, Unreadable)]
