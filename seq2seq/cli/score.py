"""`seq2seq score`: the log-probability a model gives each (source, target) pair (forced decoding,
`seq2seq.inference.scoring`), or with --dcce BACKWARD_MODEL_DIR the pair's dual conditional
cross-entropy adequacy (`seq2seq.data.dcce`); one output line per input pair, in order."""

from __future__ import annotations

import dataclasses
import itertools
import sys
from typing import TYPE_CHECKING, BinaryIO, Iterator

import click

from seq2seq.cli import common
from seq2seq.cli.common import (
    PROGRESS_OPTION, TGT_LANG_OPTION, check_output_paths, loading_errors, model_files, model_options, output_file,
    show_progress, user_errors,
)
from seq2seq.config.diagnostics import ByInput, Diagnostic
from seq2seq.inference.results import with_diagnostics
from seq2seq.inference.scoring import ScoringError
from seq2seq.text.lines import (
    check_input_file, count_lines, decoded_lines, is_regular_file, json_line, open_binary, warn,
)

if TYPE_CHECKING:
    from seq2seq.inference.translator import Translator

Pair = tuple[str, str]


@click.command()
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("--src", "src_path", default=None, help="Source file, one sentence a line (.gz read as gzip).")
@click.option("--tgt", "tgt_path", default=None, help="Target file, line-parallel to --src.")
@click.option("-i", "--input", "input_path", default=None,
              help="Pairs as 'source<TAB>target' lines ('-': stdin, the default without --src/--tgt).")
@click.option("-o", "--output", "output_path", default="-", show_default=True, help="Output file ('-': stdout).")
@click.option("--normalize", is_flag=True,
              help="Print the mean log-probability per target token (EOS counted) instead of the sum.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per pair: logprob, normalized, n_tokens, tokens, token_logprobs.")
@click.option("--dcce", "backward_dir", default=None, type=click.Path(file_okay=False), metavar="BACKWARD_MODEL_DIR",
              help="Print each pair's dual conditional cross-entropy adequacy exp(-dcce), in (0, 1], with "
                   "MODEL_DIR as the forward model (source->target) and this one as the backward (target->source).")
@click.option("--src-lang", default=None, metavar="LANG",
              help="With --dcce: the backward model's target language, if it is multilingual.")
@TGT_LANG_OPTION
@PROGRESS_OPTION
@model_options
@user_errors
def score(model_dir: str, src_path: str | None, tgt_path: str | None, input_path: str | None, output_path: str,
          normalize: bool, as_json: bool, backward_dir: str | None, src_lang: str | None, tgt_lang: str | None,
          progress: bool | None, device: str, precision: str, weights: str | None, batch_tokens: int,
          chunk_lines: int) -> None:
    """Score given translations with MODEL_DIR: one line per (source, target) pair, in input order.

    The score is the log-probability of the target given the source, by forced decoding (one
    teacher-forced decoder pass, no search): the sum over the target's tokens and EOS (natural log), or
    with --normalize the mean per token. Pairs come from --src and --tgt, or from -i (stdin by default)
    as source<TAB>target. A pair with an empty source is not scored: it prints -inf (null in --json),
    with a warning naming its line. With --dcce, see docs/scoring.md.
    """
    if (src_path is None) != (tgt_path is None):
        raise click.UsageError("give both --src and --tgt (or pairs as source<TAB>target lines with -i)")
    if src_path is not None and input_path is not None:
        raise click.UsageError("give pairs either as --src and --tgt or with -i, not both")
    if backward_dir is not None and normalize:
        raise click.UsageError("--dcce prints an adequacy, made of per-token cross-entropies already; drop --normalize")
    if src_lang is not None and backward_dir is None:
        raise click.UsageError("--src-lang is the backward model's target language; it goes with --dcce")
    paths: list[str] = [src_path, tgt_path] if src_path is not None and tgt_path is not None else [input_path or "-"]
    for path in paths:
        check_input_file(path)
    check_output_paths({"-o": output_path}, [*paths, *model_files(model_dir, weights),
                                             *(model_files(backward_dir) if backward_dir else [])])
    total = _check_parallel(src_path, tgt_path)
    from seq2seq.inference.generator import load_engine
    from seq2seq.inference.inputs import Call
    from seq2seq.inference.translator import Translator

    with loading_errors(model_dir, device):
        forward = load_engine(model_dir, device, precision, weights, decodes=Translator, call=Call(tgt_lang=tgt_lang))
    backward = None
    if backward_dir is not None:
        with loading_errors(backward_dir, device):
            backward = load_engine(backward_dir, device, precision, decodes=Translator, call=Call(tgt_lang=src_lang))
    if total is None and len(paths) == 1 and is_regular_file(paths[0]):
        total = count_lines(paths[0])
    bar = show_progress(progress, output_path)
    try:
        with output_file(output_path) as out:
            pairs = _read_pairs(*paths) if len(paths) == 2 else _read_tsv(paths[0])
            _score_stream(pairs, out, forward, backward, batch_tokens, chunk_lines, as_json, normalize, tgt_lang,
                          src_lang, bar, total)
    except BrokenPipeError:  # e.g. `seq2seq score ... | head`: stop quietly
        common.stop_on_broken_pipe()


def _check_parallel(src_path: str | None, tgt_path: str | None) -> int | None:
    """The number of pairs of --src and --tgt when both are regular files (one-line ScoringError naming them
    when their line counts differ, before any model is loaded); None when they cannot be counted up front."""
    if src_path is None or tgt_path is None or not (is_regular_file(src_path) and is_regular_file(tgt_path)):
        return None
    n_src, n_tgt = count_lines(src_path), count_lines(tgt_path)
    if n_src != n_tgt:
        raise ScoringError(_mismatch(src_path, n_src, tgt_path, n_tgt))
    return n_src


def _mismatch(src_path: str, n_src: int, tgt_path: str, n_tgt: int, more: bool = False) -> str:
    """The message of --src and --tgt of different lengths (`more`: counted as far as the shorter went)."""
    plus = "+" if more else ""
    return (f"{src_path} has {n_src}{plus if n_src > n_tgt else ''} lines but {tgt_path} has "
            f"{n_tgt}{plus if n_tgt > n_src else ''}: sources and targets must be line-parallel")


def _read_pairs(src_path: str, tgt_path: str) -> Iterator[Pair]:
    """The pairs of two line-parallel files, lazily; ScoringError naming both when one ends first."""
    with open_binary(src_path, "rb") as fs, open_binary(tgt_path, "rb") as ft:
        srcs = decoded_lines(fs, "stdin" if src_path == "-" else src_path)
        tgts = decoded_lines(ft, "stdin" if tgt_path == "-" else tgt_path)
        n = 0
        for src, tgt in itertools.zip_longest(srcs, tgts):
            if src is None or tgt is None:
                n_src, n_tgt = (n, n + 1) if src is None else (n + 1, n)
                raise ScoringError(_mismatch(src_path, n_src, tgt_path, n_tgt, more=True))
            n += 1
            yield src, tgt


def _read_tsv(path: str) -> Iterator[Pair]:
    """The pairs of 'source<TAB>target' lines, lazily (a blank line: an empty pair); ScoringError naming the
    file and line of a line that is not two fields."""
    name = "stdin" if path == "-" else path
    with open_binary(path, "rb") as f:
        for number, line in enumerate(decoded_lines(f, name), 1):
            fields = line.split("\t")
            if len(fields) == 2:
                yield fields[0], fields[1]
            elif not line.strip():
                yield "", ""
            else:
                raise ScoringError(f"{name} line {number}: {len(fields)} tab-separated fields; give source<TAB>target")


def _backward_note(d: Diagnostic) -> Diagnostic:
    """A warning of the backward model, which reads the targets as its sources: said so."""
    return dataclasses.replace(d, message=f"backward model (target -> source): {d.message}")


def _score_stream(pairs: Iterator[Pair], out: BinaryIO, forward: Translator, backward: Translator | None,
                  batch_tokens: int, chunk_lines: int, as_json: bool, normalize: bool, tgt_lang: str | None, src_lang: str | None,
                  progress: bool, total: int | None) -> int:
    """Score `pairs` chunk by chunk, writing and flushing each chunk's lines before reading on; the number of
    pairs. Warnings go to stderr, and with --json those about a pair into its object too."""
    from tqdm import tqdm

    from seq2seq.data.dcce import DcceScore
    from seq2seq.inference.scoring import score_pairs

    by_line = ByInput(warn)
    done = 0
    with tqdm(total=total, unit=" pairs", disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
        while chunk := list(itertools.islice(pairs, chunk_lines)):
            srcs, tgts = [s for s, _ in chunk], [t for _, t in chunk]
            fwd = score_pairs(forward, srcs, tgts, batch_tokens, first_line=done + 1, warn=by_line, tgt_lang=tgt_lang)
            lines = []
            if backward is not None:
                bwd = score_pairs(backward, tgts, srcs, batch_tokens, first_line=done + 1,
                                  warn=lambda d: by_line(_backward_note(d)), tgt_lang=src_lang)
                for i, (f, b) in enumerate(zip(fwd, bwd)):
                    dual = DcceScore.of(f, b)
                    notes = by_line.pop(done + i)
                    lines.append(json_line(with_diagnostics(dual.to_json(), notes)) if as_json
                                 else f"{dual.adequacy:.6g}")
            else:
                for i, s in enumerate(fwd):
                    notes = by_line.pop(done + i)
                    lines.append(json_line(with_diagnostics(s.to_json(), notes)) if as_json
                                 else f"{s.normalized if normalize else s.logprob:.4f}")
            out.write("".join(line + "\n" for line in lines).encode("utf-8"))
            out.flush()
            done += len(chunk)
            bar.update(len(chunk))
    return done
