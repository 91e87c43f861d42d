"""`seq2seq serve MODEL_DIR`: the HTTP server of `seq2seq.serve.app` (needs the `serve` extra)."""

from __future__ import annotations

import os

import click

from seq2seq.accel.device import INFERENCE_PRECISIONS
from seq2seq.cli.common import ensemble_options, ensemble_settings, loading_errors, user_errors
from seq2seq.cli.deploy import check_engine_choice, engine_options, export_loader

API_KEY_ENV = "SEQ2SEQ_API_KEY"
EXTRA_MISSING = ("`seq2seq serve` needs the optional 'serve' dependencies, FastAPI and uvicorn ({name} is not "
                 "installed): pip install 'seq2seq[serve]'")


def require_serve_extra() -> None:
    """ClickException naming the extra when FastAPI or uvicorn cannot be imported."""
    for name in ("fastapi", "uvicorn"):
        try:
            __import__(name)
        except ImportError:
            raise click.ClickException(EXTRA_MISSING.format(name=name)) from None


@click.command()
@click.argument("model_dir", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port to listen on.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, mps.")
@click.option("--precision", type=click.Choice(INFERENCE_PRECISIONS), default="fp32", show_default=True,
              help="bf16: bfloat16 weights and autocast; int8: dynamically quantized linear layers (CPU).")
@click.option("--weights", type=click.Path(dir_okay=False), default=None,
              help="Use these weights instead of MODEL_DIR/model.safetensors (e.g. from `seq2seq average`).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Torch CPU threads (default: torch's choice).")
@click.option("--max-batch", type=click.IntRange(min=1), default=64, show_default=True,
              help="Texts per model call, gathered from concurrent requests.")
@click.option("--batch-window-ms", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="How long a batch waits for more requests to join it.")
@click.option("--batch-tokens", type=click.IntRange(min=1), default=4000, show_default=True,
              help="Padded source tokens per batch inside a model call.")
@click.option("--max-texts", type=click.IntRange(min=1), default=64, show_default=True,
              help="Texts (or files) per request; more: 413.")
@click.option("--max-chars", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Characters per text; more: 413.")
@click.option("--max-beam", type=click.IntRange(min=1), default=16, show_default=True,
              help="Largest beam and nbest a request may ask for; more: 413.")
@click.option("--max-phrases", type=click.IntRange(min=1), default=256, show_default=True,
              help="Constraints and avoid phrases per text; more: 413.")
@click.option("--max-len", type=click.IntRange(min=1), default=512, show_default=True,
              help="Largest max_len_b (output tokens) a request may ask for; more: 413.")
@click.option("--max-queue", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Texts waiting for the model; more: 503.")
@click.option("--max-work", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Decoder steps a request's search may take: the sum of its texts' output length limits x beam "
                   "(or samples); more: 413, before it is queued.")
@click.option("--request-timeout", type=click.FloatRange(min=0, min_open=True, max=1e6), default=30.0,
              show_default=True, help="Seconds from a request's arrival at the queue to its answer; past them: 504, "
                                      "and its search stops between two decoding steps (as when the client goes away).")
@click.option("--read-timeout", type=click.FloatRange(min=0, min_open=True, max=1e6), default=10.0,
              show_default=True, help="Seconds a request's head may take to arrive, and its body between two reads; "
                                      "more: 408 and the connection closed.")
@click.option("--max-pixels", type=click.IntRange(min=1), default=40_000_000, show_default=True,
              help="Image models: pixels (width x height, from the file's header) per image; more: 413.")
@click.option("--max-audio-seconds", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="Audio models: seconds per audio file (from its header); longer: 413.")
@click.option("--api-key", envvar=API_KEY_ENV, show_envvar=True, default=None,
              help="Requests must send 'Authorization: Bearer KEY' (or 'X-API-Key: KEY'), else 401; GET /health "
                   "stays open. Prefer the environment variable: arguments are visible to other users.")
@click.option("--allow-paths", is_flag=True,
              help="Image/audio models: /generate may read files on this machine named in {\"paths\": [...]}.")
@click.option("--glossary", type=click.Path(dir_okay=False), default=None,
              help="TSV 'source term<TAB>target term', read once at start (text models): where a request's text "
                   "holds a source term, its target term must appear in the translation (a constraint).")
@click.option("--adapter", "adapters", multiple=True, metavar="NAME=DIR",
              help="Serve the LoRA adapter in DIR (trained on MODEL_DIR) as NAME, for requests with "
                   "\"adapter\": NAME (repeatable; one copy of MODEL_DIR's weights for all).")
@ensemble_options
@engine_options
@click.option("--no-demo", is_flag=True, help="No demo page at GET / (the JSON API only).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True, help="uvicorn's log level.")
@user_errors
def serve(model_dir: tuple[str, ...], host: str, port: int, device: str, precision: str, weights: str | None,
          threads: int | None, max_batch: int, batch_window_ms: float, batch_tokens: int, max_texts: int,
          max_chars: int, max_beam: int, max_phrases: int, max_len: int, max_queue: int, max_work: int,
          request_timeout: float, read_timeout: float, max_pixels: int, max_audio_seconds: float,
          api_key: str | None, allow_paths: bool, glossary: str | None, engine: str, engine_dir: str | None,
          no_demo: bool, log_level: str, adapters: tuple[str, ...] = (), **ensemble_kw: object) -> None:
    """Serve MODEL_DIR over HTTP until Ctrl+C or SIGTERM (requests in flight are finished first, or cut
    at --request-timeout);
    several MODEL_DIRs (or --last-checkpoints) are served as one ensemble; --engine ctranslate2 serves
    the model's CTranslate2 export (`seq2seq export`).

    \b
    POST /translate  {"text": "..."} or {"texts": [...]}, plus search options ("beam": 5, ...)
                     and steering ("prefix": "...", "constraints": [...], "avoid": [...])
    POST /generate   image/audio models: the file's bytes (search options in the query string)
    GET  /health, GET /info; POST /attention (a PNG); GET / a demo page to try the model in a browser
    POST bodies must be Content-Type: application/json (uploads: the file's type). Concurrent requests
    are batched into shared model calls. See docs/serving.md (limits, errors, threat model).
    """
    require_serve_extra()
    import torch

    from seq2seq.inference.glossary import Glossary
    from seq2seq.inference.generator import load_engine
    from seq2seq.serve.app import check_glossary, create_app, run_server
    from seq2seq.serve.requests import Limits, check_key_format

    try:
        limits = Limits(max_texts=max_texts, max_chars=max_chars, max_beam=max_beam, max_batch=max_batch,
                        batch_window_ms=batch_window_ms, max_queue=max_queue, batch_tokens=batch_tokens,
                        max_pixels=max_pixels, max_audio_seconds=max_audio_seconds, max_phrases=max_phrases,
                        max_len=max_len, max_work=max_work, request_timeout_s=request_timeout,
                        read_timeout_s=read_timeout)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if api_key is None and os.environ.get(API_KEY_ENV) == "":
        api_key = ""  # click reads an empty variable as unset: refused here, as --api-key "" is
    if api_key is not None:
        try:
            check_key_format(api_key)
        except ValueError as e:
            raise click.UsageError(f"--api-key (or {API_KEY_ENV}): {e}") from None
    ensemble = ensemble_settings(ensemble_kw)
    check_engine_choice(engine, engine_dir, model_dir, ensemble, weights=weights)
    terms = Glossary.load(glossary) if glossary else None  # a bad file: one line (SteeringError), before loading
    if threads:
        torch.set_num_threads(threads)
    with loading_errors(model_dir, device):  # the engine of what the model reads: the server serves any kind
        model = load_engine(model_dir, device, precision, weights, export=export_loader(engine),
                            engine_dir=engine_dir, **ensemble)
    if adapters:  # (a bad NAME=DIR, another base's adapter: one line each)
        from seq2seq.adapters.serving import attach_adapters, parse_adapter_option

        try:
            if engine == "ctranslate2":
                raise click.UsageError("--adapter serves adapters with the torch engine; merge one for CTranslate2 "
                                       "(seq2seq merge-adapter, then export)")
            attach_adapters(model, dict(parse_adapter_option(a) for a in adapters), weights)
        except ValueError as e:
            raise click.ClickException(str(e)) from None
    check_glossary(model, terms)
    app = create_app(model, limits, allow_paths=allow_paths, api_key=api_key, demo=not no_demo, glossary=terms)
    endpoint = "/generate" if hasattr(model, "generate") else "/translate"
    click.echo(f"serving {' + '.join(model_dir)} on http://{host}:{port} (POST {endpoint}, GET /health); Ctrl+C stops", err=True)
    try:
        run_server(app, host=host, port=port, log_level=log_level)
    except OSError as e:  # e.g. the port is taken
        raise click.ClickException(f"cannot listen on {host}:{port}: {e}") from None
    click.echo("server stopped", err=True)
