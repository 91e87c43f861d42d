"""The `seq2seq` command line: click subcommands wiring the library together.

Every user-fixable problem (bad config key, bad data, bad model directory) ends as one readable
line on stderr and exit code 1, never a traceback from deep inside torch.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import click

from . import __version__
from .textio import (
    NBEST_FORMATS, count_lines, decoded_lines, formatter, json_line, one_line, open_binary, read_input_lines,
    std_binary, translate_stream, warn,
)

log = logging.getLogger("seq2seq")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    for noisy in ("datasets", "urllib3", "matplotlib", "filelock", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def user_error_types() -> tuple[type[Exception], ...]:
    """The toolkit's errors that are the user's to fix (bad config, data, checkpoint, tokenizer), whose
    message is the whole report: a command prints it on one line, with no traceback."""
    from .checkpoint import CheckpointError
    from .config import ConfigError
    from .data import DataError
    from .tokenizer import TokenizerError
    from .train import TrainingAborted

    return ConfigError, DataError, CheckpointError, TokenizerError, TrainingAborted


def user_errors(fn: Callable) -> Callable:
    """Turn the toolkit's user-facing errors into `error: ...` and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except user_error_types() as e:
            raise click.ClickException(str(e)) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="seq2seq")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def cli(verbose: bool) -> None:
    """seq2seq: train, translate with and evaluate encoder-decoder Transformers."""
    _setup_logging(verbose)


@cli.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override a config value, e.g. --set training.lr=3e-4 (repeatable).")
@click.option("--resume", is_flag=True, help="Continue the run in training.output_dir exactly where it stopped.")
@click.option("--output-dir", "-o", default=None, help="Shortcut for --set training.output_dir=DIR.")
@click.option("--init-from", "init_from", default=None, type=click.Path(file_okay=False), metavar="MODEL_DIR",
              help="Fine-tune: start from MODEL_DIR's weights and tokenizer (fresh optimizer and schedule).")
@user_errors
def train(config: str, overrides: tuple[str, ...], resume: bool, output_dir: str | None,
          init_from: str | None) -> None:
    """Train a model from a YAML CONFIG (see configs/example.yaml) into the model directory
    training.output_dir, the directory `translate`, `test` and `average` take."""
    from .experiment import load_config, run_training

    overrides = list(overrides) + ([f"training.output_dir={output_dir}"] if output_dir else [])
    cfg = load_config(config, overrides)
    result = run_training(cfg, resume=resume, config_source=config, init_from=init_from)
    click.echo(f"model directory: {result['out_dir']} (best {cfg.training.best_metric} "
               f"{result['best'] if result['best'] is not None else float('nan'):.2f} at step {result['best_step']})")


@cli.command("config")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override a config value, as for `seq2seq train` (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@user_errors
def config_command(config: str | None, overrides: tuple[str, ...], as_json: bool) -> None:
    """Print the full resolved config: every key of every section, defaults filled in.

    CONFIG (optional: without it, the defaults) is read and checked as `seq2seq train` reads it,
    --set overrides applied; `model.encoder.type` decides which encoder keys appear. The output is
    itself a valid config file.
    """
    from .config import to_dict
    from .settings import config_yaml, load_config

    cfg = load_config(config, list(overrides))
    if as_json:
        click.echo(json.dumps(to_dict(cfg), indent=2))
        return
    source = config or "the defaults"
    click.echo(f"# {source}{' + ' + ' '.join(overrides) if overrides else ''}: every key, defaults filled in")
    click.echo(config_yaml(cfg), nl=False)


@cli.command()
@click.option("--output-dir", "-o", default="runs/quickstart", show_default=True, help="Where data and model go.")
@click.option("--minutes", default=3.5, show_default=True, help="Training budget in wall-clock minutes.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, mps.")
@click.option("--seed", default=1, show_default=True, help="Seed for the corpus and the training run.")
@click.option("--overwrite", is_flag=True, help="Replace an existing OUTPUT_DIR/model.")
@user_errors
def quickstart(output_dir: str, minutes: float, device: str, seed: int, overwrite: bool) -> None:
    """Generate a small English->German corpus, train on it, report held-out BLEU and chrF.

    No download needed: the corpus comes from a seeded grammar with agreement, verb-final
    subordinate clauses and numbers written as words. Leaves the corpus in OUTPUT_DIR/data and
    a model directory, OUTPUT_DIR/model, that `seq2seq translate` loads.
    """
    from .quickstart import run_quickstart

    run_quickstart(output_dir, minutes=minutes, device=device, seed=seed, overwrite=overwrite)


# --------------------------------------------------------------------------------------------
# translate, test, evaluate, average
# --------------------------------------------------------------------------------------------

PRECISION_CHOICES = ("fp32", "bf16", "int8")

# The text I/O helpers' former names here, for modules written against them (seq2seq/cli_media.py).
_warn, _json_line, _one_line, _open_binary, _std_binary = warn, json_line, one_line, open_binary, std_binary
_decoded_lines, _read_lines, _formatter, _translate_stream = decoded_lines, read_input_lines, formatter, translate_stream


def _stdin_is_tty() -> bool:
    return sys.stdin.isatty()


def _show_progress(option: bool | None, output_path: str) -> bool:
    """--progress/--no-progress, else a bar only where a person watches stderr: stderr is a terminal,
    and the output does not go to that terminal too (the bar would be drawn between the lines)."""
    if option is not None:
        return option
    to_terminal = output_path == "-" and sys.stdout.isatty()
    return sys.stderr.isatty() and not to_terminal


def model_options(fn: Callable) -> Callable:
    """Options that choose how the model is loaded and run."""
    for option in reversed(
        [
            click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, mps."),
            click.option("--precision", type=click.Choice(PRECISION_CHOICES), default="fp32", show_default=True,
                         help="bf16: bfloat16 weights and autocast; int8: dynamically quantized linear layers (CPU)."),
            click.option("--weights", type=click.Path(dir_okay=False), default=None,
                         help="Use these weights instead of MODEL_DIR/model.safetensors (e.g. from `seq2seq average`)."),
            click.option("--batch-tokens", type=click.IntRange(min=1), default=4000, show_default=True,
                         help="Padded source tokens per batch."),
            click.option("--chunk-lines", type=click.IntRange(min=1), default=500, show_default=True,
                         help="Lines read, translated and written at a time."),
        ]
    ):
        fn = option(fn)
    return fn


def search_options(fn: Callable) -> Callable:
    """Decoding options; unset ones keep the model's `decoding` config."""
    for option in reversed(
        [
            click.option("--beam", type=click.IntRange(min=1), default=None, help="Beam size (1 = greedy search)."),
            click.option("--greedy", is_flag=True, help="Greedy search."),
            click.option("--sample", is_flag=True, help="Sample (see --topk, --topp, --temperature, --seed)."),
            click.option("--lenpen", type=float, default=None, help="Length penalty exponent (GNMT)."),
            click.option("--max-len-a", type=float, default=None, help="Max output length = a * source length + b."),
            click.option("--max-len-b", type=int, default=None, help="See --max-len-a."),
            click.option("--topk", type=click.IntRange(min=0), default=None, help="Sample from the k most likely tokens."),
            click.option("--topp", type=float, default=None, help="Sample from the smallest set with probability >= p."),
            click.option("--temperature", type=float, default=None, help="Sampling temperature."),
            click.option("--seed", type=int, default=None, help="Sampling seed."),
        ]
    ):
        fn = option(fn)
    return fn


def _search_kwargs(kw: dict[str, Any]) -> dict[str, Any]:
    keys = ("beam", "greedy", "sample", "lenpen", "max_len_a", "max_len_b", "topk", "topp", "temperature", "seed", "nbest")
    return {k: kw[k] for k in keys if kw.get(k) not in (None, False)}


def _load_translator(model_dir: str, device: str, precision: str, weights: str | None, search: dict[str, Any]) -> Any:
    """Load MODEL_DIR and check the search options once, as one-line errors."""
    from .translator import Translator

    try:
        translator = Translator.load(model_dir, device=device, precision=precision, weights=weights)
        translator.search_config(**search)
    except ValueError as e:  # also CheckpointError and TokenizerError: missing files, vocab mismatch
        raise click.ClickException(str(e)) from None
    except RuntimeError as e:  # e.g. a device torch cannot use
        raise click.ClickException(f"cannot load {model_dir} on device {device!r}: {str(e).splitlines()[0]}") from None
    return translator


PROGRESS_OPTION = click.option(
    "--progress/--no-progress", default=None,
    help="Progress bar on stderr (default: only when stderr is a terminal and the output is not shown on it).",
)


@cli.command()
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("-i", "--input", "input_path", default="-", show_default=True, help="Input file ('-': stdin; .gz read as gzip).")
@click.option("-o", "--output", "output_path", default="-", show_default=True, help="Output file ('-': stdout).")
@search_options
@click.option("--nbest", type=click.IntRange(min=1), default=None,
              help="Hypotheses per input line; > 1 prints an n-best list (see --nbest-format).")
@click.option("--nbest-format", type=click.Choice(NBEST_FORMATS), default=None,
              help="n-best lines, best first, LINE counted from 0: marian 'LINE ||| text ||| F0= logprob ||| score' "
                   "(the default for --nbest > 1) or fairseq 'H-LINE<TAB>score<TAB>text'.")
@click.option("--scores", is_flag=True, help="Print 'score<TAB>translation' (score: length-penalised log-probability).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per input line: text, score, logprob, tokens.")
@click.option("--alignment", is_flag=True, help="With --json: add the cross-attention matrix and the source tokens.")
@click.option("--show-attention", type=click.Path(dir_okay=False), default=None, metavar="FILE.png",
              help="Plot the cross-attention of the (single) input sentence as a heatmap.")
@click.option("--attention-layer", type=int, default=-1, show_default=True,
              help="Decoder layer for --alignment / --show-attention (negative: from the last).")
@click.option("--engine", type=click.Choice(["torch", "ctranslate2"]), default="torch", show_default=True,
              help="ctranslate2: run the model's CTranslate2 export (see `seq2seq export`, docs/deployment.md).")
@click.option("--engine-dir", type=click.Path(file_okay=False), default=None,
              help="The CTranslate2 export to use (default: MODEL_DIR/ctranslate2).")
@PROGRESS_OPTION
@model_options
@user_errors
def translate(model_dir: str, input_path: str, output_path: str, nbest_format: str | None, scores: bool, as_json: bool,
              alignment: bool, show_attention: str | None, attention_layer: int, engine: str, engine_dir: str | None,
              progress: bool | None, device: str, precision: str, weights: str | None, batch_tokens: int,
              chunk_lines: int, **kw: Any) -> None:
    """Translate text with MODEL_DIR: one output line per input line, in order.

    Reads stdin (or -i FILE) and writes stdout (or -o FILE), translating CHUNK_LINES lines at a
    time. With a terminal on stdin it is interactive: type a sentence after the "> " prompt.
    """
    search = _search_kwargs(kw)
    if alignment and not as_json:
        raise click.UsageError("--alignment adds the attention to --json output; add --json")
    if scores and as_json:
        raise click.UsageError("--json already holds the scores; use one of --scores and --json")
    if nbest_format and (as_json or scores):
        raise click.UsageError(f"--nbest-format is an output format of its own; drop {'--json' if as_json else '--scores'}")
    if alignment or show_attention:
        search["attention_layer"] = attention_layer
    if input_path != "-" and not os.path.isfile(input_path):
        raise click.ClickException(f"input file not found: {input_path}")
    if input_path != "-" and output_path != "-" and os.path.exists(output_path) \
            and os.path.samefile(input_path, output_path):
        raise click.ClickException(f"-o {output_path} is the input file; writing it would destroy the input")
    interactive = input_path == "-" and _stdin_is_tty()
    lines: list[str] | None = None  # --show-attention reads its one sentence up front
    if show_attention and not interactive:
        with open_binary(input_path, "rb") as f:
            lines = list(decoded_lines(f, input_path))
        if len(lines) != 1 or not lines[0].strip():
            what = "an empty line" if len(lines) == 1 else f"{len(lines)} lines"
            raise click.ClickException(
                f"--show-attention plots one sentence, but the input has {what}; give exactly one non-empty line"
            )
    if engine == "torch":
        if engine_dir:
            raise click.UsageError("--engine-dir is for --engine ctranslate2")
        translator = _load_translator(model_dir, device, precision, weights, search)
    else:  # seq2seq/cli_deploy.py
        from .cli_deploy import load_engine

        translator = load_engine(engine, model_dir, engine_dir, device, precision, weights, search)
    nbest = translator.search_config(**search).nbest
    emit = formatter("json" if as_json else "scores" if scores else "text", nbest, nbest_format)

    def plot(results: list) -> None:
        from .plots import plot_attention

        best = results[0][0]
        plot_attention(best.attention, best.src_pieces, best.pieces + ["</s>"], show_attention)
        click.echo(f"attention plot: {show_attention}", err=True)

    out = open_binary(output_path, "wb")
    try:
        if interactive:
            _translate_interactively(out, translator, emit, show_attention, plot, search, batch_tokens)
        elif lines is not None:
            results = translator.translate_nbest(lines, batch_tokens=batch_tokens, warn=warn, **search)
            out.write(emit(0, results[0]).encode("utf-8"))
            out.flush()
            plot(results)
        else:
            show_bar = _show_progress(progress, output_path)
            total = count_lines(input_path) if show_bar and input_path != "-" else None
            with open_binary(input_path, "rb") as f:
                translate_stream(translator, decoded_lines(f, "stdin" if input_path == "-" else input_path), out,
                                 emit, chunk_lines, batch_tokens, search, progress=show_bar, total=total)
    except BrokenPipeError:  # e.g. `seq2seq translate ... | head`: stop quietly
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
        sys.exit(1)
    finally:
        if output_path != "-":
            out.close()


def _translate_interactively(out: BinaryIO, translator: Any, emit: Callable[[int, list], str],
                             show_attention: str | None, plot: Callable[[list], None], search: dict[str, Any],
                             batch_tokens: int) -> None:
    """Prompt "> " on stderr, translate each line typed, until end of input."""

    def prompted(stream: BinaryIO) -> Iterator[bytes]:
        while True:
            click.echo("> ", err=True, nl=False)
            raw = stream.readline()
            if not raw:
                click.echo("", err=True)
                return
            yield raw

    for number, line in enumerate(decoded_lines(prompted(std_binary("stdin")), "stdin"), 1):
        results = translator.translate_nbest([line], batch_tokens=batch_tokens, first_line=number, warn=warn, **search)
        out.write(emit(number - 1, results[0]).encode("utf-8"))
        out.flush()
        if show_attention and results[0]:
            plot(results)


@cli.command()
@click.option("--hyp", "hyp_path", required=True, help="Hypotheses, one per line (.gz read as gzip).")
@click.option("--ref", "ref_paths", required=True, multiple=True, help="References, line-parallel (repeat for several).")
@click.option("--metrics", default="bleu,chrf,ter", show_default=True, help="Comma-separated: bleu, chrf, ter.")
@click.option("--json", "as_json", is_flag=True, help="Print the scores and signatures as JSON.")
@user_errors
def evaluate(hyp_path: str, ref_paths: tuple[str, ...], metrics: str, as_json: bool) -> None:
    """Score hypotheses against references with sacreBLEU (BLEU, chrF, TER and their signatures)."""
    hyps = read_input_lines(hyp_path)
    if not hyps:
        raise click.ClickException(f"{hyp_path} is empty: nothing to score")
    refs = _read_references(ref_paths, len(hyps), hyp_path, "hypotheses")
    _print_scores(hyps, refs, metrics, as_json)


def _read_references(ref_paths: tuple[str, ...], n: int, other: str, what: str) -> list[list[str]]:
    refs = []
    for path in ref_paths:
        lines = read_input_lines(path)
        if len(lines) != n:
            raise click.ClickException(
                f"{other} has {n} lines but {path} has {len(lines)}: {what} and references must be line-parallel"
            )
        refs.append(lines)
    return refs


def _print_scores(hyps: list[str], refs: list[list[str]], metrics: str, as_json: bool) -> dict[str, Any]:
    from .metrics import METRICS, format_scores, score

    names = [m.strip().lower() for m in metrics.split(",") if m.strip()]
    unknown = [m for m in names if m not in METRICS]
    if unknown or not names:
        raise click.UsageError(f"--metrics: unknown {unknown}; choose from {', '.join(METRICS)}")
    result = score(hyps, refs, names)
    if as_json:
        click.echo(json.dumps({k: {"score": v["score"], "signature": v["signature"]} for k, v in result.items()}, indent=2))
    else:
        click.echo(format_scores(result))
    return result


@cli.command("test")
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("--src", "src_path", required=True, help="Source sentences, one per line (.gz read as gzip).")
@click.option("--ref", "ref_paths", required=True, multiple=True, help="References, line-parallel (repeat for several).")
@click.option("-o", "--output", "output_path", default=None,
              help="Where the hypotheses go (default: SRC's file name + .hyp, in the current directory).")
@click.option("--metrics", default="bleu,chrf,ter", show_default=True, help="Comma-separated: bleu, chrf, ter.")
@click.option("--json", "as_json", is_flag=True, help="Print the scores and signatures as JSON.")
@search_options
@PROGRESS_OPTION
@model_options
@user_errors
def test_command(model_dir: str, src_path: str, ref_paths: tuple[str, ...], output_path: str | None, metrics: str,
                 as_json: bool, progress: bool | None, device: str, precision: str, weights: str | None,
                 batch_tokens: int, chunk_lines: int, **kw: Any) -> None:
    """Translate --src with MODEL_DIR, write the hypotheses, and score them against --ref."""
    from .checkpoint import atomic_path

    search = _search_kwargs(kw)
    sources = read_input_lines(src_path)
    if not sources:
        raise click.ClickException(f"{src_path} is empty: nothing to translate")
    refs = _read_references(ref_paths, len(sources), src_path, "sources")
    translator = _load_translator(model_dir, device, precision, weights, search)
    output = Path(output_path or Path(src_path).name.removesuffix(".gz") + ".hyp")
    hyps: list[str] = []
    plain = formatter("text", 1)

    def emit(index: int, results: list) -> str:
        line = plain(index, results)
        hyps.append(line[:-1])
        return line

    with atomic_path(output) as tmp, open(tmp, "wb") as out:
        translate_stream(translator, iter(sources), out, emit, chunk_lines, batch_tokens, search,
                         progress=_show_progress(progress, str(output)), total=len(sources))
    click.echo(f"hypotheses: {output} ({len(hyps)} lines)", err=True)
    _print_scores(hyps, refs, metrics, as_json)


@cli.command()
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("--last", type=click.IntRange(min=1), default=None,
              help="Average the last N checkpoints of MODEL_DIR/checkpoints (default: all there).")
@click.option("-o", "--output", "output_path", default=None,
              help="Output weights (default: MODEL_DIR/model.avg.safetensors).")
@click.option("--force", is_flag=True, help="Replace the output file if it exists.")
@user_errors
def average(model_dir: str, last: int | None, output_path: str | None, force: bool) -> None:
    """Average the weights of MODEL_DIR's last checkpoints into one safetensors file.

    Use the result with `seq2seq translate/test MODEL_DIR --weights FILE`.
    """
    from . import checkpoint as ckpt

    directory = Path(model_dir)
    ckpt_dir = directory / "checkpoints"

    def step(p: Path) -> int:
        tail = p.stem.removeprefix("step_")
        return int(tail) if tail.isdigit() else -1

    paths = sorted((p for p in ckpt_dir.glob("step_*.safetensors") if step(p) >= 0), key=step)
    if not paths:
        raise ckpt.CheckpointError(f"no checkpoints (step_N.safetensors) in {ckpt_dir}")
    if last is not None:
        if last > len(paths):
            raise ckpt.CheckpointError(f"--last {last}: {ckpt_dir} holds only {len(paths)} checkpoint(s)")
        paths = paths[-last:]
    output = Path(output_path) if output_path else directory / "model.avg.safetensors"
    if output.exists() and not force:
        raise click.ClickException(f"{output} exists; pass --force to replace it, or -o to write elsewhere")
    state = ckpt.average_checkpoints(paths)
    if (directory / ckpt.CONFIG).is_file():  # refuse checkpoints that do not fit the model config
        from .config import ConfigError, from_dict, load_dict
        from .experiment import Config, build_model

        try:
            cfg = from_dict(Config, load_dict(directory / ckpt.CONFIG))
        except ConfigError as e:
            raise ckpt.CheckpointError(f"{directory / ckpt.CONFIG}: {e}") from None
        ckpt.load_into(build_model(cfg), state, paths[-1])
    ckpt.save_weights(state, output)
    click.echo(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {output}")


# Image and audio sources: `seq2seq caption`, `seq2seq transcribe` (seq2seq/cli_media.py).
from .cli_media import caption, transcribe  # noqa: E402 - needs the helpers above

cli.add_command(caption)
cli.add_command(transcribe)

# An HTTP server: `seq2seq serve` (seq2seq/cli_serve.py; FastAPI and uvicorn come with the `serve` extra).
from .cli_serve import serve  # noqa: E402 - needs the helpers above

cli.add_command(serve)

# Deployment: `seq2seq export`, `seq2seq import-hf` (seq2seq/cli_deploy.py; the `export` extra).
from .cli_deploy import export_command, import_hf_command  # noqa: E402 - needs the helpers above

cli.add_command(export_command)
cli.add_command(import_hf_command)


def main() -> None:
    cli()
