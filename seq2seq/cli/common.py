"""What the commands share: logging, turning the toolkit's errors into one line, and the options
for loading a model and choosing a search."""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any, Callable

import click

from seq2seq.accel.device import INFERENCE_PRECISIONS

log = logging.getLogger("seq2seq")


def setup_logging(verbose: bool) -> None:
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
    from seq2seq.storage.files import CheckpointError
    from seq2seq.config.schema import ConfigError
    from seq2seq.data import DataError
    from seq2seq.text.tokenizer import TokenizerError
    from seq2seq.training.trainer import TrainingAborted

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



def stdin_is_tty() -> bool:
    return sys.stdin.isatty()


def show_progress(option: bool | None, output_path: str) -> bool:
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
            click.option("--precision", type=click.Choice(INFERENCE_PRECISIONS), default="fp32", show_default=True,
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


def search_overrides(kw: dict[str, Any]) -> dict[str, Any]:
    keys = ("beam", "greedy", "sample", "lenpen", "max_len_a", "max_len_b", "topk", "topp", "temperature", "seed", "nbest")
    return {k: kw[k] for k in keys if kw.get(k) not in (None, False)}


def load_translator(model_dir: str, device: str, precision: str, weights: str | None, search: dict[str, Any]) -> Any:
    """Load MODEL_DIR and check the search options once, as one-line errors."""
    from seq2seq.inference.translator import Translator

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

