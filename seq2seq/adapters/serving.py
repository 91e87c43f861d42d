"""Several adapters served over one copy of the base weights: `seq2seq serve BASE --adapter NAME=DIR ...`.

`attach_adapters(engine, {name: dir})` checks each adapter against the served base (its fingerprint)
and wraps the layers any of them adapts in `SharedLoRA` (`seq2seq.adapters.lora`), in the engine's
model as it decodes (packed, bf16 or int8): each holds its base layer once and every adapter's A and B,
so the memory is the base's plus the adapters' tensors. The engine's `adapters` then names them.

An adapter trained with `training.adapter.train_embeddings` also holds its own embedding tables
(`embedding_keys`: the token tables, a shared source/target table once, learned position tables). Each
becomes a `TableSwap`: the served model's nn.Embedding reads the active adapter's table (its weight
Parameter set to it, in the model's dtype and device) and the base's again after. A tied output
projection that the engine's precision made a copy of (`decoder.output`: packed at fp32 on CPU, bf16
or int8 at int8) is swapped with it, for what the engine's `tied_output` makes of the adapter's table:
at int8 the same kind of copy (the merged model's logits exactly), else none, the decoder reading the
adapter's table itself. The memory is the base's plus the adapters' tensors (plus, at int8 only, that
copy of each adapter's target table, as the base has one).

A model call runs with one adapter (`using(engine, name)`, None: the base alone): the server's batching
worker, the only thread that touches the model, groups requests by their options, the `adapter`
field among them, so a batch never mixes adapters. Each output is the merged model's
(`merge-adapter`), to float rounding: the update is added unmerged, x W^T + s (x A^T) B^T, and the
adapter's tables are read as the merged model's.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from torch import Tensor, nn

from seq2seq.adapters.files import Adapter, AdapterError, read_adapter
from seq2seq.adapters.lora import LORA_A, LORA_B, SharedLoRA, add_shared, is_lora_key

log = logging.getLogger(__name__)

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass
class TableSwap:
    """One attribute of the served model that adapters replace while active: an embedding table's
    `weight`, or a tied output projection's own copy (`decoder.output`); `base` is the served base's."""

    owner: nn.Module
    attr: str
    base: nn.Module | nn.Parameter | None
    adapters: dict[str, nn.Module | nn.Parameter | None] = field(default_factory=dict)

    def activate(self, name: str | None) -> None:
        value = self.adapters.get(name, self.base) if name is not None else self.base
        setattr(self.owner, self.attr, value)


@dataclass
class AdapterSet:
    """The adapters an engine serves: their directories by name, the shared layers they update and the
    tables they replace (train_embeddings)."""

    paths: dict[str, Path] = field(default_factory=dict)
    layers: dict[str, SharedLoRA] = field(default_factory=dict)
    tables: dict[tuple[int, str], TableSwap] = field(default_factory=dict)

    def names(self) -> list[str]:
        return list(self.paths)

    def activate(self, name: str | None) -> None:
        for layer in self.layers.values():
            layer.active = name if name in layer.adapters else None
        for swap in self.tables.values():
            swap.activate(name)

    def swap(self, owner: nn.Module, attr: str, name: str, value: nn.Module | nn.Parameter | None) -> None:
        """Make `value` what `owner.attr` is while adapter `name` is active."""
        key = (id(owner), attr)
        if key not in self.tables:
            self.tables[key] = TableSwap(owner, attr, getattr(owner, attr))
        self.tables[key].adapters[name] = value


def add_tables(served: AdapterSet, engine: Any, name: str, adapter: Adapter) -> None:
    """Adapter `name`'s embedding tables (train_embeddings) as `TableSwap`s of the engine's model (see the
    module docstring); a tied output projection's copy is made by the engine (`tied_output`), which
    knows how its precision made the base's."""
    model = engine.model
    decoder = getattr(model, "decoder", None)
    tied = decoder is not None and decoder.output is not None and bool(getattr(model.cfg, "tie_output", False))
    for key in sorted(k for k in adapter.tensors if not is_lora_key(k)):
        path, _, leaf = key.rpartition(".")
        try:
            owner = model.get_submodule(path)
        except AttributeError:
            owner = None
        if not isinstance(owner, nn.Embedding) or leaf != "weight":
            raise AdapterError(f"{adapter.path}: the base model has no embedding table {key}")
        base, table = owner.weight, adapter.tensors[key]
        if base.shape != table.shape:
            raise AdapterError(f"{adapter.path}: embedding table {key} has shape {tuple(base.shape)} in the base, "
                               f"{tuple(table.shape)} in the adapter")
        value = nn.Parameter(table.to(device=base.device, dtype=base.dtype), requires_grad=False)
        served.swap(owner, leaf, name, value)
        if tied and decoder is not None and owner is decoder.embed.tokens:
            if not hasattr(engine, "tied_output"):
                raise AdapterError(f"{adapter.path}: the served model projects to the vocabulary through its own "
                                   f"{type(decoder.output).__name__}, which cannot read the adapter's embedding "
                                   f"table; serve its merged model (seq2seq merge-adapter) instead")
            served.swap(decoder, "output", name, engine.tied_output(value))


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
        adapter.check_base(engine.path, weights)
        if adapter.config.train_embeddings:
            add_tables(served, engine, name, adapter)
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


__all__ = ["AdapterSet", "TableSwap", "add_tables", "attach_adapters", "check_adapter", "parse_adapter_option",
           "using"]
