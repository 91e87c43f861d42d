"""Text in and out for the command line: reading lines, formatting translations, streaming.

* Input is read as bytes and split on '\\n' only (a stray '\\r' or U+2028 stays inside its line), so
  the output has exactly one entry per input line; invalid UTF-8 is replaced, with a warning naming
  the line. '-' is stdin/stdout, a name ending in .gz is read/written through gzip.
* Output lines never contain a line break of their own (`one_line`), whatever the model produced.
* `translate_stream` translates chunk by chunk and flushes each chunk's output before reading on,
  with an optional progress bar on stderr.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import sys
from typing import Any, BinaryIO, Callable, Iterator

import click

LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines() splits on
_ONE_LINE = str.maketrans({c: " " for c in LINE_BREAKS})
NBEST_FORMATS = ("marian", "fairseq")


def warn(message: str) -> None:
    """`warning: message` on stderr (above a progress bar, if one is showing)."""
    from tqdm import tqdm

    with tqdm.external_write_mode(file=sys.stderr):
        click.echo(f"warning: {message}", err=True)


def std_binary(name: str) -> BinaryIO:
    stream = getattr(sys, name)
    return getattr(stream, "buffer", stream)


def open_binary(path: str, mode: str) -> BinaryIO:
    """'-' is stdin/stdout; a name ending in .gz is read/written through gzip."""
    if path == "-":
        return std_binary("stdin" if mode == "rb" else "stdout")
    if path.endswith(".gz"):
        return gzip.open(path, mode)  # type: ignore[return-value]
    return open(path, mode)  # noqa: SIM115 - closed by the caller


def decoded_lines(stream: BinaryIO, name: str, warn: Callable[[str], None] = warn) -> Iterator[str]:
    """Lines of a byte stream, lazily: split on '\\n' only (a lone '\\r' or U+2028 stays inside its
    line), one trailing '\\r' dropped (CRLF files), invalid UTF-8 replaced by U+FFFD with a warning
    that names the line."""
    for number, raw in enumerate(stream, 1):
        raw = raw[:-1] if raw.endswith(b"\n") else raw
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            text = raw.decode("utf-8", errors="replace")
            warn(f"{name} line {number}: invalid UTF-8 (byte {e.start}) replaced with U+FFFD")
        yield text.removeprefix("\ufeff") if number == 1 else text


def read_input_lines(path: str) -> list[str]:
    """All lines of a file ('-': stdin), as `decoded_lines` reads them; a missing file is a one-line error."""
    if path != "-" and not os.path.isfile(path):
        raise click.ClickException(f"file not found: {path}")
    with open_binary(path, "rb") as f:
        return list(decoded_lines(f, path))


def count_lines(path: str) -> int:
    """The number of lines `decoded_lines` will give for a file (for a progress bar's total)."""
    n, last = 0, b"\n"
    with open_binary(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block
    return n + (not last.endswith(b"\n"))


def one_line(text: str) -> str:
    return text.translate(_ONE_LINE)


def json_line(obj: Any) -> str:
    text = json.dumps(obj, ensure_ascii=False)
    for c in "\x85\u2028\u2029":  # legal raw in JSON strings, but line breaks to splitlines()
        text = text.replace(c, f"\\u{ord(c):04x}")
    return text


def _empty_translation() -> Any:
    from seq2seq.inference.translator import Translation

    return Translation(text="", score=0.0, logprob=0.0, token_ids=[], pieces=[], token_logprobs=[], src_pieces=[])


def formatter(fmt: str, nbest: int, nbest_format: str | None = None) -> Callable[[int, list], str]:
    """The output text (newline-terminated) of input line `index` (0-based) from its n-best list.

    text: the best translation. scores: "score<TAB>text". json: one object per input line (with an
    "nbest" list when nbest > 1). n-best lists (nbest > 1, or nbest_format given), one line per
    hypothesis, best first:
      marian:  "index ||| text ||| F0= logprob ||| score"  (Marian's --n-best lines)
      fairseq: "H-index<TAB>score<TAB>text"                 (fairseq-generate's H- lines)
    score is the length-penalised log-probability, logprob the plain sum (natural logarithms).
    """
    if nbest_format is not None and nbest_format not in NBEST_FORMATS:
        raise ValueError(f"unknown n-best format {nbest_format!r}; choose one of {', '.join(NBEST_FORMATS)}")
    listed = nbest_format or ("marian" if nbest > 1 and fmt != "json" else None)

    def hypothesis(index: int, h: Any) -> str:
        if listed == "fairseq":
            return f"H-{index}\t{h.score:.4f}\t{one_line(h.text)}\n"
        return f"{index} ||| {one_line(h.text)} ||| F0= {h.logprob:.4f} ||| {h.score:.4f}\n"

    def emit(index: int, hyps: list) -> str:
        hyps = hyps or [_empty_translation()]
        if fmt == "json":
            obj = hyps[0].to_json()
            obj["text"] = one_line(obj["text"])
            if nbest > 1:
                obj["nbest"] = [{**h.to_json(), "text": one_line(h.text)} for h in hyps]
            return json_line(obj) + "\n"
        if listed:
            return "".join(hypothesis(index, h) for h in hyps)
        if fmt == "scores":
            return f"{hyps[0].score:.4f}\t{one_line(hyps[0].text)}\n"
        return one_line(hyps[0].text) + "\n"

    return emit


def translate_stream(
    translator: Any,
    lines: Iterator[str],
    out: BinaryIO,
    emit: Callable[[int, list], str],
    chunk_lines: int,
    batch_tokens: int,
    search: dict[str, Any],
    warn: Callable[[str], None] = warn,
    progress: bool = False,
    total: int | None = None,
) -> int:
    """Translate `lines` chunk by chunk (each chunk sorted into token-bounded batches by the
    Translator), writing and flushing each chunk's output before reading the next. Returns the
    number of lines. `progress`: a progress bar on stderr (lines done, of `total` if known)."""
    from tqdm import tqdm

    done = 0
    with tqdm(total=total, unit=" lines", disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
        while True:
            chunk = list(itertools.islice(lines, chunk_lines))
            if not chunk:
                return done
            results = translator.translate_nbest(chunk, batch_tokens=batch_tokens, first_line=done + 1, warn=warn,
                                                 **search)
            out.write("".join(emit(done + i, r) for i, r in enumerate(results)).encode("utf-8"))
            out.flush()
            done += len(chunk)
            bar.update(len(chunk))
