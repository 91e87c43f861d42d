"""An adapter directory: the adapter's weights and what it adapts, beside (not inside) its base model.

    adapter.safetensors   only the updates: NAME.lora_A [r, in] and NAME.lora_B [out, r] of each adapted layer
    adapter.json          {"format": "seq2seq-adapter", "version": 1, "adapter": the training.adapter section,
                           "modules": [NAME, ...], "base": {"path": the base model directory,
                           "weights": its weights file's name, "fingerprint": base_fingerprint of that file}}

A LoRA training run writes both into its output directory (beside its config.yaml, tokenizer, log and
checkpoints, which hold adapter tensors only). `read_adapter(dir)` reads one, and `Adapter.check_base`
refuses it, in one line, for a base whose weights are not those it was trained on.

The fingerprint is sha256 over the base's weights file's size, its safetensors header (every tensor's
name, dtype, shape and offset) and 64 KiB at each of 32 evenly spaced offsets of its data: a few
milliseconds for a 2 GB file, and two trainings of one architecture (the same header) differ in
every sampled block.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from seq2seq.config.adapter_section import AdapterConfig
from seq2seq.config.schema import ConfigError, from_dict, to_dict
from seq2seq.storage import CheckpointError
from seq2seq.storage.atomic import read_json, write_json_atomic
from seq2seq.storage.model_dir import ModelDir
from seq2seq.storage.weights import load_weights, save_weights
from seq2seq.adapters.lora import LORA_A, LORA_B, is_lora_key

ADAPTER_JSON = "adapter.json"
ADAPTER_WEIGHTS = "adapter.safetensors"
FORMAT, VERSION = "seq2seq-adapter", 1
SAMPLES, SAMPLE_BYTES = 32, 1 << 16


class AdapterError(CheckpointError):
    """An adapter directory that cannot be used (missing, damaged, or for another base); names the directory."""


def base_fingerprint(weights: str | Path) -> str:
    """sha256 of a safetensors file's size, header and 32 sampled blocks of its data (see the module docstring)."""
    path = Path(weights)
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode() + b"\0")
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"cannot read weights {path}: not a safetensors file")
        (n,) = struct.unpack("<Q", head)
        h.update(f.read(min(n, size)))
        start, data = 8 + n, max(0, size - 8 - n)
        for i in range(SAMPLES):
            f.seek(start + (data - SAMPLE_BYTES) * i // (SAMPLES - 1) if data > SAMPLE_BYTES else start)
            h.update(f.read(SAMPLE_BYTES))
    return "sha256:" + h.hexdigest()


@dataclass(frozen=True)
class Adapter:
    """An adapter read from its directory: its config, layers, tensors and the base it was trained on."""

    path: Path
    config: AdapterConfig
    modules: list[str]
    tensors: dict[str, torch.Tensor]
    base_path: Path
    base_weights: str  # the base's weights file, by name (model.safetensors)
    fingerprint: str

    def check_base(self, base_dir: str | Path, weights: str | Path | None = None) -> None:
        """AdapterError (one line) unless the weights of `base_dir` (or `weights`) are those this adapter
        was trained on."""
        weights_path = Path(weights) if weights else ModelDir(base_dir).weights_path
        if not weights_path.is_file():
            raise AdapterError(f"{self.path}: its base {base_dir} has no weights file {weights_path.name}")
        found = base_fingerprint(weights_path)
        if found != self.fingerprint:
            raise AdapterError(
                f"{self.path} is an adapter for another base: it was trained on {self.base_path} "
                f"(weights {self.fingerprint[:19]}), not on {weights_path} ({found[:19]}); load it with its own base")

    def check_layers(self, model: torch.nn.Module) -> None:
        """AdapterError naming the layer when `model` lacks one of the adapter's layers or its shape differs."""
        for name in self.modules:
            try:
                layer = model.get_submodule(name)
            except AttributeError:
                raise AdapterError(f"{self.path}: the base model has no layer {name}") from None
            w = getattr(layer, "weight", None)
            w = w() if callable(w) else w  # (an int8 layer's weight is a method)
            a, b = self.tensors[f"{name}.{LORA_A}"], self.tensors[f"{name}.{LORA_B}"]
            if w is None or a.size(0) != b.size(1) or (b.size(0), a.size(1)) != tuple(w.shape):
                raise AdapterError(f"{self.path}: layer {name} has shape {None if w is None else tuple(w.shape)}, "
                                   f"the adapter's update {tuple(b.shape)} x {tuple(a.shape)}")


def write_adapter_json(out_dir: str | Path, cfg: AdapterConfig, modules: list[str], base_dir: str | Path,
                       embeddings: list[str] | None = None) -> None:
    """adapter.json for an adapter of `base_dir`'s model.safetensors (its fingerprint taken now); `embeddings`:
    the keys of the embedding tables it holds (train_embeddings)."""
    base = ModelDir(Path(base_dir).resolve())
    write_json_atomic(Path(out_dir) / ADAPTER_JSON, {
        "format": FORMAT, "version": VERSION, "adapter": to_dict(cfg), "modules": list(modules),
        "embeddings": list(embeddings or []),
        "base": {"path": str(base.path), "weights": base.WEIGHTS, "fingerprint": base_fingerprint(base.weights_path)},
    })


def write_adapter(out_dir: str | Path, cfg: AdapterConfig, tensors: dict[str, torch.Tensor],
                  base_dir: str | Path) -> None:
    """An adapter directory: adapter.safetensors (`tensors`, adapter tensors only) and adapter.json."""
    modules = sorted({k.rsplit(".", 1)[0] for k in tensors if is_lora_key(k)})
    save_weights({k: v.detach() for k, v in tensors.items()}, Path(out_dir) / ADAPTER_WEIGHTS)
    write_adapter_json(out_dir, cfg, modules, base_dir, sorted(k for k in tensors if not is_lora_key(k)))


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_JSON).is_file()


def read_adapter(path: str | Path) -> Adapter:
    """The adapter in directory `path`; AdapterError (one line, naming it) for anything missing or broken."""
    path = Path(path)
    meta_path, weights_path = path / ADAPTER_JSON, path / ADAPTER_WEIGHTS
    if not meta_path.is_file():
        raise AdapterError(f"{path} is not an adapter directory ({ADAPTER_JSON} is missing)")
    meta: object = read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("base"), dict):
        raise AdapterError(f"{meta_path}: not a seq2seq adapter description")
    if meta.get("version", 0) > VERSION:
        raise AdapterError(f"{meta_path}: adapter format version {meta['version']}; this seq2seq reads {VERSION}")
    try:
        cfg = from_dict(AdapterConfig, meta.get("adapter"), "adapter.")
    except ConfigError as e:
        raise AdapterError(f"{meta_path}: {e}") from None
    if not weights_path.is_file():
        raise AdapterError(f"{path}: {ADAPTER_WEIGHTS} is missing (a training run writes it at its first "
                           f"validation)")
    tensors = load_weights(weights_path)
    modules = list(meta.get("modules") or [])
    for name in modules:
        for part in (LORA_A, LORA_B):
            if f"{name}.{part}" not in tensors:
                raise AdapterError(f"{weights_path}: tensor {name}.{part} is missing")
    tables = set(meta.get("embeddings") or []) if cfg.train_embeddings else set()
    missing = sorted(tables - set(tensors))
    if missing:
        raise AdapterError(f"{weights_path}: embedding table {missing[0]} is missing")
    extra = sorted(k for k in tensors if k not in tables and (not is_lora_key(k) or k.rsplit(".", 1)[0] not in modules))
    if extra:
        raise AdapterError(f"{weights_path}: tensors that are not the adapter's: {extra[:5]}")
    base = meta["base"]
    return Adapter(path, cfg, modules, tensors, Path(str(base.get("path", ""))), str(base.get("weights", "")),
                   str(base.get("fingerprint", "")))


def resolve_base(model_dir: str | Path, adapter: str | Path | None) -> tuple[Path, Path | None]:
    """(base model directory, adapter directory or None) of a load: `model_dir` with `adapter`, or an
    adapter directory given alone (a LoRA training run's output: no model.safetensors of its own), whose
    adapter.json names its base."""
    model_dir = Path(model_dir)
    if adapter is not None or not is_adapter_dir(model_dir) or ModelDir(model_dir).weights_path.is_file():
        return model_dir, None if adapter is None else Path(adapter)
    base = read_json(model_dir / ADAPTER_JSON).get("base", {}).get("path")
    if not base:
        raise AdapterError(f"{model_dir / ADAPTER_JSON}: names no base model directory")
    if not os.path.isdir(base):
        raise AdapterError(f"{model_dir} is an adapter of {base}, which is not there; load it with its base: "
                           f"Translator.load(BASE, adapter={str(model_dir)!r})")
    return Path(base), model_dir


__all__ = ["ADAPTER_JSON", "ADAPTER_WEIGHTS", "Adapter", "AdapterError", "base_fingerprint", "is_adapter_dir",
           "read_adapter", "resolve_base", "write_adapter", "write_adapter_json"]
