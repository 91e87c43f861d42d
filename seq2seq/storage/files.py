"""Checkpoints and model directories: safe to load, never half-written.

A model directory holds everything needed to translate, and nothing else needs to travel with it:

    model.safetensors   weights of the best model (safetensors: no pickle)
    config.yaml         the full experiment config (model, tokenizer, data, training, decoding)
    spm.model           the SentencePiece model (or spm.src.model + spm.tgt.model)
    metadata.json       versions, data fingerprint, best scores, training time
    checkpoints/        the last K checkpoints, step_<N>.safetensors (for averaging)
    train_state/        what `--resume` needs: last weights, optimizer, scheduler, RNG, data position
    log.csv, curves.png the training log and its plot

Every file is written to a temporary name in the same directory and moved into place with
`os.replace`, which is atomic: a crash or kill mid-save leaves the previous file intact.
`train_state/` is a set of files, so it is written as a new directory and swapped in; a crash in
the middle of the swap leaves `train_state.old/`, which `load_train_state` falls back to.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

WEIGHTS = "model.safetensors"
CONFIG = "config.yaml"
METADATA = "metadata.json"
TRAIN_STATE = "train_state"


_UMASK = os.umask(0)
os.umask(_UMASK)


class CheckpointError(ValueError):
    """A model directory or checkpoint that cannot be used; the message names the file."""


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
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp makes 0600; a model directory is for sharing
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def save_weights(state_dict: dict[str, torch.Tensor], path: str | Path) -> None:
    """Save tensors as safetensors, atomically. Tied tensors are stored once each name (cloned)."""
    tensors = {}
    seen: dict[int, str] = {}
    for name, t in state_dict.items():
        t = t.detach()
        key = t.data_ptr()
        tensors[name] = t.clone().contiguous().cpu() if key in seen else t.contiguous().cpu()
        seen[key] = name
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp))


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"weights file not found: {path}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"cannot read weights {path}: {e}") from None


def load_into(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str | Path) -> None:
    """Load `state` into `model`, refusing missing/unexpected keys or shape mismatches by name."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise CheckpointError(
            f"{source} does not match the model config: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    for name, t in state.items():
        if own[name].shape != t.shape:
            raise CheckpointError(
                f"{source}: tensor '{name}' has shape {tuple(t.shape)}, the model config expects {tuple(own[name].shape)}"
            )
    model.load_state_dict(state)


def save_train_state(directory: str | Path, files: dict[str, Any]) -> None:
    """Write the resume state as a directory swapped in atomically.

    `files` maps file names to content: `.safetensors` -> dict of tensors, `.pt` -> an object of
    tensors/containers saved with torch.save (loaded back with weights_only=True), `.json` -> data.
    """
    directory = Path(directory)
    final = directory / TRAIN_STATE
    new = directory / f"{TRAIN_STATE}.new"
    old = directory / f"{TRAIN_STATE}.old"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    for name, content in files.items():
        target = new / name
        if name.endswith(".safetensors"):
            save_weights(content, target)
        elif name.endswith(".pt"):
            torch.save(content, target)
        elif name.endswith(".json"):
            write_json_atomic(target, content)
        else:
            raise ValueError(f"unknown train-state file type: {name}")
    (new / "COMPLETE").write_text("ok\n")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(new, final)
    shutil.rmtree(old, ignore_errors=True)


def train_state_dir(directory: str | Path) -> Path | None:
    """The newest complete train-state directory, or None."""
    directory = Path(directory)
    for candidate in (directory / TRAIN_STATE, directory / f"{TRAIN_STATE}.old"):
        if (candidate / "COMPLETE").is_file():
            return candidate
    return None


def load_torch(path: str | Path) -> Any:
    """torch.load restricted to tensors and plain containers (no arbitrary pickle)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a bad file for the user
        raise CheckpointError(f"cannot read {path}: {e}") from None


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing file: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"cannot parse {path}: {e}") from None


def average_checkpoints(paths: list[str | Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of several safetensors checkpoints of one model (fp32 accumulation)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        state = load_weights(p)
        if total and set(state) != set(total):
            raise CheckpointError(f"{p} has different tensors from {paths[0]}")
        for name, t in state.items():
            total[name] = total[name] + t.float() if name in total else t.float().clone()
    return {name: (t / len(paths)) for name, t in total.items()}
