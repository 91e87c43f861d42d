"""Files written atomically, never half-written: a crash or kill mid-save leaves the previous file.

Every regular file is written to a temporary name in the same directory and moved into place with
`os.replace`, which is atomic. A symlink is written through: the temporary file goes beside its
target, which it replaces, and the link stays a link. A path that is not a regular file (a FIFO, a
character device such as /dev/null) or that names an open descriptor (/dev/stdout, /dev/fd/N,
/proc/self/fd/N) is written directly: renaming onto it would replace the device node or the pipe,
or leave the file a shell opened for it empty (`writes_directly`). No torch here.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from seq2seq.storage import CheckpointError

_UMASK = os.umask(0)
os.umask(_UMASK)


def shared_mode(directory: bool = False) -> int:
    """The mode a new file (or directory) gets under the process umask: temporary files are made
    0600 (0700), but a model directory is for sharing."""
    return (0o777 if directory else 0o666) & ~_UMASK


STD_STREAMS = ("/dev/stdin", "/dev/stdout", "/dev/stderr")
DESCRIPTOR_DIRS = ("/dev/fd/", "/proc/")  # /dev/fd/N, /proc/self/fd/N: an open descriptor's file


def names_a_descriptor(path: str | Path) -> bool:
    """Whether `path`, or a symlink on the way from it to its file, is /dev/stdout (stdin, stderr),
    /dev/fd/N or under /proc/: the file of an open descriptor, whatever kind of file that is."""
    name = os.path.abspath(path)
    for _ in range(40):  # (the kernel's limit on a chain of symlinks)
        if name in STD_STREAMS or name.startswith(DESCRIPTOR_DIRS):
            return True
        if not os.path.islink(name):
            return False
        name = os.path.abspath(os.path.join(os.path.dirname(name), os.readlink(name)))
    return False


def writes_directly(path: str | Path) -> bool:
    """Whether `path` is written in place rather than by rename: it names an open descriptor
    (`names_a_descriptor`), or it exists and is not a regular file (a FIFO, a socket, a character or
    block device such as /dev/null), following symlinks."""
    if names_a_descriptor(path):
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # none there (a dangling symlink too: its target is created)
        return False


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path` (next to its target, for a symlink); on success move it
    onto that target atomically. A path `writes_directly` is yielded itself, to be written in place."""
    if writes_directly(path):
        yield Path(path)
        return
    path = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp_path, shared_mode())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | Path, data: object) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def read_json(path: str | Path) -> Any:
    """A JSON file's data; CheckpointError naming the file when it is missing or cannot be parsed."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing file: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"cannot parse {path}: {e}") from None
