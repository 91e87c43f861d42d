"""Decoder linear layers with weights pre-packed for MKL's sgemm (fp32 inference on CPU).

A decoding step multiplies a few rows (M = decoder rows, one new position each) by every decoder
weight and by the output projection. For so few rows a plain `F.linear` is dominated by MKL copying
the weight into its internal blocked layout on every call; `PackedLinear` does that copy once.
The gain shrinks as rows grow (benchmarks/README.md, "Decoding speed"): above `MAX_PACKED_ROWS`
rows, and whenever autograd or another dtype/device is involved, the plain product is used. Both give the same result up to float rounding (a different summation
order: relative differences ~1e-6).

`pack_decoder(model)` is the transform `Translator` applies at fp32 on CPU: it swaps the decoder's
nn.Linear for `PackedLinear` and its `MultiHeadAttention` for `PackedAttention` (the same module,
whose sliced q/k/v projections go through the packed weight).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, TypeVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.model.attention import MultiHeadAttention

if TYPE_CHECKING:
    from seq2seq.model.transformer import Decoder

ModuleT = TypeVar("ModuleT", bound=nn.Module)

MAX_PACKED_ROWS = 128  # above this, packing saves nothing measurable


def mkl_packing_available() -> bool:
    """True when this torch build has MKL and its packed-sgemm operators."""
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")


class PackedLinear(nn.Module):
    """y = x W^T + b for inference, W [N, K] pre-packed once (CPU, fp32).

    `forward(x, rows=None)`: x [..., K] -> [..., N]; `rows` (a slice of W's rows, e.g. W_q of a
    fused q/k/v weight) multiplies by that slice only; each slice is packed on first use.
    `weight` and `bias` stay readable as on nn.Linear. A slice is packed once: later changes to
    `weight` are not seen (build a new PackedLinear, e.g. by packing a freshly loaded model).
    """

    def __init__(self, weight: Tensor, bias: Tensor | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.detach(), requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self._packed: dict[tuple[int, int], tuple[Tensor, Tensor, Tensor | None]] = {}

    def _pack(self, rows: slice) -> tuple[Tensor, Tensor, Tensor | None]:
        key = rows.indices(self.weight.size(0))[:2]
        if key not in self._packed:
            w = self.weight[rows].contiguous()
            b = None if self.bias is None else self.bias[rows].contiguous()
            # The batch-size argument is a hint for the layout; the product accepts any M.
            self._packed[key] = (torch.ops.mkl._mkl_reorder_linear_weight(w, 32), w, b)
        return self._packed[key]

    def forward(self, x: Tensor, rows: slice | None = None) -> Tensor:
        rows = slice(None) if rows is None else rows
        m = x.numel() // x.size(-1)
        if (
            m > MAX_PACKED_ROWS
            or m == 0
            or not x.is_cpu
            or x.dtype != torch.float32
            or self.weight.dtype != torch.float32
            or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))
        ):
            b = None if self.bias is None else self.bias[rows]
            return F.linear(x, self.weight[rows], b)
        packed, w, b = self._pack(rows)
        y = torch.ops.mkl._mkl_linear(x.reshape(m, x.size(-1)), packed, w, b, m)
        return y.view(*x.shape[:-1], w.size(0))

    def extra_repr(self) -> str:
        return f"in_features={self.weight.size(1)}, out_features={self.weight.size(0)}, bias={self.bias is not None}"


class PackedAttention(MultiHeadAttention):
    """MultiHeadAttention whose `in_proj` is a PackedLinear: the q (per step) and k/v (once per
    source) slices of cross-attention are packed products too."""

    def project(self, x: Tensor, part: slice) -> Tensor:
        return self.in_proj(x, part)


def pack_decoder(model: ModuleT, inplace: bool = False) -> ModuleT:
    """`model` (a copy unless `inplace`) whose decoder linears and output projection are PackedLinear.

    Only the decoder is packed: it runs once per generated token on few rows; the encoder runs
    once per batch on many. A tied output projection gets its own PackedLinear over the same
    weight tensor (no copy). Returns the model unchanged where MKL packing is unavailable.
    Linears and attention modules of a training variant (seq2seq.accel.cpu) are packed alike.
    """
    if not mkl_packing_available():
        return model
    model = model if inplace else copy.deepcopy(model)
    decoder = cast("Decoder", model.decoder)  # a Seq2SeqTransformer's
    for module in list(decoder.modules()):
        if isinstance(module, MultiHeadAttention):
            module.__class__ = PackedAttention
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, PackedLinear(child.weight, child.bias))
    if decoder.output is None:
        decoder.output = PackedLinear(decoder.output_weight)  # type: ignore[assignment]  # nn.Linear's stand-in
    return model
