"""`seq2seq caption` and `seq2seq transcribe`: text from image or audio files with a model directory.

Both are one command with two names: the model directory's encoder type must match (an image model
for `caption`, an audio model for `transcribe`). Sources are the FILES arguments, or, without any,
one path per line from `-i FILE` or stdin. Exactly one output line per source, in order.
`transcribe` takes recordings of any length: a long one is cut into windows at its pauses
(`seq2seq.inference.generator.Transcriber`), --timestamps shows each window's times.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Iterator, TypedDict

import click

from seq2seq.cli.common import (
    PROGRESS_OPTION,
    check_output_paths,
    ensemble_options,
    ensemble_settings,
    loading_errors,
    model_files,
    model_options,
    pop_option,
    pop_strings,
    output_file,
    search_options,
    search_overrides,
    show_progress,
    user_errors,
)
from seq2seq.cli.steering import Steerer, steering_options
from seq2seq.text.lines import check_input_file, open_binary, warn

if TYPE_CHECKING:
    from seq2seq.inference.results import Translation


def _sources(files: tuple[str, ...], input_path: str | None) -> Iterator[str]:
    if files and input_path is not None:
        raise click.UsageError("give source files as arguments or with -i/--input, not both")
    if files:
        yield from files
        return
    path = input_path or "-"
    check_input_file(path)
    with open_binary(path, "rb") as stream:
        for number, raw in enumerate(stream, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise click.ClickException(
                    f"{'stdin' if path == '-' else path} line {number} is not UTF-8 text: -i takes a list of file "
                    f"paths, one per line; give the files themselves as arguments") from None
            if line:
                yield line


class Windows(TypedDict, total=False):
    """How `transcribe` cuts recordings: the windows' times shown, a progress bar, the longest window."""

    timestamps: bool
    progress: bool
    max_window_seconds: float


def _run(api: str, model_dir: str, files: tuple[str, ...], input_path: str | None, output_path: str,
         as_json: bool, with_path: bool, show_attention: str | None, attention_layer: int, skip_bad: bool,
         device: str, precision: str, weights: str | None, batch_tokens: int, chunk_lines: int,
         **kw: object) -> None:
    from seq2seq.model.encoders.sources import SourceError
    from seq2seq.inference import generator as generators
    from seq2seq.inference.inputs import Call, SourceInput
    from seq2seq.config.diagnostics import ByInput
    from seq2seq.inference.engine import decode_stream
    from seq2seq.inference.results import file_formatter

    steer = Steerer.from_options(kw)
    ensemble = ensemble_settings(kw)
    members = pop_strings(kw, "ensemble")
    timestamps = bool(pop_option(kw, "timestamps", bool))
    progress, max_window_seconds = pop_option(kw, "progress", bool), pop_option(kw, "max_window_seconds", float)
    search = search_overrides(kw)
    if show_attention:
        search["attention_layer"] = attention_layer
    windows: Windows = {}  # transcribe: how long recordings are cut
    cls = {"Captioner": generators.Captioner, "Transcriber": generators.Transcriber}[api]
    if issubclass(cls, generators.Transcriber):
        windows = {"timestamps": timestamps, "progress": show_progress(progress, output_path)}
        if show_attention:  # one plot over the whole recording: one window, never cut
            windows["max_window_seconds"] = math.inf
        elif max_window_seconds is not None:
            windows["max_window_seconds"] = max_window_seconds
    check_output_paths({"-o": output_path, "--show-attention": show_attention},
                       [*files, *([input_path] if input_path else []), *(steer.paths if steer else []),
                        *model_files((model_dir, *members), weights)])
    # SourceError (wrong kind of model), CheckpointError, TokenizerError, bad options: one line
    with loading_errors((model_dir, *members), device):
        generator = generators.load_engine((model_dir, *members), device, precision, weights, decodes=cls,
                                           call=Call(search), **ensemble)
    cfg = generator.search_config(**search)  # resolved once: every chunk of the sources is decoded with it
    emit = file_formatter("json" if as_json else "path" if with_path else "text", cfg.nbest, timestamps)
    sources = _sources(files, input_path)
    try:
        with output_file(output_path) as out:
            if show_attention:
                paths = list(sources)
                if len(paths) != 1:
                    raise click.ClickException(f"--show-attention draws one source, but {len(paths)} were given")
                try:  # refused before decoding where it cannot be drawn
                    view = generator.attention_view(paths[0])
                except SourceError as e:
                    raise click.ClickException(f"--show-attention: {e}") from None
                inputs = steer(paths) if steer is not None else [SourceInput(path) for path in paths]
                results = generator.run(inputs, Call(search, batch_tokens=batch_tokens, **windows, resolved=cfg))
                out.write(emit(inputs[0].text, results[0]).encode("utf-8"))
                generator.plot_attention(results[0][0], show_attention, view)
                click.echo(f"attention plot: {show_attention}", err=True)
                return

            by_line = ByInput(warn)  # the warnings about one file go in its --json object too
            call = Call(search, batch_tokens=batch_tokens, skip_bad=skip_bad, **windows, resolved=cfg)

            def decode(inputs: list[SourceInput], first_line: int) -> list[list[Translation]]:
                return generator.run(inputs, call, first_line, by_line)

            decode_stream(sources, out, decode, lambda i, path, r: emit(path, r, by_line.pop(i)), chunk_lines,
                          steer=steer)
    except SourceError as e:
        raise click.ClickException(f"{e} (--skip-bad writes an empty line for such a file and goes on)") from None


AUDIO_HELP = """

    Recordings of any length: one longer than --max-window-seconds is cut into windows at its
    pauses (frame energy relative to the recording; the longest pauses first, only as many as
    needed; fixed windows overlapping by 1 s where there is no pause), all windows are decoded in
    batches, and the windows' texts are joined in order into the file's one line (--nbest: that one
    joined hypothesis). A shorter recording is decoded whole, as one utterance. --timestamps writes
    each window as "[start-end] text" (seconds); with --json, a "segments" list of start, end, text
    and words whose times are spread over the window's voiced part (approximate). --show-attention
    decodes its recording whole."""


def _audio_options(fn: Callable[..., None]) -> Callable[..., None]:
    for option in reversed([
        click.option("--max-window-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Longest window a recording is decoded in [default: the model's encoder.max_seconds if "
                          "set, else 20]; about the longest training utterance suits a model trained on short ones."),
        click.option("--timestamps", is_flag=True, help="Each window's start-end seconds with its text."),
        PROGRESS_OPTION,
    ]):
        fn = option(fn)
    return fn


def _command(name: str, api: str, noun: str, summary: str, audio: bool = False) -> click.Command:
    """The command `name`, decoding with the `seq2seq.inference.generator` class `api`; audio: the
    options of recordings of any length (`Transcriber`)."""
    @click.command(name, help=f"""{summary}

    Sources are FILES, or one path per line from -i FILE or stdin. Writes one line per source, in
    order: the text (--with-path: "path<TAB>text"; --json: one object per source; --nbest N > 1:
    N lines "path<TAB>score<TAB>text" per source). MODEL_DIR must hold {noun} model.""" + (AUDIO_HELP if audio else ""))
    @click.argument("model_dir", type=click.Path(file_okay=False))
    @click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
    @click.option("-i", "--input", "input_path", default=None, help="File listing one source path per line ('-': stdin).")
    @click.option("-o", "--output", "output_path", default="-", show_default=True, help="Output file ('-': stdout).")
    @search_options(nbest="Hypotheses per source.")
    @click.option("--json", "as_json", is_flag=True, help="One JSON object per source: source, text, score, tokens.")
    @click.option("--with-path", is_flag=True, help="Print 'path<TAB>text'.")
    @click.option("--show-attention", type=click.Path(dir_okay=False), default=None, metavar="FILE.png",
                  help="Draw each generated word's cross-attention over the (single) source.")
    @click.option("--attention-layer", type=int, default=-1, show_default=True,
                  help="Decoder layer for --show-attention (negative: from the last).")
    @click.option("--skip-bad", is_flag=True, help="An unreadable file gives an empty line and a warning instead of an error.")
    @steering_options(glossary=False, json_input=False)
    @click.option("--ensemble", multiple=True, type=click.Path(file_okay=False), metavar="DIR",
                  help="Another model directory to decode with MODEL_DIR as an ensemble (repeatable).")
    @ensemble_options
    @model_options
    @(_audio_options if audio else lambda fn: fn)
    @user_errors
    def command(model_dir: str, files: tuple[str, ...], input_path: str | None, output_path: str, as_json: bool,
                with_path: bool, show_attention: str | None, attention_layer: int, skip_bad: bool, device: str,
                precision: str, weights: str | None, batch_tokens: int, chunk_lines: int, **kw: object) -> None:
        # (kw: the search, steering, ensemble and audio options, read by `_run`)
        _run(api, model_dir, files, input_path, output_path, as_json, with_path, show_attention, attention_layer,
             skip_bad, device, precision, weights, batch_tokens, chunk_lines, **kw)

    return command


caption = _command("caption", "Captioner", "an image", "Caption images with MODEL_DIR (an image-to-text model).")
transcribe = _command("transcribe", "Transcriber", "an audio", "Transcribe audio files with MODEL_DIR (a speech-to-text "
                      "model).", audio=True)
