"""Bucketed row counts for bf16 training matmuls on CPU, so that oneDNN's kernel caches hit.

On CPU, torch runs bf16 matmuls through oneDNN, which compiles a kernel for every new matmul
shape (milliseconds each) and keeps the most recent ones in two small caches (their capacity is set
by `seq2seq.accel.cpu.limit_onednn_caches` when training starts). Token-bucketed batches have a
different number of rows M = batch x length at almost every step, so every linear layer, forward and
backward, met a new shape: about 25 compilations a step (benchmarks/README.md has what that cost).

`rowwise(fn, x)` pads the rows of x to `bucket(M)` (at most 12.5% more, ~6% on average: eight
sizes per doubling) before a row-wise `fn` (a linear layer, a whole feed-forward block) and drops
the padded rows of the result. The number of distinct shapes is then a handful per doubling of M,
so the kernels are compiled in the first steps and reused: in the training benchmark, 0
compilations a step after warm-up instead of 25, with memory flat. Padding rows are zeros; they
never mix with real rows (every op of `fn` is row-wise), and their gradient is zero.

Only bf16 on CPU with autograd recording is bucketed: fp32 matmuls go to MKL, which compiles
nothing per shape, and inference keeps its exact shapes (decoding is a few rows at a time).

Where it is used: the CPU training variants of the linear, feed-forward and attention modules
(`seq2seq.accel.cpu`, swapped in by `speed_up_for_cpu_training`), and the last chunk of the fused loss
(`seq2seq.training.loss`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

LOG2_STEPS = 3  # 2^3 = 8 bucket sizes per doubling of the row count


def bucket(m: int) -> int:
    """The padded row count for m rows: the next multiple of 2^(floor(log2 m) - LOG2_STEPS)."""
    step = 1 << max(0, m.bit_length() - 1 - LOG2_STEPS)
    return -(-m // step) * step


def buckets_rows(x: Tensor) -> bool:
    """Do products with x go through oneDNN's per-shape kernels in training (bf16 on CPU)?"""
    if not x.is_cpu or not torch.is_grad_enabled():
        return False
    return x.dtype == torch.bfloat16 or (
        torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)


def rowwise(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """fn(x) for a row-wise fn: x [..., K] -> [..., N], with the rows padded to `bucket` when
    `buckets_rows(x)`."""
    if not buckets_rows(x):
        return fn(x)
    rows = x.reshape(-1, x.size(-1))
    m = rows.size(0)
    padded = bucket(m)
    if padded == m:
        return fn(x)
    y = fn(F.pad(rows, (0, 0, 0, padded - m)))[:m]
    return y.reshape(*x.shape[:-1], y.size(-1))
