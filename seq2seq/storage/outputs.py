"""A command's output file: checked against the command's inputs before anything runs, then written
atomically or in place. No torch here.

    check_output_path(output, inputs, flag)   refuse a directory, a missing parent directory, or a file
                                              that is one of `inputs` (by device and inode: through
                                              symlinks and hard links), in one line naming both
    open_output(output)                       the byte stream to write: '-' is stdout; a regular file
                                              (or a symlink's target) is written under a temporary name
                                              and renamed into place on success; a FIFO, a device or
                                              /dev/stdout is written in place (`atomic.writes_directly`);
                                              a name ending in .gz is written through gzip

Inputs that are not regular files (stdin, /dev/null, a pipe) are never the output's file: writing a
FIFO or a terminal that is also read destroys nothing on disk.
"""

from __future__ import annotations

import gzip
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Literal

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.storage.atomic import atomic_path, writes_directly
from seq2seq.text.lines import std_binary


class OutputPathError(Seq2SeqError, ValueError):
    """An output path that cannot be written, or would destroy an input; the message names both."""


def _file_id(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of the regular file `path` leads to, following symlinks; None for anything else."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def check_output_path(output: str | Path, inputs: Iterable[str | Path] = (), flag: str = "-o") -> None:
    """Refuse, with one line, an output path that cannot be written or would destroy an input: a
    directory, a file in a directory that does not exist, or the file of one of `inputs` (by device and
    inode, so a symlink or hard link to an input is the input). '-' is stdout; an input '-' is stdin."""
    output = str(output)
    if output == "-":
        return
    target = Path(os.path.realpath(output)) if os.path.islink(output) else Path(output)
    if target.is_dir():
        raise OutputPathError(f"{flag} {output} is a directory; give a file name")
    if not writes_directly(output) and not target.parent.is_dir():
        raise OutputPathError(f"{flag} {output}: the directory {target.parent} does not exist")
    written = _file_id(output)
    if written is None:  # a new file, or one written in place (a FIFO, a device): no input lost
        return
    for source in inputs:
        if str(source) != "-" and _file_id(source) == written:
            raise OutputPathError(f"{flag} {output} is the input file {source}; writing it would destroy the input")


def check_output_paths(outputs: dict[str, str | Path | None], inputs: Iterable[str | Path]) -> None:
    """`check_output_path` for each of a command's outputs ({flag: path}, None: not asked for), each
    also against the outputs before it (two outputs onto one file would leave only the last)."""
    inputs = list(inputs)
    given: dict[str, str] = {}  # the real path of each output checked: flag
    for flag, output in outputs.items():
        if output is None or str(output) == "-":
            continue
        check_output_path(output, inputs, flag)
        real = os.path.realpath(output)
        if real in given and not writes_directly(output):
            raise OutputPathError(f"{flag} {output} is the file {given[real]} writes too; give each output its own file")
        given[real] = flag


@contextmanager
def open_output(output: str | Path) -> Iterator[BinaryIO]:
    """The byte stream a command writes its output to. '-': stdout. A regular file is written under a
    temporary name beside it (beside its target, for a symlink) and moved into place only when the
    command succeeds: a failure leaves no partial output, and a file that was there stays as it was.
    A FIFO, a character device or /dev/stdout is written in place (appended to). A name ending in .gz
    is written through gzip."""
    output = str(output)
    if output == "-":
        yield std_binary("stdout")
        return
    # in place: appended to, so that a file a shell opened for it (`>>`, /dev/stdout) keeps what it held
    mode: Literal["ab", "wb"] = "ab" if writes_directly(output) else "wb"
    with atomic_path(output) as path, open(path, mode) as raw:
        if output.endswith(".gz"):
            with gzip.GzipFile(filename=Path(output).name.removesuffix(".gz"), mode="wb", fileobj=raw) as zipped:
                yield zipped  # type: ignore[misc]
        else:
            yield raw
