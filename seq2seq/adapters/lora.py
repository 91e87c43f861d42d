"""LoRA (Hu et al. 2021) on our linear layers: a trainable low-rank update, merged, or served unmerged.

A targeted layer y = x W^T + b becomes y = x W^T + b + s * drop(x) A^T B^T, A [r, in] (random), B
[out, r] (zeros: training starts from the base model exactly), s = alpha / r.

    add_lora(model, cfg) -> names     training: the targeted nn.Linear become `LoRALinear` in place (same
                                      weight and bias, state_dict keys kept, plus NAME.lora_A / NAME.lora_B),
                                      everything else frozen
    lora_tensors(model)               {NAME.lora_A, NAME.lora_B: tensor} of a model `add_lora` changed
    embedding_keys(model)             the state_dict keys of the embedding tables that train_embeddings trains
    merge_lora(model, tensors, scale) W += s * B A for every adapted layer, and an embedding table the
                                      tensors hold copied in: the plain model it computes
    add_shared(model, names)          serving: the targeted layers wrapped in `SharedLoRA`, which holds
                                      several adapters over one copy of the base weights and applies the
                                      one its `active` names (`seq2seq.adapters.serving`)

Why not peft: our attention reads slices of its fused q/k/v weight (`MultiHeadAttention.project`,
cross-attention's q from the decoder, k/v from the memory) instead of calling the layer; peft's
wrapped layer hands out the base weight there, so cross-attention's q/k/v update never gets a
gradient: peft trains 9 of the 10 layers a 1+1-layer model asks for, silently (benchmarks/lora.py,
docs/fine-tuning.md). Here the attention whose `in_proj` is adapted becomes `LoRAAttention`, whose
`project` calls the layer with the rows it wants, so every product gets its update.
"""

from __future__ import annotations

import math
from typing import Iterable, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.accel.cpu import CpuAttention
from seq2seq.accel.onednn import rowwise
from seq2seq.accel.packed import PackedLinear
from seq2seq.config.adapter_section import AdapterConfig
from seq2seq.config.schema import ConfigError
from seq2seq.model.attention import MultiHeadAttention

LORA_A, LORA_B = "lora_A", "lora_B"


def _rows_of(module: nn.Module, x: Tensor, rows: slice | None) -> Tensor:
    """`module`'s product x W[rows]^T + b[rows] (all rows when None), whatever kind of linear it is."""
    if rows is None:
        return module(x)
    if isinstance(module, PackedLinear):
        return module(x, rows)
    weight, bias = cast(Tensor, module.weight), cast("Tensor | None", module.bias)
    return F.linear(x, weight[rows], None if bias is None else bias[rows])


class LoRALinear(nn.Linear):
    """nn.Linear plus a trainable update: y = x W^T + b + scale * drop(x) A^T B^T (see the module docstring).

    Made from an nn.Linear in place (`from_linear`: its class changed, its weight and bias kept), so the
    base's state_dict keys do not change. forward(x, rows): only the output rows `rows` (a slice of a
    fused q/k/v weight), their update included."""

    lora_A: nn.Parameter
    lora_B: nn.Parameter
    scale: float
    lora_dropout: float

    @classmethod
    def from_linear(cls, linear: nn.Linear, rank: int, scale: float, dropout: float,
                    generator: torch.Generator | None = None) -> LoRALinear:
        linear.__class__ = cls
        lora = linear  # (now a LoRALinear)
        assert isinstance(lora, LoRALinear)
        w = linear.weight
        a = torch.empty(rank, w.size(1), dtype=torch.float32)
        # as nn.Linear initialises its weight (and peft its A): uniform in +-1/sqrt(in)
        bound = 1 / math.sqrt(w.size(1))
        a.uniform_(-bound, bound, generator=generator)
        lora.lora_A = nn.Parameter(a.to(device=w.device, dtype=w.dtype))
        lora.lora_B = nn.Parameter(torch.zeros(w.size(0), rank, device=w.device, dtype=w.dtype))
        lora.scale, lora.lora_dropout = scale, dropout
        return lora

    def forward(self, x: Tensor, rows: slice | None = None) -> Tensor:
        # bf16 training on a CPU: rows padded to a bucketed count, as `CpuLinear` does (a handful of oneDNN kernels)
        return rowwise(lambda h: self._product(h, rows), x)

    def _product(self, x: Tensor, rows: slice | None) -> Tensor:
        w = self.weight if rows is None else self.weight[rows]
        b = self.bias if self.bias is None or rows is None else self.bias[rows]
        y = F.linear(x, w, b)
        h = F.dropout(x, self.lora_dropout, self.training) if self.lora_dropout else x
        up = self.lora_B if rows is None else self.lora_B[rows]
        return y + self.scale * F.linear(F.linear(h, self.lora_A), up)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.lora_A.size(0)}, scale={self.scale:g}"


class LoRAAttention(CpuAttention):
    """MultiHeadAttention whose sliced q/k/v projections call `in_proj` with their rows (instead of
    reading its weight), so that an adapted `in_proj` adds its update to them too. (Its base is the CPU
    training variant, whose fp32 attention in bf16 training it keeps; elsewhere that is MultiHeadAttention.)"""

    def project(self, x: Tensor, part: slice) -> Tensor:
        return self.in_proj(x, part)


def targeted(model: nn.Module, targets: Iterable[str], what: str = "training.adapter.target_modules") -> list[str]:
    """The names of `model`'s linear layers that `targets` name (a full module path, or its last parts);
    ConfigError naming the target that names none."""
    linears = [name for name, m in model.named_modules() if isinstance(m, (nn.Linear, PackedLinear))]
    chosen: list[str] = []
    for target in targets:
        target = target.strip(".")
        found = [n for n in linears if n == target or n.endswith("." + target)]
        if not found:
            last = sorted({n.rsplit(".", 1)[-1] for n in linears})
            raise ConfigError(f"{what}: {target!r} names no linear layer of the model; its linear layers end in "
                              f"{', '.join(last)}")
        chosen += [n for n in found if n not in chosen]
    return sorted(chosen, key=linears.index)


def add_lora(model: nn.Module, cfg: AdapterConfig, seed: int = 1) -> list[str]:
    """Freeze `model` and make its targeted linears `LoRALinear` (in place); returns their names. The
    updates' A are drawn from `seed` (a run's training.seed), their B are zeros."""
    names = targeted(model, cfg.target_modules)
    for p in model.parameters():
        p.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    for name in names:
        layer = model.get_submodule(name)
        if isinstance(layer, LoRALinear):
            raise ConfigError(f"training.adapter: {name} already has an adapter")
        if not isinstance(layer, nn.Linear):
            raise ConfigError(f"training.adapter.target_modules: {name} is not a linear layer that can be trained")
        LoRALinear.from_linear(layer, cfg.rank, cfg.scale, cfg.dropout, generator)
        parent, _, leaf = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        if leaf == "in_proj" and type(owner) is not LoRAAttention and isinstance(owner, MultiHeadAttention):
            owner.__class__ = LoRAAttention
    if cfg.train_embeddings:
        for key in embedding_keys(model):
            model.get_parameter(key).requires_grad_(True)
    return names


def embedding_keys(model: nn.Module) -> list[str]:
    """The state_dict keys NAME.weight of `model`'s embedding tables (every nn.Embedding, [rows, d_model]),
    each tensor once: a tied output projection is the same tensor, trained and saved with its table."""
    keys: list[str] = []
    seen: set[int] = set()
    for name, m in model.named_modules():
        if isinstance(m, nn.Embedding) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            keys.append(f"{name}.weight")
    return keys


def lora_tensors(model: nn.Module) -> dict[str, Tensor]:
    """{NAME.lora_A: A, NAME.lora_B: B} of every `LoRALinear` of `model`."""
    out: dict[str, Tensor] = {}
    for name, m in model.named_modules():
        if isinstance(m, LoRALinear):
            out[f"{name}.{LORA_A}"], out[f"{name}.{LORA_B}"] = m.lora_A, m.lora_B
    return out


def is_lora_key(key: str) -> bool:
    return key.endswith(("." + LORA_A, "." + LORA_B))


def merge_lora(model: nn.Module, tensors: dict[str, Tensor], scale: float) -> list[str]:
    """W += scale * B A (computed in fp32) in each layer NAME that `tensors` holds NAME.lora_A and
    NAME.lora_B of, and each other tensor (a trained embedding table, `embedding_keys`) copied into the
    parameter of its key; returns the adapted layers' names. The model then computes what base + adapter
    computed."""
    names = sorted({k.rsplit(".", 1)[0] for k in tensors if is_lora_key(k)})
    with torch.no_grad():
        for key in [k for k in tensors if not is_lora_key(k)]:
            table = model.get_parameter(key)
            table.copy_(tensors[key].to(device=table.device, dtype=table.dtype))
        for name in names:
            layer = model.get_submodule(name)
            a, b = tensors[f"{name}.{LORA_A}"], tensors[f"{name}.{LORA_B}"]
            w = cast(Tensor, layer.weight)
            w.copy_((w.float() + scale * (b.float().to(w.device) @ a.float().to(w.device))).to(w.dtype))
    return names


class SharedLoRA(nn.Module):
    """A linear layer (nn.Linear, PackedLinear, an int8 one) with several named LoRA updates over its one
    weight: forward(x, rows) adds the update of the adapter `active` names (none: the base layer's).
    `weight` and `bias` read as the layer's (the weight with the active update, for code that reads it)."""

    def __init__(self, base: nn.Module) -> None:
        super().__init__()
        self.base = base
        self.adapters: dict[str, tuple[Tensor, Tensor, float]] = {}  # name -> (A, B, scale); not parameters
        self.active: str | None = None

    def add(self, name: str, a: Tensor, b: Tensor, scale: float) -> None:
        w = getattr(self.base, "weight", None)
        # the update in the weights' dtype (bf16 models), fp32 beside int8 weights (they take fp32 in)
        dtype = w.dtype if isinstance(w, Tensor) and w.is_floating_point() else torch.float32
        device = w.device if isinstance(w, Tensor) else torch.device("cpu")
        self.adapters[name] = (a.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype), scale)

    @property
    def weight(self) -> Tensor:
        w = cast(Tensor, self.base.weight)
        if self.active is None:
            return w
        a, b, scale = self.adapters[self.active]
        return w + scale * (b @ a)

    @property
    def bias(self) -> Tensor | None:
        return cast("Tensor | None", self.base.bias)

    def forward(self, x: Tensor, rows: slice | None = None) -> Tensor:
        y = _rows_of(self.base, x, rows)
        if self.active is None:
            return y
        a, b, scale = self.adapters[self.active]
        up = b if rows is None else b[rows]
        return y + scale * F.linear(F.linear(x.to(a.dtype), a), up).to(y.dtype)


def add_shared(model: nn.Module, names: Iterable[str]) -> dict[str, SharedLoRA]:
    """Wrap `model`'s layers `names` in `SharedLoRA` (once; in place), their attentions' sliced
    projections made to call them (`LoRAAttention`, where the attention is a plain MultiHeadAttention;
    PackedAttention calls its layer already); returns {name: its SharedLoRA}."""
    shared: dict[str, SharedLoRA] = {}
    for name in names:
        parent, _, leaf = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        layer = getattr(owner, leaf)
        if not isinstance(layer, SharedLoRA):
            layer = SharedLoRA(layer)
            setattr(owner, leaf, layer)
        if leaf == "in_proj" and type(owner) is MultiHeadAttention:
            owner.__class__ = LoRAAttention
        shared[name] = layer
    return shared


__all__ = ["LoRAAttention", "LoRALinear", "SharedLoRA", "add_lora", "add_shared", "embedding_keys", "is_lora_key", "lora_tensors",
           "merge_lora", "targeted"]
