"""Finding a model directory's CTranslate2 export (`find_export`), and telling when it is stale: made
from earlier weights than the model directory now holds (`stale_export_warning`). What an export was
made from is its `seq2seq.json` (`seq2seq.deploy.staging.read_export_info`)."""

from __future__ import annotations

from pathlib import Path

from seq2seq.deploy.staging import EXPORT_INFO, ExportError, read_export_info, weights_digest
from seq2seq.storage.model_dir import ModelDir


def find_export(model_dir: str | Path, engine_dir: str | Path | None = None) -> Path:
    """Where a model directory's CTranslate2 export is: `engine_dir`, else MODEL_DIR itself when it is
    one, else MODEL_DIR/ctranslate2. ExportError saying how to make one when there is none."""
    model_dir = Path(model_dir)
    candidates = [Path(engine_dir)] if engine_dir else [model_dir, model_dir / "ctranslate2"]
    for c in candidates:
        if (c / EXPORT_INFO).is_file():
            return c
    if engine_dir:
        raise ExportError(f"no CTranslate2 export in {engine_dir} (no {EXPORT_INFO}): make one with "
                          f"`seq2seq export MODEL_DIR --to ctranslate2 {engine_dir}`")
    raise ExportError(f"no CTranslate2 export in {model_dir / 'ctranslate2'}: make one with "
                      f"`seq2seq export {model_dir} --to ctranslate2`, or pass --engine-dir")


def stale_export_warning(model_dir: str | Path, export_dir: Path) -> str | None:
    """A warning when MODEL_DIR's weights are not the ones the export was made from (None if they are)."""
    weights = ModelDir(model_dir).weights_path
    if not weights.is_file() or Path(model_dir).resolve() == export_dir.resolve():
        return None
    info = read_export_info(export_dir)[0]
    if info.get("weights") != str(weights.resolve()):
        return None  # exported from other weights on purpose (e.g. averaged checkpoints)
    if info.get("weights_sha256") != weights_digest(weights):
        return (f"{export_dir} was exported from an earlier {weights}; re-export it with "
                f"`seq2seq export {model_dir} --to ctranslate2 {export_dir} --force`")
    return None


__all__ = ["find_export", "stale_export_warning"]
