"""Text in and out for the command line: reading lines, and keeping output lines one line each.

* Input is read as bytes and split on '\\n' only (a stray '\\r' or U+2028 stays inside its line), so
  the output has exactly one entry per input line; invalid UTF-8 is replaced, with a warning naming
  the line; a line that is not UTF-8 and holds NUL bytes (a binary or UTF-16 file) is an error
  naming the line. '-' is stdin/stdout, a name ending in .gz is read/written through gzip.
* Output lines never contain a line break of their own (`one_line`), whatever the model produced.
  Turning results into output lines is seq2seq.inference.results.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import zlib
from typing import BinaryIO, Iterable, Iterator, Literal

import click

from seq2seq.config.diagnostics import Diagnostic, Seq2SeqError, Warn

LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines() splits on
_ONE_LINE = str.maketrans({c: " " for c in LINE_BREAKS})


def warn(message: Diagnostic | str) -> None:
    """`warning: message` on stderr (above a progress bar, if one is showing); the default `Warn`."""
    from tqdm import tqdm

    with tqdm.external_write_mode(file=sys.stderr):
        click.echo(f"warning: {message}", err=True)


def std_binary(name: str) -> BinaryIO:
    stream = getattr(sys, name)
    return getattr(stream, "buffer", stream)


def open_binary(path: str, mode: Literal["rb", "wb"]) -> BinaryIO:
    """'-' is stdin/stdout; a name ending in .gz is read/written through gzip."""
    if path == "-":
        return std_binary("stdin" if mode == "rb" else "stdout")
    if path.endswith(".gz"):
        return gzip.open(path, mode)  # type: ignore[return-value]
    return open(path, mode)  # noqa: SIM115 - closed by the caller


class InputError(Seq2SeqError, ValueError):
    """An input file that cannot be read to its end (a truncated or false .gz); the message names it."""


def decoded_lines(stream: Iterable[bytes], name: str, warn: Warn = warn) -> Iterator[str]:
    """Lines of a byte stream, lazily: split on '\\n' only (a lone '\\r' or U+2028 stays inside its
    line), one trailing '\\r' dropped (CRLF files), invalid UTF-8 replaced by U+FFFD with a warning
    that names the line. InputError naming the file and line where a line is not UTF-8 and holds NUL
    bytes (a binary or UTF-16 file: refused rather than turned into garbage), and naming
    the file and the last good line where the stream breaks off (a truncated .gz) or is not what its
    name says (a .gz that is not gzip)."""
    number = 0
    try:
        for number, raw in enumerate(stream, 1):
            raw = raw[:-1] if raw.endswith(b"\n") else raw
            raw = raw[:-1] if raw.endswith(b"\r") else raw
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                if b"\0" in raw:  # NUL bytes and not UTF-8: not a text file someone mistyped a byte in
                    raise InputError(f"{name} line {number} is not text (NUL bytes, not UTF-8): a binary file, "
                                     "or UTF-16 text (convert it to UTF-8)") from None
                text = raw.decode("utf-8", errors="replace")
                warn(Diagnostic(f"{name} line {number}: invalid UTF-8 (byte {e.start}) replaced with U+FFFD",
                                code="invalid_utf8"))
            yield text.removeprefix("\ufeff") if number == 1 else text
    except READ_ERRORS as e:
        raise input_error(name, e, f"after line {number}") from None


READ_ERRORS = (EOFError, OSError, zlib.error)  # gzip.BadGzipFile is an OSError


def input_error(name: str, e: BaseException, where: str) -> InputError:
    if isinstance(e, EOFError):
        return InputError(f"{name}: the compressed file ends early (truncated {where})")
    if isinstance(e, gzip.BadGzipFile):
        return InputError(f"{name}: not a gzip file, though its name ends in .gz")
    return InputError(f"{name}: cannot be read {where}: {e}")


def check_input_file(path: str) -> None:
    """Refuse, with one line, an input path that is not a file to read ('-' is stdin; /dev/null,
    /dev/stdin, /dev/fd/N and other pipes or devices are read as files)."""
    if path == "-" or os.path.isfile(path):
        return
    if os.path.isdir(path):
        raise click.ClickException(f"input {path} is a directory; give a file")
    if not os.path.exists(path):
        raise click.ClickException(f"input file not found: {path}")


def is_regular_file(path: str) -> bool:
    """Whether `path` is a regular file (following symlinks): one that can be read twice, e.g. once to
    count its lines for a progress bar and once to translate it; a pipe or stdin can be read once."""
    return path != "-" and os.path.isfile(path)


def read_input_lines(path: str) -> list[str]:
    """All lines of a file ('-': stdin), as `decoded_lines` reads them; a missing file is a one-line error."""
    check_input_file(path)
    with open_binary(path, "rb") as f:
        return list(decoded_lines(f, path))


def count_lines(path: str) -> int:
    """The number of lines `decoded_lines` will give for a file (for a progress bar's total)."""
    n, last = 0, b"\n"
    try:
        with open_binary(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                n += block.count(b"\n")
                last = block
    except READ_ERRORS as e:
        raise input_error(path, e, f"after line {n}") from None
    return n + (not last.endswith(b"\n"))


def one_line(text: str) -> str:
    return text.translate(_ONE_LINE)


def json_line(obj: object) -> str:
    text = json.dumps(obj, ensure_ascii=False)
    for c in "\x85\u2028\u2029":  # legal raw in JSON strings, but line breaks to splitlines()
        text = text.replace(c, f"\\u{ord(c):04x}")
    return text
