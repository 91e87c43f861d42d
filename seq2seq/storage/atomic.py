"""Files written atomically, never half-written: a crash or kill mid-save leaves the previous file.

Every file is written to a temporary name in the same directory and moved into place with
`os.replace`, which is atomic. No torch here.
"""

from __future__ import annotations

import json
import os
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


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success move it onto `path` atomically."""
    path = Path(path)
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


def write_json_atomic(path: str | Path, data: Any) -> None:
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
