"""Results as output lines: the formats of `seq2seq translate` / `test` (`formatter`), of `seq2seq
caption` / `transcribe` (`file_formatter`), and translating a stream of lines chunk by chunk
(`translate_stream`). Output lines never contain a line break of their own (`one_line`).
"""

from __future__ import annotations

import itertools
import sys
from typing import Any, BinaryIO, Callable, Iterator, Sequence

from seq2seq.config.diagnostics import ByInput, Diagnostic, Warn
from seq2seq.inference.engine import Engine
from seq2seq.inference.results import Translation, with_diagnostics
from seq2seq.text.lines import json_line, one_line, warn

NBEST_FORMATS = ("marian", "fairseq")


def _empty_translation() -> Translation:
    return Translation(text="", score=0.0, logprob=0.0, token_ids=[], pieces=[], token_logprobs=[], src_pieces=[])


def formatter(fmt: str, nbest: int, nbest_format: str | None = None, documents: bool = False) -> Callable[..., str]:
    """emit(index, n-best list, notes=()): the output text (newline-terminated) of input line `index`
    (0-based) from its n-best list, and the warnings it drew (`notes`, `Diagnostic`s).

    text: the best translation. scores: "score<TAB>text". json: one object per input line (with an
    "nbest" list when nbest > 1, and the line's "warnings" and "diagnostics" if it drew any: the
    server's result object, `with_diagnostics`). n-best lists (nbest > 1, or nbest_format given), one line per
    hypothesis, best first:
      marian:  "index ||| text ||| F0= logprob ||| score"  (Marian's --n-best lines)
      fairseq: "H-index<TAB>score<TAB>text"                 (fairseq-generate's H- lines)
    score is the length-penalised log-probability, logprob the plain sum (natural logarithms).
    documents (json): each result is a whole document (`seq2seq.documents.formats`), whose text keeps its
    line breaks (escaped by JSON).
    """
    if nbest_format is not None and nbest_format not in NBEST_FORMATS:
        raise ValueError(f"unknown n-best format {nbest_format!r}; choose one of {', '.join(NBEST_FORMATS)}")
    listed = nbest_format or ("marian" if nbest > 1 and fmt != "json" else None)

    def hypothesis(index: int, h: Translation) -> str:
        if listed == "fairseq":
            return f"H-{index}\t{h.score:.4f}\t{one_line(h.text)}\n"
        return f"{index} ||| {one_line(h.text)} ||| F0= {h.logprob:.4f} ||| {h.score:.4f}\n"

    def emit(index: int, hyps: list, notes: Sequence[Diagnostic] = ()) -> str:
        hyps = hyps or [_empty_translation()]
        if fmt == "json":
            obj = hyps[0].to_json()
            obj["text"] = obj["text"] if documents else one_line(obj["text"])
            if nbest > 1:
                obj["nbest"] = [{**h.to_json(), "text": one_line(h.text)} for h in hyps]
            return json_line(with_diagnostics(obj, notes)) + "\n"
        if listed:
            return "".join(hypothesis(index, h) for h in hyps)
        if fmt == "scores":
            return f"{hyps[0].score:.4f}\t{one_line(hyps[0].text)}\n"
        return one_line(hyps[0].text) + "\n"

    return emit


def timed_text(h: Translation) -> str:
    """A transcription with its windows' times, on one line: "[0.00-4.20] three one four [4.20-8.10] ..."
    (start-end in seconds, 2 decimals); its plain text when it has no segments."""
    if h.segments is None:
        return one_line(h.text)
    return " ".join(f"[{s.start:.2f}-{s.end:.2f}] {one_line(s.text)}".rstrip() for s in h.segments)


def file_formatter(fmt: str, nbest: int, timestamps: bool = False) -> Callable[..., str]:
    """emit(path, n-best list, notes=()): the output text of one source file from its n-best list ([] for
    a file that could not be read) and the warnings it drew.

    text: the best text. path: "path<TAB>text". json: one object per file (with an "nbest" list when
    nbest > 1, and its "warnings" and "diagnostics" if it drew any). nbest > 1 (text or path): one "path<TAB>score<TAB>text" line per hypothesis.
    timestamps (transcriptions): text and path give each window as "[start-end] text" (`timed_text`),
    json a "segments" list (start, end, text, words with approximate times).
    """
    show = timed_text if timestamps else (lambda h: one_line(h.text))

    def emit(path: str, hyps: list, notes: Sequence[Diagnostic] = ()) -> str:
        if fmt == "json":
            obj = hyps[0].to_json() if hyps else {"source": path, "text": "", "error": "unreadable"}
            if nbest > 1:
                obj["nbest"] = [h.to_json() for h in hyps]
            return json_line(with_diagnostics(obj, notes)) + "\n"
        if nbest > 1:
            return "".join(f"{path}\t{h.score:.4f}\t{show(h)}\n" for h in hyps) or f"{path}\t\t\n"
        text = show(hyps[0]) if hyps else ""
        return f"{path}\t{text}\n" if fmt == "path" else text + "\n"

    return emit


def translate_stream(
    translator: Engine,
    lines: Iterator[str],
    out: BinaryIO,
    emit: Callable[..., str],
    chunk_lines: int,
    batch_tokens: int,
    search: dict[str, Any],
    warn: Warn = warn,
    progress: bool = False,
    total: int | None = None,
    steer: Callable[[list[str]], tuple[list[str], dict[str, Any]]] | None = None,
    pipeline: Callable[..., list[list[Translation]]] | None = None,
) -> int:
    """Translate `lines` with `translator.translate_nbest` (`decode_stream`; each chunk sorted into
    token-bounded batches by the translator), or with `pipeline`, a call with translate_nbest's
    arguments that takes lines as people write them (the command line's: the documents layer's
    `translate_lines` bound to the translator, sentences split and cased). Each warning goes to `warn`,
    and those about one line to its output too (`emit`'s notes: `--json` prints them). Returns the
    number of lines."""
    by_line = ByInput(warn)
    call = pipeline or translator.translate_nbest

    def decode(texts: list[str], first_line: int, steering: dict[str, Any]) -> list:
        return call(texts, batch_tokens=batch_tokens, first_line=first_line, warn=by_line, **steering, **search)

    return decode_stream(lines, out, decode, lambda i, _, r: emit(i, r, by_line.pop(i)), chunk_lines, progress,
                         total, steer)


def decode_stream(
    lines: Iterator[str],
    out: BinaryIO,
    decode: Callable[[list[str], int, dict[str, Any]], list],
    emit: Callable[[int, str, list], str],
    chunk_lines: int,
    progress: bool = False,
    total: int | None = None,
    steer: Callable[[list[str]], tuple[list[str], dict[str, Any]]] | None = None,
) -> int:
    """Decode `lines` (texts, or media file paths) chunk by chunk, writing and flushing each chunk's
    output before reading the next: one `emit(index, line, n-best list)` per line, in order. Returns
    the number of lines. decode(lines, first_line, steering arguments) -> one n-best list per line.
    `progress`: a progress bar on stderr (lines done, of `total` if known). steer: turns a chunk's
    lines into the lines and the steering arguments to decode them with
    (`seq2seq.cli.steering.Steerer`; its `close()` is called at the end of the input)."""
    from tqdm import tqdm

    done = 0
    with tqdm(total=total, unit=" lines", disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
        while True:
            chunk = list(itertools.islice(lines, chunk_lines))
            if not chunk:
                if steer is not None and hasattr(steer, "close"):
                    steer.close()
                return done
            chunk, steering = steer(chunk) if steer is not None else (chunk, {})
            results = decode(chunk, done + 1, steering)
            text = "".join(emit(done + i, line, r) for i, (line, r) in enumerate(zip(chunk, results)))
            out.write(text.encode("utf-8"))
            out.flush()
            done += len(chunk)
            bar.update(len(chunk))
