"""Weights on disk: safetensors (no pickle) written atomically, and loaded into a model by name.

    save_weights(state, path)       load_weights(path) -> state
    load_into(model, state, source) refuses missing / unexpected tensors, shape mismatches, the wrong
                                    kind of dtype and non-finite values, by name (`check_tensor`)
    load_torch(path)                torch.load of tensors and plain containers only (older resume states)
    split_tensors(obj) / join_tensors(tensors, skeleton)   nested state (optimizer, RNG) as safetensors + JSON
    average_checkpoints(paths)      the element-wise mean of several checkpoints of one model
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from seq2seq.config.json_reader import JSONObject, JSONValue
from seq2seq.storage import CheckpointError
from seq2seq.storage.atomic import atomic_path


ALIASES = "seq2seq.aliases"  # the file's metadata: {name: the name its tensor is stored under} of tied tensors


def save_weights(state_dict: dict[str, torch.Tensor], path: str | Path) -> None:
    """Save tensors as safetensors, atomically. A tensor held under several names (tied embeddings) is
    stored once, under its first name; the file's metadata maps the other names to it, and
    `load_weights` gives every name back."""
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    stored: dict[tuple[int, tuple[int, ...], tuple[int, ...]], str] = {}
    for name, t in state_dict.items():
        t = t.detach()
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()))
        if key in stored and t.numel():
            aliases[name] = stored[key]
            continue
        stored[key] = name
        tensors[name] = t.contiguous().cpu()
    metadata = {ALIASES: json.dumps(aliases)} if aliases else None
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file by name, tied names (`save_weights`) included."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"weights file not found: {path}")
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), framework="pt") as f:
            aliases = json.loads((f.metadata() or {}).get(ALIASES, "{}"))
        for name, stored_as in aliases.items():
            tensors[name] = tensors[stored_as]
    except (SafetensorError, OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"cannot read weights {path}: {e}") from None
    return tensors


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
        check_tensor(name, t, own[name].dtype, source)
    model.load_state_dict(state)


def check_tensor(name: str, t: torch.Tensor, expected: torch.dtype, source: str | Path) -> None:
    """CheckpointError naming the tensor and the file for a tensor the model cannot use: an integer
    or bool tensor where the model holds floats (or a float where it holds integers), or a float
    tensor with a NaN or an infinity (a diverged run, a damaged file: it would decode as empty or
    garbage output). One pass over the tensor; any float width (fp16, bf16, fp32) is cast on load."""
    if t.is_floating_point() != expected.is_floating_point or t.is_complex() != expected.is_complex:
        raise CheckpointError(f"{source}: tensor '{name}' holds {str(t.dtype).removeprefix('torch.')} values, the "
                              f"model expects {str(expected).removeprefix('torch.')}; the weights do not belong "
                              "to this model (or were converted wrongly)")
    # a sum is finite only when every value is (a NaN or inf propagates): one cheap pass, and the exact
    # check only where it is not (finite values whose sum overflows are not refused)
    if t.is_floating_point() and not math.isfinite(t.sum().item()) and not bool(torch.isfinite(t).all()):
        raise CheckpointError(f"{source}: tensor '{name}' holds non-finite values (NaN or inf); the weights "
                              "are damaged (a training run that diverged?) and would translate into empty "
                              "or garbage output")


def load_torch(path: str | Path) -> Any:
    """torch.load restricted to tensors and plain containers (no arbitrary pickle)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a bad file for the user
        raise CheckpointError(f"cannot read {path}: {e}") from None


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, torch.Tensor]:
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


def split_tensors(obj: object, prefix: str = "") -> tuple[dict[str, torch.Tensor], JSONObject]:
    """A nested structure of dicts, lists, tuples, tensors and JSON values (an optimizer's or
    scheduler's state_dict, random generator states) -> (its tensors by path, a JSON-able skeleton with
    {"tensor": path} where they were), to be saved as safetensors + JSON: no pickle. `join_tensors`
    undoes it, tuples and non-string dict keys (int, float, bool, None) included."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(x: object, path: str) -> JSONObject:
        if isinstance(x, torch.Tensor):
            tensors[path] = x
            return {"tensor": path}
        if isinstance(x, dict):
            pairs: list[tuple[Any, JSONValue]] = [(key, walk(v, f"{path}.{key}" if path else str(key)))
                                                  for key, v in x.items()]
            if all(isinstance(key, str) for key, _ in pairs):
                return {"dict": dict(pairs)}
            return {"items": [[key, value] for key, value in pairs]}
        if isinstance(x, (list, tuple)):
            values: list[JSONValue] = [walk(v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(x)]
            return {"tuple" if isinstance(x, tuple) else "list": values}
        if x is None or isinstance(x, (bool, int, float, str)):
            return {"value": x}
        raise TypeError(f"{path or 'object'}: a {type(x).__name__} cannot be saved without pickle")

    return tensors, walk(obj, prefix)


def join_tensors(tensors: dict[str, torch.Tensor], skeleton: Any) -> Any:
    """The structure `split_tensors` took apart; CheckpointError for a skeleton it did not write."""
    def build(node: Any) -> Any:
        if not isinstance(node, dict) or len(node) != 1:
            raise CheckpointError(f"not a saved object: {str(node)[:80]}")
        (kind, value), = node.items()
        if kind == "tensor":
            return tensors[value]
        if kind == "dict":
            return {key: build(v) for key, v in value.items()}
        if kind == "items":
            return {key: build(v) for key, v in value}
        if kind in ("list", "tuple"):
            values = [build(v) for v in value]
            return tuple(values) if kind == "tuple" else values
        if kind == "value":
            return value
        raise CheckpointError(f"not a saved object: {kind!r}")

    try:
        return build(skeleton)
    except KeyError as e:
        raise CheckpointError(f"saved object refers to a missing tensor {e}") from None
