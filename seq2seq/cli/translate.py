"""`seq2seq translate`: one output line per input line, from a file, stdin or a terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO, Callable, Iterator

import click

from seq2seq.cli import common
from seq2seq.cli.common import (
    PROGRESS_OPTION, TGT_LANG_OPTION, Options, check_output_paths, ensemble_options, ensemble_settings, languages, loading_errors, model_files, model_options, output_file, pipeline_steps, search_options, search_overrides,
    show_progress, text_pipeline, text_pipeline_options, user_errors,
)
from seq2seq.cli.deploy import check_engine_choice, engine_options, export_loader
from seq2seq.cli.steering import Steerer, steering_options
from seq2seq.documents.formats import FORMAT_NAMES, format_of_path, read_document, translate_documents
from seq2seq.documents.line_translation import PIPELINE_STEPS
from seq2seq.inference.engine import translate_stream
from seq2seq.inference.inputs import Call, SourceInput
from seq2seq.inference.results import NBEST_FORMATS, formatter

if TYPE_CHECKING:
    from seq2seq.config.search import SearchOptions
    from seq2seq.inference.engine import Decode
from seq2seq.text.lines import (
    check_input_file, count_lines, decoded_lines, is_regular_file, open_binary, std_binary, warn,
)


@click.command()
@click.argument("model_dir", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("-i", "--input", "input_path", default="-", show_default=True, help="Input file ('-': stdin; .gz read as gzip).")
@click.option("-o", "--output", "output_path", default="-", show_default=True, help="Output file ('-': stdout).")
@search_options(nbest="Hypotheses per input line; > 1 prints an n-best list (see --nbest-format).")
@click.option("--nbest-format", type=click.Choice(NBEST_FORMATS), default=None,
              help="n-best lines, best first, LINE counted from 0: marian 'LINE ||| text ||| F0= logprob ||| score' "
                   "(the default for --nbest > 1) or fairseq 'H-LINE<TAB>score<TAB>text'.")
@click.option("--scores", is_flag=True, help="Print 'score<TAB>translation' (score: length-penalised log-probability).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per input line: text, score, logprob, tokens.")
@click.option("--format", "doc_format", type=click.Choice(FORMAT_NAMES), default=None,
              help="What the input is: text (one sentence or paragraph a line, translated line by line), or an "
                   "html, xml or markdown document, translated whole into the same document (markup, attributes, "
                   "code and whitespace kept; docs/documents.md). Default: by the -i file's name (.html, .htm, "
                   ".xhtml, .xml, .md, .markdown), else text.")
@click.option("--alignment", is_flag=True, help="With --json: add the cross-attention matrix and the source tokens.")
@click.option("--show-attention", type=click.Path(dir_okay=False), default=None, metavar="FILE.png",
              help="Plot the cross-attention of the (single) input sentence as a heatmap.")
@click.option("--attention-layer", type=int, default=-1, show_default=True,
              help="Decoder layer for --alignment / --show-attention (negative: from the last).")
@engine_options
@steering_options()
@text_pipeline_options
@TGT_LANG_OPTION
@click.option("--src-lang", default=None, metavar="LANG",
              help="The source language, for a model whose sources start with their language's tag (an imported "
                   "M2M100, NLLB-200 or mBART-50: e.g. eng_Latn with --tgt-lang deu_Latn).")
@ensemble_options
@PROGRESS_OPTION
@model_options
@user_errors
def translate(model_dir: tuple[str, ...], input_path: str, output_path: str, nbest_format: str | None, scores: bool, as_json: bool,
              doc_format: str | None, alignment: bool, show_attention: str | None, attention_layer: int, engine: str, engine_dir: str | None,
              progress: bool | None, device: str, precision: str, weights: str | None, batch_tokens: int,
              chunk_lines: int, **kw: object) -> None:
    """Translate text with MODEL_DIR (several: an ensemble): one output line per input line, in order.

    Reads stdin (or -i FILE) and writes stdout (or -o FILE), translating CHUNK_LINES lines at a
    time. With a terminal on stdin it is interactive: type a sentence after the "> " prompt. A line
    of several sentences is split and joined back, and a sentence in capitals is cased, as the model
    directory says (--split-sentences, --casing, --loop-guard; docs/documents.md). An HTML, XML or
    Markdown document (--format, or by its file name) is read whole and written back whole.
    """
    steps: Options = {name: kw.pop(name) for name in PIPELINE_STEPS}
    steer = Steerer.from_options(kw)
    ensemble = ensemble_settings(kw)
    language = languages(kw)
    search = search_overrides(kw)
    if alignment and not as_json:
        raise click.UsageError("--alignment adds the attention to --json output; add --json")
    if scores and as_json:
        raise click.UsageError("--json already holds the scores; use one of --scores and --json")
    if nbest_format and (as_json or scores):
        raise click.UsageError(f"--nbest-format is an output format of its own; drop {'--json' if as_json else '--scores'}")
    doc_format = doc_format or format_of_path(input_path)
    if doc_format != "text":
        _check_document_options(doc_format, nbest_format, scores, as_json, alignment, show_attention, search)
    if alignment or show_attention:
        search["attention_layer"] = attention_layer
    check_input_file(input_path)
    check_output_paths({"-o": output_path, "--show-attention": show_attention},
                       [input_path, *(steer.paths if steer else []),
                        *model_files(model_dir, weights, (engine_dir or "") if engine != "torch" else None)])
    document: str | None = None  # --format html|xml|markdown: the input, read whole (and checked) before the model loads
    document_name = "stdin" if input_path == "-" else input_path
    if doc_format != "text":
        document = read_document(input_path, document_name, doc_format)
    interactive = input_path == "-" and common.stdin_is_tty() and document is None
    lines: list[str] | None = None  # --show-attention reads its one sentence up front
    if show_attention and not interactive:
        with open_binary(input_path, "rb") as f:
            lines = list(decoded_lines(f, input_path))
        if len(lines) != 1 or not lines[0].strip():
            what = "an empty line" if len(lines) == 1 else f"{len(lines)} lines"
            raise click.ClickException(
                f"--show-attention plots one sentence, but the input has {what}; give exactly one non-empty line"
            )
    check_engine_choice(engine, engine_dir, model_dir, ensemble, language, weights)
    from seq2seq.inference.generator import load_engine
    from seq2seq.inference.translator import Translator

    with loading_errors(model_dir, device):
        translator = load_engine(model_dir, device, precision, weights, decodes=Translator,
                                 export=export_loader(engine), engine_dir=engine_dir,
                                 call=Call(search, **language), **ensemble)
    if document is not None:
        text = translate_documents(translator, [document], doc_format, names=[document_name], warn=warn,
                                   batch_tokens=batch_tokens, **pipeline_steps(translator, steps),
                                   **(steer.shared(f"--format {doc_format}") if steer else {}), **language, **search)[0]
        with output_file(output_path) as out:
            out.write(text.encode("utf-8"))
        return
    cfg = translator.search_config(**search)  # resolved once: every chunk of the input is decoded with it
    if show_attention:  # the plot is of one sentence: its line goes to the model unsplit
        steps["split_sentences"] = False
    pipeline = text_pipeline(translator, steps)
    call = Call(search, batch_tokens=batch_tokens, **(steer.call_options() if steer else {}), **language, resolved=cfg)
    emit = formatter("json" if as_json else "scores" if scores else "text", cfg.nbest, nbest_format)

    try:
        with output_file(output_path) as out:
            if interactive:
                _translate_interactively(out, pipeline, emit, show_attention, call, steer)
            elif lines is not None:
                inputs = steer(lines) if steer is not None else [SourceInput(line) for line in lines]
                results = pipeline(inputs, call, 1, warn)
                out.write(emit(0, results[0]).encode("utf-8"))
                out.flush()
                assert show_attention  # (the one line of --show-attention)
                _plot(results, show_attention)
            else:
                show_bar = show_progress(progress, output_path)
                total = count_lines(input_path) if show_bar and is_regular_file(input_path) else None
                with open_binary(input_path, "rb") as f:
                    translate_stream(translator, decoded_lines(f, "stdin" if input_path == "-" else input_path), out,
                                     emit, chunk_lines, call, progress=show_bar, total=total, steer=steer,
                                     pipeline=pipeline)
    except BrokenPipeError:  # e.g. `seq2seq translate ... | head`: stop quietly
        common.stop_on_broken_pipe()


def _check_document_options(doc_format: str, nbest_format: str | None, scores: bool, as_json: bool, alignment: bool,
                            show_attention: str | None, search: SearchOptions) -> None:
    """A document is written back whole: the options of line-by-line output are refused with it."""
    given = [flag for flag, on in (("--nbest-format", nbest_format), ("--scores", scores), ("--json", as_json),
                                   ("--alignment", alignment), ("--show-attention", show_attention),
                                   ("--nbest", (search.get("nbest") or 1) > 1)) if on]
    if given:
        raise click.UsageError(f"--format {doc_format} writes the translated document; {given[0]} is an option of "
                               "line-by-line output (use --format text)")


def _translate_interactively(out: BinaryIO, pipeline: Decode, emit: Callable[[int, list], str],
                             show_attention: str | None, call: Call, steer: Steerer | None) -> None:
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
        results = pipeline(steer([line]) if steer is not None else [SourceInput(line)], call, number, warn)
        out.write(emit(number - 1, results[0]).encode("utf-8"))
        out.flush()
        if show_attention and results[0]:
            _plot(results, show_attention)


def _plot(results: list, path: str) -> None:
    """--show-attention: draw the attention of the first source's best translation (results[0][0]) into `path`."""
    from seq2seq.report.plots import plot_attention

    best = results[0][0]
    plot_attention(best.attention, best.src_pieces, best.pieces + ["</s>"], path)
    click.echo(f"attention plot: {path}", err=True)

