"""`--precision auto` / `--device auto`: the choice is a pure function of the device and the CPU,
checked against the flag sets of the machines bertkit has been measured on."""

from __future__ import annotations

import logging

import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.switches import AUTO_PRECISION
from bertkit.training.hardware import (
    CpuInfo,
    choose_device,
    choose_precision,
    cpu_info,
    resolve_precision,
)

BASE = "fpu sse sse2 ssse3 sse4_1 sse4_2 fma avx f16c avx2 bmi1 bmi2"
AVX512 = "avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni"

# The three CPUs of the issue, plus this session's Xeon, as /proc/cpuinfo shows them, and what
# bf16 measured against fp32 there (docs/reports/benchmarks.md, "Precision").
MACHINES = {
    # Xeon with AMX (Sapphire Rapids): AMX bf16 tiles, bf16 several times fp32.
    "xeon-amx": ("GenuineIntel", f"{BASE} {AVX512} avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8",
                 "bf16"),
    # EPYC (Zen 4) with AVX512-BF16: bf16 GEMMs 1.8x fp32.
    "epyc-avx512-bf16": ("AuthenticAMD", f"{BASE} {AVX512} avx512_bf16", "bf16"),
    # EPYC with AVX2 only: bf16 emulated, many times slower than fp32.
    "epyc-avx2": ("AuthenticAMD", BASE, "fp32"),
    # Xeon with AVX512-BF16 but no AMX (this session's machine): bf16 measured 0.6-0.7x fp32.
    "xeon-avx512-bf16-no-amx": ("GenuineIntel", f"{BASE} {AVX512} avx512_bf16 avx512_fp16", "fp32"),
}


def cpuinfo_text(vendor: str, flags: str) -> str:
    return (f"processor\t: 0\nvendor_id\t: {vendor}\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\n"
            f"processor\t: 1\nvendor_id\t: {vendor}\nflags\t\t: {flags}\n")


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_auto_precision_matches_what_was_measured_on_each_cpu(machine):
    vendor, flags, expected = MACHINES[machine]
    cpu = cpu_info(cpuinfo_text(vendor, flags))
    assert cpu.vendor == vendor and "avx2" in cpu.flags and cpu.model == "Some CPU"
    precision, reason = choose_precision("cpu", cpu)
    assert precision == expected, reason
    assert reason


def test_auto_precision_never_picks_emulated_bf16():
    """No native bf16 instruction: fp32, whatever the vendor (emulated bf16 is the slow case)."""
    for vendor in ("GenuineIntel", "AuthenticAMD", ""):
        assert choose_precision("cpu", CpuInfo(vendor, frozenset(BASE.split())))[0] == "fp32"
    assert choose_precision("cpu", None)[0] == "fp32"  # flags unknown (no /proc/cpuinfo)
    assert cpu_info("") == CpuInfo("", frozenset())


def test_auto_precision_on_gpus():
    assert choose_precision("cuda", None, cuda_bf16=True)[0] == "bf16"
    assert choose_precision(torch.device("cuda", 1), None, cuda_bf16=False)[0] == "fp32"
    assert choose_precision("mps", None)[0] == "fp32"


def test_resolve_precision_logs_the_choice_and_keeps_explicit_ones(caplog, monkeypatch):
    monkeypatch.delenv(AUTO_PRECISION, raising=False)
    assert resolve_precision("bf16", torch.device("cpu")) == "bf16"
    with caplog.at_level(logging.INFO, logger="bertkit.training.hardware"):
        chosen = resolve_precision("auto", torch.device("cpu"))
    assert chosen == choose_precision("cpu", cpu_info())[0]
    assert f"--precision auto: {chosen}" in caplog.text


def test_auto_device():
    assert choose_device(True)[0] == "cuda"
    assert choose_device(False)[0] == "cpu"


@pytest.mark.parametrize("forced", ["fp32", "bf16"])
def test_the_test_switch_forces_what_auto_picks_on_the_cpu_only(monkeypatch, forced):
    """BERTKIT_AUTO_PRECISION makes this machine resolve `auto` as another CPU class would;
    explicit precisions and CUDA are untouched."""
    monkeypatch.setenv(AUTO_PRECISION, forced)
    assert resolve_precision("auto", torch.device("cpu")) == forced
    assert resolve_precision("fp32", torch.device("cpu")) == "fp32"
    monkeypatch.setenv(AUTO_PRECISION, "fp64")
    with pytest.raises(BertkitError, match="expected fp32 or bf16"):
        resolve_precision("auto", torch.device("cpu"))
