"""Several adapters served over one copy of the base weights: `seq2seq serve BASE --adapter NAME=DIR ...`.

`attach_adapters(engine, {name: dir})` checks each adapter against the served base (its fingerprint)
and wraps the layers any of them adapts in `SharedLoRA` (`seq2seq.adapters.lora`), in the engine's
model as it decodes (packed, bf16 or int8): each holds its base layer once and every adapter's A and B,
so the memory is the base's plus the adapters' tensors. The engine's `adapters` then names them.

A model call runs with one adapter (`using(engine, name)`, None: the base alone): the server's batching
worker, the only thread that touches the model, groups requests by their options, the `adapter`
field among them, so a batch never mixes adapters. Each output is the merged model's
(`merge-adapter`), to float rounding: the update is added unmerged, x W^T + s (x A^T) B^T.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from torch import Tensor

from seq2seq.adapters.files import AdapterError, read_adapter
from seq2seq.adapters.lora import LORA_A, LORA_B, SharedLoRA, add_shared

log = logging.getLogger(__name__)

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass
class AdapterSet:
    """The adapters an engine serves: their directories by name, and the shared layers they update."""

    paths: dict[str, Path] = field(default_factory=dict)
    layers: dict[str, SharedLoRA] = field(default_factory=dict)

    def names(self) -> list[str]:
        return list(self.paths)

    def activate(self, name: str | None) -> None:
        for layer in self.layers.values():
            layer.active = name if name in layer.adapters else None


def parse_adapter_option(value: str) -> tuple[str, str]:
    """NAME=DIR of `--adapter`; ValueError saying what a name may hold."""
    name, sep, path = value.partition("=")
    if not sep or not path or not NAME.match(name):
        raise ValueError(f"--adapter {value!r}: give NAME=DIR, NAME of letters, digits, '-', '_' or '.' "
                         f"(e.g. de-med=runs/lora-med)")
    return name, path


def attach_adapters(engine: Any, adapters: Mapping[str, str | Path], weights: str | Path | None = None) -> AdapterSet:
    """Serve `adapters` ({name: directory}) on `engine` (a Translator of their base, loaded from
    `engine.path`, or `weights`): see the module docstring. AdapterError (one line) for an adapter of
    another base or a broken one; ValueError for an ensemble."""
    if getattr(engine, "members", [None])[1:]:
        raise ValueError("adapters adapt one model; not an ensemble")
    served = getattr(engine, "adapters", None) or AdapterSet()
    model = engine.model
    for name, path in adapters.items():
        if name in served.paths:
            raise AdapterError(f"--adapter {name}: given twice")
        adapter = read_adapter(path)
        if adapter.config.train_embeddings:  # (one embedding table serves every request of a batch)
            raise AdapterError(f"--adapter {name}: {adapter.path} trains its own embedding tables "
                               f"(train_embeddings), which per-request serving does not support; serve its merged "
                               f"model (seq2seq merge-adapter) instead")
        adapter.check_base(engine.path, weights)
        for layer_name in adapter.modules:
            try:
                model.get_submodule(layer_name)
            except AttributeError:
                raise AdapterError(f"{adapter.path}: the base model has no layer {layer_name}") from None
        layers = add_shared(model, adapter.modules)
        for layer_name, layer in layers.items():
            a, b = adapter.tensors[f"{layer_name}.{LORA_A}"], adapter.tensors[f"{layer_name}.{LORA_B}"]
            w: Tensor | Callable[[], Tensor] = layer.base.weight
            shape = tuple((w() if callable(w) else w).shape)  # (an int8 layer's weight is a method)
            if shape != (b.size(0), a.size(1)):
                raise AdapterError(f"{adapter.path}: layer {layer_name} has shape {shape}, "
                                   f"the adapter's update {tuple(b.shape)} x {tuple(a.shape)}")
            layer.add(name, a, b, adapter.config.scale)
        served.layers.update(layers)
        served.paths[name] = adapter.path
        log.info("adapter %s: %s (rank %d, %d layers)", name, adapter.path, adapter.config.rank, len(adapter.modules))
    served.activate(None)
    engine.adapters = served
    return served


def check_adapter(engine: object, name: str | None) -> None:
    """ValueError (the server's 422) for an adapter name the engine does not serve."""
    if name is None:
        return
    served = getattr(engine, "adapters", None)
    names = served.names() if served is not None else []
    if name not in names:
        offer = f"this server's adapters are {', '.join(names)}" if names else "this server has no adapters"
        raise ValueError(f"unknown adapter {name!r}; {offer}")


@contextlib.contextmanager
def using(engine: object, name: str | None) -> Iterator[None]:
    """Run the engine's model with adapter `name` (None: the base alone) inside the block."""
    served = getattr(engine, "adapters", None)
    if served is None:
        check_adapter(engine, name)
        yield
        return
    served.activate(name)
    try:
        yield
    finally:
        served.activate(None)


__all__ = ["AdapterSet", "attach_adapters", "check_adapter", "parse_adapter_option", "using"]
