"""What every export and import shares: the error, the optional engines, and writing an output
directory safely.

    ExportError            a user-fixable problem (an architecture the target cannot express, an output
                           directory that holds something else), with a one-line message
    require(package)       an optional engine (`pip install "seq2seq[export]"`), or an ExportError naming
                           the extra
    prepare_output(...)    may this directory be written? (new, empty, or with force an earlier export;
                           never a model directory)
    Staging(out)           a temporary directory beside `out` that replaces it on success
    write_export_info / read_export_info / weights_digest
                           `seq2seq.json` of a CTranslate2 export: what it was made from (to tell a
                           stale export) and the model's config (for the decoding defaults)
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import tempfile
from pathlib import Path
from types import ModuleType
from typing import TypedDict

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.config.root import Config
from seq2seq.config import from_dict
from seq2seq.storage.atomic import read_json, shared_mode, write_json_atomic
from seq2seq.storage.model_dir import ModelDir

EXTRA = "export"
EXPORT_INFO = "seq2seq.json"  # written into a CTranslate2 export directory
CT2_FORMAT = "seq2seq-ctranslate2"


class ExportInfo(TypedDict, total=False):
    """`seq2seq.json` of a CTranslate2 export: its format and version, the ctranslate2 version and the
    quantization it was written with (weight_bits: an int8 export's, `INT8_WEIGHT_BITS`), the model
    directory and weights it was made from (their path and digest: `stale_export_warning`), the
    tokenizer files, the number of parameters and the model's config (as `to_dict` writes it)."""

    format: str
    version: int
    ctranslate2: str
    quantization: str
    weight_bits: int
    model_dir: str
    weights: str
    weights_sha256: str
    tokenizer: list[str]
    parameters: int
    config: dict[str, object]


class ExportError(Seq2SeqError, ValueError):
    """An export or import that cannot be done; the message says why and what to do."""


def require(package: str) -> ModuleType:
    """Import an optional dependency, or fail with one line naming the extra that installs it."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise ExportError(
            f"this needs the optional package '{package}': pip install \"seq2seq[{EXTRA}]\" "
            f"(or pip install {package})"
        ) from None


def weights_digest(path: str | Path) -> str:
    """sha256 of a weights file (to tell whether an export is stale)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _looks_like_export(path: Path) -> bool:
    return (path / "model.bin").is_file() or (path / "config.json").is_file()


def prepare_output(out_dir: str | Path, force: bool, protect: list[Path]) -> Path:
    """Check that `out_dir` may be written: new, empty, or (with force) an earlier export - never a
    model directory or a directory that contains one of `protect`."""
    out = Path(out_dir)
    resolved = out.resolve()
    for p in protect:
        p = p.resolve()
        if resolved == p or resolved in p.parents:
            raise ExportError(f"{out} holds the model being converted ({p}); choose another output directory")
    if out.exists():
        if not out.is_dir():
            raise ExportError(f"{out} exists and is not a directory")
        if any(out.iterdir()):
            if ModelDir(out).is_complete():
                raise ExportError(f"{out} is a seq2seq model directory; choose another output directory")
            if not force:
                raise ExportError(f"{out} exists and is not empty; pass --force to replace it")
            if not _looks_like_export(out):
                raise ExportError(f"{out} exists and does not look like an earlier export; refusing to replace it")
    return out


class Staging:
    """A temporary directory beside `out` that replaces it on success (the old one is removed only then)."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def __enter__(self) -> Path:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", suffix=".tmp", dir=self.out.parent))
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        old = None
        if self.out.exists():
            old = self.out.parent / f".{self.out.name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(self.out, old)
        os.replace(self.tmp, self.out)
        os.chmod(self.out, shared_mode(directory=True))
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def write_export_info(directory: str | Path, info: ExportInfo) -> None:
    """`seq2seq.json` of a CTranslate2 export directory (format and version are added here)."""
    write_json_atomic(Path(directory) / EXPORT_INFO, {"format": CT2_FORMAT, "version": 1, **info})


def read_export_info(path: str | Path) -> tuple[ExportInfo, Config]:
    """`seq2seq.json` of a CTranslate2 export directory, and its config parsed."""
    path = Path(path)
    info: ExportInfo = read_json(path / EXPORT_INFO)
    if info.get("format") != CT2_FORMAT:
        raise ExportError(f"{path / EXPORT_INFO} is not a seq2seq CTranslate2 export")
    return info, from_dict(Config, info["config"])


__all__ = [
    "CT2_FORMAT", "EXPORT_INFO", "EXTRA", "ExportError", "ExportInfo", "Staging", "prepare_output", "read_export_info", "require",
    "weights_digest", "write_export_info",
]
