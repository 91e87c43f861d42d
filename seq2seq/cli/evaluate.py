"""`seq2seq evaluate` (score hypotheses) and `seq2seq test` (translate, then score)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Mapping, Sequence

import click

from seq2seq.cli.common import (
    PROGRESS_OPTION, TGT_LANG_OPTION, Options, check_output_path, ensemble_options, ensemble_settings, languages, loading_errors, model_files, model_options, output_file, search_options, search_overrides,
    show_progress, text_pipeline, text_pipeline_options, user_errors,
)
from seq2seq.cli.steering import Steerer, steering_options
from seq2seq.documents.line_translation import PIPELINE_STEPS
from seq2seq.config.diagnostics import Diagnostic
from seq2seq.inference.engine import translate_stream
from seq2seq.inference.results import formatter
from seq2seq.text.lines import read_input_lines


@click.command()
@click.option("--hyp", "hyp_path", required=True, help="Hypotheses, one per line (.gz read as gzip).")
@click.option("--ref", "ref_paths", required=True, multiple=True, help="References, line-parallel (repeat for several).")
@click.option("--metrics", default="bleu,chrf,ter", show_default=True, help="Comma-separated: bleu, chrf, ter.")
@click.option("--json", "as_json", is_flag=True, help="Print the scores and signatures as JSON.")
@user_errors
def evaluate(hyp_path: str, ref_paths: tuple[str, ...], metrics: str, as_json: bool) -> None:
    """Score hypotheses against references with sacreBLEU (BLEU, chrF, TER and their signatures)."""
    names = _metric_names(metrics)
    hyps = read_input_lines(hyp_path)
    if not hyps:
        raise click.ClickException(f"{hyp_path} is empty: nothing to score")
    refs = _read_references(ref_paths, len(hyps), hyp_path, "hypotheses")
    _print_scores(hyps, refs, names, as_json)


def _metric_names(metrics: str) -> list[str]:
    """The metrics of --metrics; UsageError for an unknown one or none (checked before anything is written)."""
    from seq2seq.text.metrics import METRICS

    names = [m.strip().lower() for m in metrics.split(",") if m.strip()]
    unknown = [m for m in names if m not in METRICS]
    if unknown or not names:
        raise click.UsageError(f"--metrics: unknown {unknown}; choose from {', '.join(METRICS)}")
    return names


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


def _print_scores(hyps: list[str], refs: list[list[str]], names: list[str], as_json: bool,
                  extra: Mapping[str, object] | None = None) -> None:
    """Score with the metrics `names` (`_metric_names`) and print (as text, or as JSON: one {"score",
    "signature"} per metric, and `extra`'s keys)."""
    from seq2seq.text.metrics import format_scores, score

    result = score(hyps, refs, names)
    if as_json:
        scores = {k: {"score": v["score"], "signature": v["signature"]} for k, v in result.items()}
        click.echo(json.dumps({**scores, **(extra or {})}, indent=2))
    else:
        click.echo(format_scores(result))


@click.command("test")
@click.argument("model_dir", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--src", "src_path", required=True, help="Source sentences, one per line (.gz read as gzip).")
@click.option("--ref", "ref_paths", required=True, multiple=True, help="References, line-parallel (repeat for several).")
@click.option("-o", "--output", "output_path", default=None,
              help="Where the hypotheses go (default: SRC's file name + .hyp, in the current directory).")
@click.option("--metrics", default="bleu,chrf,ter", show_default=True, help="Comma-separated: bleu, chrf, ter.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the scores and signatures as JSON, with the translation speed under \"decoding\".")
@search_options()
@steering_options(json_input=False)
@text_pipeline_options
@TGT_LANG_OPTION
@ensemble_options
@PROGRESS_OPTION
@model_options
@user_errors
def test_command(model_dir: tuple[str, ...], src_path: str, ref_paths: tuple[str, ...], output_path: str | None, metrics: str,
                 as_json: bool, progress: bool | None, device: str, precision: str, weights: str | None,
                 batch_tokens: int, chunk_lines: int, **kw: object) -> None:
    """Translate --src with MODEL_DIR (several: an ensemble), write the hypotheses, and score them against --ref.

    Each line is translated as `seq2seq translate` translates it (sentences split and cased as the model
    directory says: --split-sentences, --casing, --loop-guard)."""
    steps: Options = {name: kw.pop(name) for name in PIPELINE_STEPS}
    names = _metric_names(metrics)
    steer = Steerer.from_options(kw)
    ensemble = ensemble_settings(kw)
    language = languages(kw)
    search = search_overrides(kw)
    output = output_path or Path(src_path).name.removesuffix(".gz") + ".hyp"
    check_output_path(output, [src_path, *ref_paths, *(steer.paths if steer else []), *model_files(model_dir, weights)])
    sources = read_input_lines(src_path)
    if not sources:
        raise click.ClickException(f"{src_path} is empty: nothing to translate")
    refs = _read_references(ref_paths, len(sources), src_path, "sources")
    from seq2seq.inference.generator import load_engine
    from seq2seq.inference.inputs import Call
    from seq2seq.inference.translator import Translator

    with loading_errors(model_dir, device):
        translator = load_engine(model_dir, device, precision, weights, decodes=Translator,
                                 call=Call(search, **language), **ensemble)
    hyps: list[str] = []
    plain = formatter("text", 1)

    def emit(index: int, results: list, notes: Sequence[Diagnostic] = ()) -> str:
        line = plain(index, results)
        hyps.append(line[:-1])
        return line

    start = time.perf_counter()
    with output_file(output) as out:
        call = Call(search, batch_tokens=batch_tokens, **(steer.call_options() if steer else {}), **language)
        translate_stream(translator, iter(sources), out, emit, chunk_lines, call,
                         progress=show_progress(progress, str(output)), total=len(sources), steer=steer,
                         pipeline=text_pipeline(translator, steps))
    seconds = time.perf_counter() - start
    speed = {"sentences": len(hyps), "seconds": round(seconds, 3),
             "sentences_per_second": round(len(hyps) / seconds, 1)}
    click.echo(f"hypotheses: {output} ({len(hyps)} lines, translated in {seconds:.1f} s: "
               f"{speed['sentences_per_second']} sentences/s, loading excluded)", err=True)
    _print_scores(hyps, refs, names, as_json, {"decoding": speed})

