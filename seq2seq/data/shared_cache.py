"""The on-disk cache that every run shares: where it lives, and entries that are never half there.

`default_cache_root` is where it lives unless `data.cache_dir` says otherwise. An entry is built in a
temporary directory beside it (`temporary_dir`) and renamed into place when complete (`publish`), so two
runs building the same entry at once both succeed (the first rename wins) and a killed run leaves no
half entry (its temporary directory is removed by the next run that builds there).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CACHE_VERSION = 2  # bump when tokenization or cleaning logic changes, to invalidate caches


def default_cache_root() -> Path:
    """Where prepared data and trained tokenizers are cached unless data.cache_dir says otherwise:
    $SEQ2SEQ_CACHE/data, else $XDG_CACHE_HOME/seq2seq/data, else ~/.cache/seq2seq/data."""
    root = os.environ.get("SEQ2SEQ_CACHE")
    if root:
        return Path(root) / "data"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "seq2seq" / "data"


def temporary_dir(entry: Path) -> Path:
    """A fresh temporary directory beside `entry` for building it (stale ones of dead processes removed)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    for stale in entry.parent.glob(f".tmp-{entry.name}-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = entry.with_name(f".tmp-{entry.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def publish(tmp: Path, entry: Path, complete: str) -> None:
    """Rename the finished `tmp` to `entry` (whose file `complete` marks it whole). Another process
    that finished the same entry first wins; an incomplete entry (of an older version) is replaced."""
    if entry.exists() and not (entry / complete).is_file():
        shutil.rmtree(entry, ignore_errors=True)
    try:
        os.replace(tmp, entry)
    except OSError:  # another process finished the same entry first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not (entry / complete).is_file():
            raise
