"""An HTTP server for a model directory: `seq2seq serve MODEL_DIR` (FastAPI + uvicorn, the `serve` extra).

    POST /translate  {"text": "A dog runs."}            -> {"text": ..., "score": ..., "logprob": ..., "tokens": [...]}
                     {"texts": ["A dog.", "A man."], "beam": 5} -> {"translations": [{...}, {...}]}
                     {"text": "...", "prefix": "Ein", "constraints": ["Hund"], "avoid": ["Katze"]}
    POST /generate   image/audio models: the file's bytes as the body (options in the query string,
                     ?beam=3), or {"paths": [...], ...} when started with allow_paths
    GET  /health     {"status": "ok", "model": ..., "kind": "text", "queue": 0, ...}

Each result object is what `seq2seq translate --json` (or `caption/transcribe --json`) prints for
that input, with an "nbest" list when nbest > 1. Search options are those of the command line
(`seq2seq.config.search.SEARCH_OPTIONS`: beam, nbest, greedy, sample, lenpen, max_len_a,
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
open), 408 for a request whose head or body stops arriving (`read_timeout_s`), 413 for one over a
limit (body bytes, texts per request, characters per text, pixels of an image, seconds of audio, the
decoder steps its search may take: `max_work`), 431 for headers over 16 KiB, 415 for a POST that is not `Content-Type: application/json` (or, for an
upload, the file's image/*, audio/* or application/octet-stream), 422 for a request that is JSON
but wrong (a missing or mistyped field, a text that is not valid Unicode, an unknown or conflicting
search option), 503 when the queue is full or the server is stopping, 504 for a request not answered
within its time budget (`request_timeout_s`: its model call is stopped between two decoding steps, as
it is when the client goes away; `seq2seq.serve.budget`), 500 if the model itself fails (logged in
full on the server). A request's error is its own: if a batch gathered from several
requests fails, the batcher runs them again one by one, and only the culprit fails.

On SIGINT/SIGTERM the server refuses new requests (503), stops accepting connections, lets the
requests in flight finish or reach their time budget, then stops the worker and returns (`run_server`):
within the budget and a few seconds. Connections that send nothing, or their head too slowly, are
closed (`seq2seq.serve.connections`).

This module builds the app and runs it (`create_app`, `run_server`; the model is loaded by
`seq2seq.inference.generator.load_engine`);
the routes are `seq2seq.serve.routes`, the model calls on the worker `seq2seq.serve.model_calls`, the
error answers `seq2seq.serve.errors`.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI

from seq2seq.inference.glossary import Glossary
from seq2seq.inference.engine import Engine
from seq2seq.inference.steering import SteeringError
from seq2seq.serve.errors import RequireApiKey, add_error_handlers
from seq2seq.serve.requests import Limits, check_key_format
from seq2seq.serve.routes import ModelServer

if TYPE_CHECKING:
    import socket
    from types import FrameType

    import uvicorn

log = logging.getLogger("seq2seq.serve.app")

__all__ = ["create_app", "run_server"]


def create_app(model: Engine, limits: Limits | None = None, allow_paths: bool = False,
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
    app.state.begin_stop = server.begin_stop
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


def check_glossary(model: Engine, glossary: Glossary | None) -> None:
    """SteeringError (one line) for a glossary on a model that reads files (it matches source text), or
    with a target term the model's target vocabulary cannot write (naming its line of the file)."""
    if glossary is not None and model.processor.kind.reads_files:
        raise SteeringError(f"a glossary matches terms in source text, but {model.path} is an "
                            f"{model.processor.kind.name} model; send constraints with the requests instead")
    if glossary is not None:
        glossary.check_writable(model.tokenizers.tgt)


def is_loopback(host: str) -> bool:
    """Is `host` an address only this machine can reach (127.0.0.0/8, ::1, localhost)?"""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this (uvicorn's default)
DRAIN_MARGIN_S = 5.0  # at a signal, how much longer than the time budget the requests in flight may take


def server_config(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> uvicorn.Config:
    """The `uvicorn.Config` of `app`: its connections (`seq2seq.serve.connections`: JSON for the errors
    uvicorn answers itself, a deadline on each request's head), idle keep-alive connections closed after
    KEEP_ALIVE_S, and at a signal the requests in flight given their time budget and DRAIN_MARGIN_S to
    finish (the app's `Limits`; an app without them: 60 s)."""
    import uvicorn

    from seq2seq.serve.connections import protocol_class

    limits = getattr(getattr(app, "state", None), "limits", None)
    read_s = limits.read_timeout_s if limits is not None else Limits.read_timeout_s
    drain_s = limits.request_timeout_s + DRAIN_MARGIN_S if limits is not None else 60.0
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http=protocol_class(read_s),
                          timeout_keep_alive=KEEP_ALIVE_S, timeout_graceful_shutdown=math.ceil(drain_s))


def run_server(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
               sockets: list[socket.socket] | None = None) -> None:
    """Serve `app` with uvicorn (`server_config`) until SIGINT or SIGTERM; then refuse new requests
    (503, /health "stopping"), stop accepting connections, let the requests in flight finish or reach
    their time budget, stop the batching worker, and return (a second SIGINT forces the exit). Logs a
    warning when `host` is reachable from other machines and the app has no API key."""
    import uvicorn

    if not is_loopback(host) and not getattr(getattr(app, "state", None), "api_key", None):
        log.warning("listening on %s without an API key: anyone who can reach this address can use the model; "
                    "set --api-key or SEQ2SEQ_API_KEY, or put the server behind a proxy that authenticates "
                    "(docs/serving.md, Threat model)", host)

    begin_stop = getattr(getattr(app, "state", None), "begin_stop", None)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:  # uvicorn's signal handler
            if begin_stop is not None and not self.should_exit:
                begin_stop()
            super().handle_exit(sig, frame)

    server = Server(server_config(app, host, port, log_level))
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
