"""What the commands share: logging, turning the toolkit's errors into one line, and the options
for loading a model and choosing a search."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence, TypedDict, TypeVar, cast

import click

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.accel.device import INFERENCE_PRECISIONS
from seq2seq.storage import outputs

if TYPE_CHECKING:
    from seq2seq.config.search import SearchOptions
    from seq2seq.inference.engine import Decode, Engine
    from seq2seq.inference.translator import EnsembleKeywords
    from seq2seq.serve.requests import PipelineSteps

log = logging.getLogger("seq2seq")

T = TypeVar("T")
Options = dict[str, object]
"""A command's keyword options as click gives them (`**kw`): each read with its type (`pop_option`), or
passed on as a whole to a reader of its own (`search_overrides`, `ensemble_settings`, `Steerer`)."""


class Languages(TypedDict, total=False):
    """--tgt-lang and --src-lang, where given: a multilingual model's languages."""

    tgt_lang: str | None
    src_lang: str | None


def languages(kw: Options) -> Languages:
    """--tgt-lang and --src-lang popped from kw: those given."""
    given: Languages = {}
    tgt_lang, src_lang = pop_option(kw, "tgt_lang", str), pop_option(kw, "src_lang", str)
    if tgt_lang:
        given["tgt_lang"] = tgt_lang
    if src_lang:
        given["src_lang"] = src_lang
    return given


def pop_option(kw: Options, name: str, kind: type[T]) -> T | None:
    """The option `name` popped from `kw`: None when absent or unset, else its value, of the type `kind`
    click parsed it as (TypeError for another: a mistake in the command's options)."""
    value = kw.pop(name, None)
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"option {name}: {kind.__name__} expected, got {value!r}")
    return value


def pop_required(kw: Options, name: str, kind: type[T]) -> T:
    """An option that click always gives (it has a default) popped from `kw`, of the type `kind`."""
    value = pop_option(kw, name, kind)
    if value is None:
        raise TypeError(f"option {name}: missing")
    return value


def pop_strings(kw: Options, name: str) -> tuple[str, ...]:
    """A repeatable option (`multiple=True`) popped from `kw`: its values, () when absent."""
    values = pop_option(kw, name, tuple) or ()
    strings = tuple(v for v in values if isinstance(v, str))
    if len(strings) != len(values):
        raise TypeError(f"option {name}: strings expected, got {values!r}")
    return strings


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    for noisy in ("datasets", "urllib3", "matplotlib", "filelock", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def user_errors(fn: Callable) -> Callable:
    """Turn the toolkit's user-facing errors (every `Seq2SeqError`: bad config, data, input, checkpoint,
    tokenizer, steering ...), whose message is the whole report, into one line `error: ...` and exit
    code 1, with no traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Seq2SeqError as e:
            raise click.ClickException(str(e)) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper



# One check of a command's outputs against its inputs, and one writer (atomic, or in place for a FIFO,
# a device, /dev/stdout): seq2seq.storage.outputs. Their errors are `Seq2SeqError`s (`user_errors`).
check_output_path = outputs.check_output_path
check_output_paths = outputs.check_output_paths
output_file = outputs.open_output


def model_files(model_dirs: str | Iterable[str], weights: str | None = None,
                engine_dir: str | None = None) -> list[str]:
    """The files a command reads from its model(s), for `check_output_paths`: every file of each model
    directory's layout (`ModelDir.own_files`), --weights, and the files of a CTranslate2 export
    (--engine-dir, else MODEL_DIR/ctranslate2) when engine_dir is given or is ''."""
    from seq2seq.storage.model_dir import ModelDir

    dirs = [model_dirs] if isinstance(model_dirs, str) else list(model_dirs)
    files = [str(p) for d in dirs for p in ModelDir(d).own_files()]
    if weights:
        files.append(weights)
    if engine_dir is not None and dirs:
        export = Path(engine_dir or Path(dirs[0]) / "ctranslate2")
        if export.is_dir():
            files += [str(p) for p in sorted(export.iterdir()) if p.is_file()]
    return files


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


def search_options(nbest: str | None = None) -> Callable[[Callable], Callable]:
    """Decoding options, one per `SEARCH_OPTIONS` entry (the `SearchConfig` fields marked as options,
    and --greedy/--sample); unset ones keep the model's `decoding` config. nbest: the help text of
    --nbest for this command, None to leave --nbest out. The values are checked by
    `resolve_search` (in `load_engine`), as a server request's are."""
    from seq2seq.config.search import SEARCH_OPTIONS

    options = []
    for o in SEARCH_OPTIONS.values():
        if o.name == "nbest" and nbest is None:
            continue
        if o.type is bool:
            options.append(click.option(o.flag, o.name, is_flag=True, help=o.help))
        else:
            options.append(click.option(o.flag, o.name, type=o.type, default=None,
                                        help=nbest if o.name == "nbest" else o.help))

    def decorate(fn: Callable) -> Callable:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


def search_overrides(kw: Mapping[str, object]) -> SearchOptions:
    """The search options given on the command line (a switch only when set; 0 is a value)."""
    from seq2seq.config.search import SEARCH_OPTIONS

    given = {k: kw[k] for k in SEARCH_OPTIONS if kw.get(k) is not None and kw[k] is not False}
    # the `SEARCH_OPTIONS` names, each value of the type its click option parses (`search_options`);
    # `resolve_search` checks them again where they are used
    return cast("SearchOptions", given)


def ensemble_options(fn: Callable) -> Callable:
    """Options of an ensemble (several MODEL_DIRs, or --last-checkpoints of one): `ensemble_settings` reads them."""
    for option in reversed([
        click.option("--ensemble-weights", default=None, metavar="W1,W2,...",
                     help="Ensemble: one weight per model (default: equal)."),
        click.option("--ensemble-combine", type=click.Choice(["prob", "logprob"]), default="prob", show_default=True,
                     help="Ensemble: average the members' probabilities, or their log-probabilities."),
        click.option("--last-checkpoints", type=click.IntRange(min=2), default=None, metavar="N",
                     help="Decode with the last N checkpoints of MODEL_DIR's run as an ensemble."),
    ]):
        fn = option(fn)
    return fn


def ensemble_settings(kw: Options) -> EnsembleKeywords:
    """The `load_engine` ensemble keywords of `ensemble_options` (popped from kw); a malformed weight list is
    a one-line error."""
    weights = pop_option(kw, "ensemble_weights", str)
    settings: EnsembleKeywords = {"ensemble_combine": pop_option(kw, "ensemble_combine", str) or "prob",
                                  "last_checkpoints": pop_option(kw, "last_checkpoints", int)}
    if weights is not None:
        try:
            settings["ensemble_weights"] = [float(w) for w in weights.split(",")]
        except ValueError:
            raise click.ClickException(f"--ensemble-weights {weights!r}: give numbers separated by commas, "
                                       "e.g. 0.5,0.3,0.2") from None
    return settings


@contextlib.contextmanager
def loading_errors(model_dirs: str | Sequence[str], device: str) -> Iterator[None]:
    """`load_engine`'s problems as one-line errors: a ValueError's message (CheckpointError, TokenizerError,
    SourceError, ExportError: missing files, a vocabulary mismatch, a model of another kind, a bad search
    option or language) and a RuntimeError's first line (e.g. a device torch cannot use)."""
    try:
        yield
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    except RuntimeError as e:
        named = model_dirs if isinstance(model_dirs, str) else " ".join(model_dirs)
        raise click.ClickException(f"cannot load {named} on device {device!r}: {str(e).splitlines()[0]}") from None


TGT_LANG_OPTION = click.option(
    "--tgt-lang", default=None, metavar="LANG",
    help="A multilingual model's target language (e.g. de; a multilingual model needs one, and lists its own).",
)

PROGRESS_OPTION = click.option(
    "--progress/--no-progress", default=None,
    help="Progress bar on stderr (default: only when stderr is a terminal and the output is not shown on it).",
)



def text_pipeline_options(fn: Callable) -> Callable:
    """--[no-]split-sentences, --[no-]casing, --[no-]loop-guard, --[no-]spans, --[no-]markup: the steps of the text
    pipeline (`seq2seq.documents.line_translation.PIPELINE_STEPS`; unset: the model's `pipeline_defaults`)."""
    for option in reversed([
        click.option("--split-sentences/--no-split-sentences", "split_sentences", default=None,
                     help="Split each line into its sentences, translate each and join them back with the line's "
                          "spacing (default: on for a model trained on single sentences, as its model directory says)."),
        click.option("--casing/--no-casing", "casing", default=None,
                     help="Translate a sentence in UPPER CASE or Title Case as its normal-case form, and upper-case "
                          "an UPPER sentence's output (default: on where --split-sentences is)."),
        click.option("--loop-guard/--no-loop-guard", "loop_guard", default=None,
                     help="Search an output that repeats itself (\"man man man\", \"EEEEE\") again with "
                          "no_repeat_ngram 3 (default: on)."),
        click.option("--spans/--no-spans", "spans", default=None,
                     help="Keep URLs, e-mail addresses, @handles, {variables}, %s, `code` and numbers verbatim: taken "
                          "out of the sentence and put back through the word alignment (default: on)."),
        click.option("--markup/--no-markup", "markup", default=None,
                     help="With --spans, also inline tags (<b>, <a href=...>, <br/>, Markdown **, _, [text](url)): "
                          "put around the translation of the words they wrapped (default: off)."),
    ]):
        fn = option(fn)
    return fn


def pipeline_steps(translator: Engine, kw: Options) -> PipelineSteps:
    """The text pipeline's steps: the `text_pipeline_options` given (popped from kw), else the model's
    defaults (`pipeline_defaults`)."""
    from seq2seq.documents.line_translation import pipeline_defaults

    default = pipeline_defaults(translator)

    def step(name: str) -> bool:
        given = pop_option(kw, name, bool)
        return default[name] if given is None else given

    return {"split_sentences": step("split_sentences"), "casing": step("casing"), "loop_guard": step("loop_guard"),
            "spans": step("spans"), "markup": step("markup")}


def text_pipeline(translator: Engine, kw: Options) -> Decode:
    """`translate_line_inputs` bound to the translator with its `pipeline_steps`: what `translate_stream`
    calls (its `pipeline`)."""
    from seq2seq.documents.line_translation import translate_line_inputs

    return functools.partial(translate_line_inputs, translator, **pipeline_steps(translator, kw))


def stop_on_broken_pipe() -> None:
    """After a BrokenPipeError on stdout (e.g. `seq2seq translate ... | head`): stdout pointed at /dev/null,
    so that Python's flush at exit raises nothing more, and exit 1 quietly."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass
    sys.exit(1)
