"""Weights on disk: safetensors (no pickle) written atomically, and loaded into a model by name.

    save_weights(state, path)       load_weights(path) -> state
    load_into(model, state, source) refuses missing / unexpected tensors and shape mismatches by name
    load_torch(path)                torch.load of tensors and plain containers only
    average_checkpoints(paths)      the element-wise mean of several checkpoints of one model
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from seq2seq.storage import CheckpointError
from seq2seq.storage.atomic import atomic_path


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
            raise CheckpointError(f"{source}: tensor '{name}' has shape {tuple(t.shape)}, "
                                  f"the model config expects {tuple(own[name].shape)}")
    model.load_state_dict(state)


def load_torch(path: str | Path) -> Any:
    """torch.load restricted to tensors and plain containers (no arbitrary pickle)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a bad file for the user
        raise CheckpointError(f"cannot read {path}: {e}") from None


def average_checkpoints(paths: list[str | Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of several safetensors checkpoints of one model (fp64 accumulation), each
    tensor in its dtype in the checkpoints: integer tensors (BatchNorm's num_batches_tracked) are
    rounded to the nearest integer."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for p in paths:
        state = load_weights(p)
        if total and set(state) != set(total):
            raise CheckpointError(f"{p} has different tensors from {paths[0]}")
        for name, t in state.items():
            total[name] = total[name] + t.double() if name in total else t.double()
            dtypes.setdefault(name, t.dtype)
    mean = {name: t / len(paths) for name, t in total.items()}
    return {name: (t if dtypes[name].is_floating_point else t.round()).to(dtypes[name]) for name, t in mean.items()}
