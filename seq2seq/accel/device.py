"""Devices and precisions, shared by training and inference.

    choose_device("auto")            cuda > mps > cpu
    native_bf16(device)              does the hardware compute bf16 natively?
    resolve_precision("auto", dev)   bf16 where native, else fp32
    autocast_context(dev, "bf16")    torch.autocast for bf16/fp16, a no-op for fp32
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch

INFERENCE_PRECISIONS = ("fp32", "bf16", "int8")  # --precision of translate, caption, transcribe, serve


def choose_device(name: str = "auto") -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def native_bf16(device: torch.device) -> bool:
    """Does the device compute bf16 natively (CUDA with bf16, or a CPU with AVX512-BF16/AMX)?"""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        try:
            flags = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
        return "avx512_bf16" in flags or "amx_bf16" in flags
    return False


def resolve_precision(precision: str, device: torch.device) -> str:
    if precision == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    return precision


def autocast_context(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision == "fp16":
        return torch.autocast(device.type, dtype=torch.float16)
    return nullcontext()
