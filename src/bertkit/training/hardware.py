"""Which device and which precision a run uses: `--device auto` and `--precision auto`.

Pure functions of what the machine has (`choose_device`, `choose_precision`), and the two
`resolve_*` that ask the machine and log the choice with its reason. The CPU's flags come from
/proc/cpuinfo: `torch.backends.cpu.get_cpu_capability()` says which vector ISA torch's kernels
use (e.g. "AVX512"), not whether the CPU has AMX or AVX512-BF16 nor its vendor, which is what
the choice turns on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from bertkit.errors import BertkitError
from bertkit.switches import AUTO_PRECISION, forced_auto_precision

log = logging.getLogger(__name__)

# What --precision accepts for training: "auto" (`resolve_precision`), or the autocast dtype.
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def choose_device(cuda_available: bool) -> tuple[str, str]:
    """(device, reason) for `--device auto`: the GPU when there is one."""
    if cuda_available:
        return "cuda", "a CUDA device is available"
    return "cpu", "no CUDA device"


def resolve_device(name: str | torch.device) -> torch.device:
    """"auto" = the current CUDA device when there is one, else the CPU; a device that this
    machine does not have is a clear error, not a failure deep inside."""
    if str(name) == "auto":
        name, reason = choose_device(torch.cuda.is_available())
        log.info("--device auto: %s (%s)", name, reason)
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise BertkitError(f"--device {name!r}: not a device name ({err})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise BertkitError(f"--device {name}: CUDA is not available on this machine "
                               "(use --device cpu or auto)")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise BertkitError(f"--device {name}: MPS is not available on this machine")
    return device


# --precision auto: bf16 only where the hardware multiplies bf16 fast; emulated bf16 (AVX2-only
# CPUs) is several times slower than fp32, and oneDNN's Intel bf16 path wants AMX. The
# measurements per CPU class behind each rule are in docs/reports/benchmarks.md ("Precision").


@dataclass(frozen=True)
class CpuInfo:
    vendor: str  # "GenuineIntel", "AuthenticAMD", ... ("" when unknown)
    flags: frozenset[str]  # /proc/cpuinfo's flags: "avx2", "avx512_bf16", "amx_bf16", ...
    model: str = ""  # "model name", for records that name the machine ("" when unknown)


def cpu_info(cpuinfo: str | None = None) -> CpuInfo:
    """The CPU's vendor and feature flags (/proc/cpuinfo, or the text `cpuinfo` when given);
    empty where there is no such file (then `choose_precision` stays with fp32)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags", fields.get("Features", ""))
    return CpuInfo(fields.get("vendor_id", ""), frozenset(flags.split()),
                   fields.get("model name", ""))


def cpu_bf16_native(cpu: CpuInfo) -> tuple[bool, str]:
    """Whether bf16 matmuls beat fp32 on this CPU, and why (docs/reports/benchmarks.md, "Precision")."""
    if "amx_bf16" in cpu.flags:
        return True, "CPU has AMX (amx_bf16)"
    if "avx512_bf16" in cpu.flags and cpu.vendor == "AuthenticAMD":
        return True, "AMD CPU with AVX512-BF16 (bf16 GEMMs faster than fp32 there)"
    if "avx512_bf16" in cpu.flags:
        return False, (f"{cpu.vendor or 'CPU'} with AVX512-BF16 but no AMX (bf16 slower than "
                       "fp32 on such a Xeon)")
    return False, "CPU has no native bf16 (no amx_bf16 or avx512_bf16: bf16 would be emulated)"


def choose_precision(device: torch.device | str, cpu: CpuInfo | None = None,
                     cuda_bf16: bool = False) -> tuple[str, str]:
    """(precision, reason) for `--precision auto`: a pure function of the device, the CPU and
    whether the CUDA device computes bf16. bf16 where it is native and fast, else fp32."""
    device = torch.device(device)
    if device.type == "cuda":
        if cuda_bf16:
            return "bf16", "CUDA device with native bf16"
        return "fp32", "CUDA device without bf16 (fp16 needs loss scaling: ask for it explicitly)"
    if device.type == "cpu":
        native, reason = cpu_bf16_native(cpu or CpuInfo("", frozenset()))
        return ("bf16" if native else "fp32"), reason
    return "fp32", f"{device.type} device: fp32 is the safe default"


def resolve_precision(requested: str, device: torch.device) -> str:
    """`requested`, or for "auto" the choice of `choose_precision` on this machine (logged)."""
    if requested != "auto":
        return requested
    forced = forced_auto_precision() if device.type == "cpu" else None
    if forced is not None:
        log.info("--precision auto: %s on %s (forced by %s)", forced, device, AUTO_PRECISION)
        return forced
    cpu = cpu_info() if device.type == "cpu" else None
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    precision, reason = choose_precision(device, cpu, cuda_bf16)
    log.info("--precision auto: %s on %s (%s)", precision, device, reason)
    return precision
