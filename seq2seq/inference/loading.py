"""One loader for every torch engine: which class decodes a model directory, chosen from what it reads.

    engine = load_engine("runs/m30k")          # a Translator (sentences)
    engine = load_engine("runs/speech")        # a Transcriber (recordings of any length, in windows)
    engine = load_engine("runs/captions")      # a Generator (other files: images)

`engine_class(kind)` is the choice itself; the server (and `seq2seq serve`) loads its model with `load_engine`, and the
commands that decode one kind of source (`translate`, `caption`, `transcribe`) load their own class,
which refuses a model of another kind naming the command that decodes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from typing_extensions import Unpack

from seq2seq.inference.generator import Generator, Transcriber
from seq2seq.inference.translator import EnsembleKeywords, Translator
from seq2seq.model.encoders.base import source_kind
from seq2seq.model.encoders.sources import SourceKind
from seq2seq.storage import CheckpointError
from seq2seq.storage.model_dir import ModelDir


def engine_class(kind: SourceKind) -> type[Translator]:
    """The class that decodes a model reading `kind` sources: `Translator` (sentences), `Transcriber`
    (recordings, long ones in windows) or `Generator` (other files)."""
    if not kind.reads_files:
        return Translator
    return Transcriber if Transcriber.decodes(kind) else Generator


def load_engine(model_dir: str | Path | Sequence[str | Path], device: str = "auto", precision: str = "fp32",
                weights: str | Path | None = None, **ensemble: Unpack[EnsembleKeywords]) -> Translator:
    """The engine of `model_dir` (`engine_class` of what it reads); several directories (or
    ensemble["last_checkpoints"]) are one ensemble (`Translator.load`'s keywords). CheckpointError for
    a path that is not a model directory."""
    path = Path(model_dir if isinstance(model_dir, (str, Path)) else model_dir[0])
    directory = ModelDir(path)
    if not directory.config_path.is_file():
        raise CheckpointError(f"{path} is not a model directory ({ModelDir.CONFIG} is missing)")
    cls = engine_class(source_kind(directory.config().model.encoder))
    return cls.load(model_dir, device=device, precision=precision, weights=weights, **ensemble)
