"""A fingerprint of a model: sha256 over the files that decide its translations (weights, config.yaml,
tokenizers), so that a resumed `seq2seq back-translate` or `distill` run can tell it is given the
model it started with (`seq2seq.corpora.translation`)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from hashlib import _Hash


def _file_digest(path: Path, h: _Hash) -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


def model_fingerprint(model_dirs: Sequence[str | Path], weights: str | Path | None = None,
                      last_checkpoints: int | None = None) -> str:
    """sha256 over what decides a model directory's translations: each member's weights (`weights`,
    the last N checkpoints, or model.safetensors), config.yaml and tokenizer files."""
    from seq2seq.inference.translator import checkpoint_members
    from seq2seq.storage.model_dir import ModelDir
    from seq2seq.text.tokenizer import JOINT_MODEL, SRC_MODEL, TGT_MODEL

    h = hashlib.sha256()
    for directory in model_dirs:
        model_dir = ModelDir(directory)
        if last_checkpoints:
            members = checkpoint_members(directory, last_checkpoints)
        else:
            members = [Path(weights) if weights else model_dir.weights_path]
        for path in [*members, model_dir.config_path,
                     *(model_dir.path / n for n in (JOINT_MODEL, SRC_MODEL, TGT_MODEL))]:
            if path.is_file():
                h.update(path.name.encode() + b"\0")
                _file_digest(path, h)
    return h.hexdigest()
