"""Precision choice (seq2seq.accel.device): `auto` picks bf16 only where the bf16 kernels that will run
are native and fast, decided from torch's dispatch and a timed matmul (not /proc/cpuinfo), and an
explicit slow choice gets one warning line saying why."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

from seq2seq.accel import device as D

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_probe():
    D.cpu_bf16_is_native.cache_clear()
    yield
    D.cpu_bf16_is_native.cache_clear()


def fake_cpu(monkeypatch, capability: str, bf16_seconds: float, fp32_seconds: float = 1.0) -> list[torch.dtype]:
    timed = []

    def seconds(dtype, *args, **kwargs):
        timed.append(dtype)
        return bf16_seconds if dtype == torch.bfloat16 else fp32_seconds

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(D, "_matmul_seconds", seconds)
    return timed


@pytest.mark.parametrize("capability, bf16_seconds, native", [
    ("AVX2", 0.1, False),  # an AVX2 dispatch never counts as native, whatever the flags say
    ("DEFAULT", 0.1, False),
    ("AVX512", 3.0, False),  # AVX-512 without native bf16: emulated, slower than fp32
    ("AVX512", 0.9, False),  # not clearly faster
    ("AVX512", 0.3, True),  # AVX512-BF16 / AMX
])
def test_bf16_is_native_only_where_its_kernels_are(monkeypatch, capability, bf16_seconds, native):
    timed = fake_cpu(monkeypatch, capability, bf16_seconds)
    assert D.native_bf16(CPU) is native
    assert D.resolve_precision("auto", CPU) == ("bf16" if native else "fp32")
    assert D.native_bf16(CPU) is native
    assert len(timed) == (0 if capability != "AVX512" else 2)  # measured once per process, and only there


def test_an_explicit_slow_precision_gets_one_warning_naming_why(monkeypatch, caplog):
    fake_cpu(monkeypatch, "AVX2", 5.0)
    with caplog.at_level(logging.WARNING, logger="seq2seq.accel.device"):
        assert D.resolve_precision("bf16", CPU) == "bf16"
        assert D.resolve_precision("fp32", CPU) == "fp32"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "emulated" in lines[0] and "AVX2" in lines[0] and "fp32" in lines[0]
    assert D.slow_precision_warning("bf16", torch.device("meta")) is None


def test_the_translator_warns_for_emulated_bf16(monkeypatch, caplog, tiny_model_dir):
    from seq2seq.inference.translator import Translator

    fake_cpu(monkeypatch, "AVX2", 5.0)
    with caplog.at_level(logging.WARNING):
        translator = Translator.load(tiny_model_dir, device="cpu", precision="bf16")
    assert any("emulated" in r.getMessage() for r in caplog.records)
    assert len(translator.translate(["a dog .", ""])) == 2


@pytest.mark.isa
def test_with_the_isa_forced_to_avx2_auto_is_fp32():
    """The real probe, in a fresh process whose torch is capped at AVX2 (as on most laptops)."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    code = ("import torch; from seq2seq.accel.device import resolve_precision as r; "
            "print(torch.backends.cpu.get_cpu_capability(), r('auto', torch.device('cpu')))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["AVX2", "fp32"]
