"""Devices and precisions, shared by training and inference.

    choose_device("auto")            cuda > mps > cpu
    native_bf16(device)              do the bf16 kernels that will run here compute natively (fast)?
    resolve_precision("auto", dev)   bf16 where native, else fp32
    slow_precision_warning(p, dev)   one line saying why an explicitly chosen precision is slow here
    autocast_context(dev, "bf16")    torch.autocast for bf16/fp16, a no-op for fp32
    use_fast_attention_kernels(dev)  CUDA: scaled_dot_product_attention without cuDNN's per-shape plans

On a CPU the answer comes from the kernels, not from /proc/cpuinfo: a CPU whose flags list
AVX512-BF16 or AMX still runs emulated bf16 when the instruction set is capped below them
(ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, as in a VM or on purpose). So bf16 counts as
native only where torch dispatches AVX-512 kernels (`torch.backends.cpu.get_cpu_capability()`) and a
timed bf16 matmul is clearly faster than the fp32 one (measured once per process, ~0.1 s).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from contextlib import nullcontext

import torch

log = logging.getLogger(__name__)

INFERENCE_PRECISIONS = ("fp32", "bf16", "int8")  # --precision of translate, caption, transcribe, serve


def choose_device(name: str = "auto") -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _matmul_seconds(dtype: torch.dtype, n: int = 256, repeats: int = 5) -> float:
    """The best time of an [n, n] x [n, n] matmul in `dtype` on the CPU, one thread."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a @ b  # warm-up: kernel selection, first-touch
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
        return best
    finally:
        torch.set_num_threads(threads)


@functools.lru_cache(maxsize=None)
def cpu_bf16_is_native() -> bool:
    """Do this process's CPU bf16 matmuls run on native kernels? (AVX-512 dispatch, and a bf16 matmul
    timed at under 0.8x the fp32 one: emulated bf16 is several times slower than fp32.)"""
    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        return False
    return _matmul_seconds(torch.bfloat16) < 0.8 * _matmul_seconds(torch.float32)


def native_bf16(device: torch.device) -> bool:
    """Does the device compute bf16 natively: CUDA with bf16, or a CPU whose bf16 kernels are native
    (`cpu_bf16_is_native`)?"""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return cpu_bf16_is_native()
    return False


def resolve_precision(precision: str, device: torch.device) -> str:
    """"auto": bf16 where the device computes it natively, else fp32; any other value as given (with
    one warning where it is slower than fp32 here, see `slow_precision_warning`)."""
    if precision == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    warning = slow_precision_warning(precision, device)
    if warning:
        log.warning(warning)
    return precision


def slow_precision_warning(precision: str, device: torch.device) -> str | None:
    """One line saying why `precision` runs slower than fp32 on `device`, or None."""
    if precision == "bf16" and device.type == "cpu" and not native_bf16(device):
        return (f"precision bf16 is emulated on this CPU (torch kernels: {torch.backends.cpu.get_cpu_capability()}, "
                "no native bf16 matmul): it runs slower than fp32; use fp32 (or precision auto)")
    return None


def autocast_context(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision == "fp16":
        return torch.autocast(device.type, dtype=torch.float16)
    return nullcontext()


def use_fast_attention_kernels(device: torch.device) -> None:
    """On CUDA, keep `scaled_dot_product_attention` off cuDNN's backend (flash and memory-efficient
    attention instead). Since torch 2.9 SDPA with a mask prefers cuDNN on Hopper GPUs, and cuDNN builds
    an execution plan for every new (batch, source length, target length): with token-bucketed batches
    almost every training step meets a new one, which trained 10.8x fewer steps in the same minutes on
    an H200 (issue 58). SEQ2SEQ_CUDNN_ATTENTION=1 keeps cuDNN allowed. A no-op elsewhere."""
    if device.type != "cuda" or os.environ.get("SEQ2SEQ_CUDNN_ATTENTION") == "1":
        return
    enable = getattr(torch.backends.cuda, "enable_cudnn_sdp", None)  # (torch >= 2.2)
    if enable is not None:
        enable(False)
