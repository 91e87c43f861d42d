"""CPU training variants of the standard modules, and the transform that swaps them in.

The model's modules (`seq2seq.model.layers`, `seq2seq.model.attention`) are plain torch. Training on a CPU
runs faster with a few tricks that change no result (bucketed rows) or only which random numbers
are drawn (dropout); each is a small subclass of the standard module here, with no state of its own:

| standard module      | CPU variant      | what changes                                                   |
| -------------------- | ---------------- | -------------------------------------------------------------- |
| `nn.Dropout`         | `CpuDropout`     | four 16-bit random draws per 64-bit random number              |
| `nn.Linear`          | `CpuLinear`      | bf16 training: rows padded to a bucketed count (`onednn`)      |
| `FeedForward`        | `CpuFeedForward` | bf16 training: the whole block's rows bucketed once            |
| `MultiHeadAttention` | `CpuAttention`   | bf16 training: sliced q/k/v projections bucketed, and the      |
|                      |                  | attention itself computed in fp32                              |

`speed_up_for_cpu_training(model)` re-classes, in place, every module whose type is exactly one
of these standard types, wherever it sits (the text, image or audio encoder, the decoder), and
caps oneDNN's kernel caches (`limit_onednn_caches`). Parameters, buffers and the optimizer's
references are untouched, state_dict keys are unchanged, and in eval mode every variant computes
exactly what its standard module does (bucketing and fp32 attention act only while autograd
records, under bf16). Training applies it on a CPU (`seq2seq.training.placement`); decoding has its
own transform, `seq2seq.accel.packed.pack_decoder`.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.model.attention import MultiHeadAttention
from seq2seq.model.layers import FeedForward
from seq2seq.accel.onednn import rowwise

ONEDNN_CACHE_CAPACITY = 256
CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def limit_onednn_caches(capacity: int = ONEDNN_CACHE_CAPACITY) -> None:
    """Cap oneDNN's two kernel caches at `capacity` entries each, unless the user exported a value.

    On CPU, torch runs bf16 matmuls through oneDNN, which keeps a compiled kernel per matmul shape
    in two caches of up to 1024 entries each (ONEDNN_PRIMITIVE_CACHE_CAPACITY, LRU_CACHE_CAPACITY).
    Variable-length batches meet new shapes at every step: with the defaults a training process
    grew by ~6 MB a step (3.6 -> 6.7 GB RSS within an hour). With the bucketed rows of the CPU
    variants, 256 entries hold every kernel training needs: no recompilation after warm-up, and
    memory flat near 1.7 GB (Multi30K config, benchmarks/train_speed.py).

    Both variables are read once, when oneDNN first runs a kernel in this process (not when torch
    is imported): call this before the first bf16 matmul, as `Trainer` does through
    `speed_up_for_cpu_training`; once oneDNN has run, a call changes nothing.
    """
    for name in CACHE_VARIABLES:
        os.environ.setdefault(name, str(capacity))


class CpuDropout(nn.Dropout):
    """Inverted dropout drawing 16-bit random numbers: the same distribution as nn.Dropout, faster.

    On a CPU, F.dropout draws one 32-bit number per element (a third of a small model's
    dropout-heavy training step went there). Here every 64-bit draw of the seeded torch generator
    is cut into four 16-bit numbers u, and an element is kept when u >= threshold. The drop
    probability is then round(p * 2^16) / 2^16 (within 2^-17 of p; a p below 2^-17 drops nothing)
    and kept elements are scaled by the exact inverse of the keep probability, so the expectation
    is unchanged. Off the CPU, or for p within 2^-17 of 1, it is F.dropout. x [...] -> [...].
    """

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        dropped = round(self.p * 2**16)  # of the 2^16 values of an int16 draw
        if not x.is_cpu or dropped >= 2**16 or self.inplace:
            return F.dropout(x, self.p, training=True, inplace=self.inplace)
        n = x.numel()
        draws = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
        keep = draws.view(torch.int16)[:n].view(x.shape) >= -(2**15) + dropped  # kept iff u >= threshold
        keep_prob = (2**16 - dropped) / 2**16
        return x * keep.to(x.dtype).mul_(1.0 / keep_prob)


class CpuLinear(nn.Linear):
    """nn.Linear whose rows are padded to a bucketed count in bf16 training (`onednn.rowwise`), so
    oneDNN compiles a handful of kernels instead of one per batch shape. x [..., K] -> [..., N]."""

    def forward(self, x: Tensor) -> Tensor:
        return rowwise(super().forward, x)


class CpuFeedForward(FeedForward):
    """FeedForward with the rows of the whole block bucketed once (its linears stay nn.Linear):
    one padding for both matmuls. [B, T, D] -> [B, T, D]."""

    def forward(self, x: Tensor) -> Tensor:
        return rowwise(super().forward, x)


class CpuAttention(MultiHeadAttention):
    """MultiHeadAttention for bf16 training on CPU: the sliced q/k/v projections of cross-attention
    have bucketed rows (`in_proj`/`out_proj` are `CpuLinear`), and the attention runs in fp32.

    The bf16 flash-attention backward on CPU is ~9x slower than fp32 (profiled: a third of a bf16
    training step); attention is a small share of the FLOPs, so q, k, v are cast up for it.
    """

    def project(self, x: Tensor, part: slice) -> Tensor:
        base = super().project
        return rowwise(lambda rows: base(rows, part), x)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        if need_weights or not (q.is_cpu and q.dtype == torch.bfloat16 and torch.is_grad_enabled() and q.requires_grad):
            return super().attend(q, k, v, mask, is_causal, need_weights)
        with torch.autocast("cpu", enabled=False):
            out, _ = super().attend(q.float(), k.float(), v.float(), mask, is_causal, False)
        return out.to(q.dtype), None


VARIANTS: dict[type[nn.Module], type[nn.Module]] = {
    nn.Dropout: CpuDropout,
    nn.Linear: CpuLinear,
    FeedForward: CpuFeedForward,
    MultiHeadAttention: CpuAttention,
}


def speed_up_for_cpu_training(model: nn.Module) -> nn.Module:
    """Swap the CPU variants into `model` in place (see the module docstring) and return it.

    Every module whose type is exactly a key of `VARIANTS` becomes its variant, except the linears
    inside a FeedForward, whose rows the block buckets already. Idempotent. Also calls
    `limit_onednn_caches()`: apply it before the first training step.
    """
    limit_onednn_caches()
    block_linears = {id(c) for m in model.modules() if isinstance(m, FeedForward) for c in m.children()}
    for module in list(model.modules()):
        variant = VARIANTS.get(type(module))
        if variant is not None and not (variant is CpuLinear and id(module) in block_linears):
            module.__class__ = variant
    return model
