"""Which backend runs the paged-attention kernel here, and what the device can do.

Three backends (the page always names the one that produced a number):

* ``"cuda"`` -- the Triton kernel compiled for an NVIDIA GPU; used for checks and sweeps.
* ``"torch-cpu"`` -- the same gather (index the cache by block table) and attention written in
  torch, for CPU sweeps at realistic sizes.
* ``"triton-interpreter"`` -- the Triton kernel run by Triton's CPU interpreter
  (``TRITON_INTERPRET=1``, set before Triton is imported); tiny shapes only, for correctness.
"""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from typing import Literal

import torch

from allocator.common.errors import FieldError

BackendName = Literal["cuda", "torch-cpu", "triton-interpreter"]
BACKENDS: tuple[str, ...] = ("cuda", "torch-cpu", "triton-interpreter")

#: Published peak DRAM bandwidth in bytes/second, matched by substring of the CUDA device name
#: (first match wins, so more specific names come first). Sources: NVIDIA data sheets.
PEAK_BANDWIDTH_TABLE: tuple[tuple[str, float], ...] = (
    ("B200", 8.0e12),
    ("GH200", 4.0e12),
    ("H200", 4.8e12),
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIe", 1.935e12),
    ("A100", 1.555e12),
    ("L40S", 864e9),
    ("L40", 864e9),
    ("L4", 300e9),
    ("A10G", 600e9),
    ("A10", 600e9),
    ("RTX 4090", 1008e9),
    ("RTX 3090", 936e9),
    ("V100", 900e9),
    ("T4", 320e9),
)


@dataclass(frozen=True)
class Backend:
    """The backend chosen for a purpose, said plainly.

    Attributes:
        name: "cuda", "torch-cpu" or "triton-interpreter".
        device: human description of the device, e.g. "NVIDIA H100 80GB HBM3" or
            "CPU: AMD EPYC 7B13 (2 torch threads)".
        reason: one sentence on why this backend was chosen.
        peak_bandwidth: the device's peak memory bandwidth in bytes/second, or None if unknown.
        peak_source: where ``peak_bandwidth`` comes from ("" when unknown).
    """

    name: str
    device: str
    reason: str
    peak_bandwidth: float | None = None
    peak_source: str = ""

    @property
    def label(self) -> str:
        """Short text for the UI: ``"torch-cpu on CPU: ..."``."""
        return f"{self.name} on {self.device}"


def triton_status() -> tuple[bool, bool, str]:
    """Return ``(importable, interpreting, message)`` for Triton in this process.

    ``interpreting`` is True when ``TRITON_INTERPRET=1`` is in effect (the kernel module, once
    imported, runs in the interpreter). Never raises.
    """
    try:
        import triton  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return False, False, f"Triton is not importable ({type(exc).__name__}: {exc})"
    interp = os.environ.get("TRITON_INTERPRET", "0") == "1"
    return True, interp, "Triton interpreter" if interp else "Triton compiler"


def cpu_description() -> str:
    """Return e.g. ``"CPU: Intel Xeon ... (2 torch threads)"``."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    return f"CPU: {model} ({torch.get_num_threads()} torch threads)"


def cuda_peak_bandwidth(index: int = 0) -> tuple[float | None, str]:
    """Peak DRAM bandwidth of CUDA device ``index`` in bytes/second, and its source.

    The data-sheet figure from :data:`PEAK_BANDWIDTH_TABLE` when the device name matches (the
    figure targets are quoted against, e.g. 4.8 TB/s for an H200), else 2 x memory clock x bus
    width from the device properties (double data rate) when torch reports them; ``(None, "")``
    when neither knows.
    """
    props = torch.cuda.get_device_properties(index)
    for key, value in PEAK_BANDWIDTH_TABLE:
        if key in props.name:
            return value, f"NVIDIA data sheet ({key})"
    clock_khz = getattr(props, "memory_clock_rate", 0) or 0
    bus_bits = getattr(props, "memory_bus_width", 0) or 0
    if clock_khz > 0 and bus_bits > 0:
        return 2.0 * clock_khz * 1e3 * bus_bits / 8.0, "2 x memory clock x bus width (device properties)"
    return None, ""


def last_level_cache_bytes() -> int | None:
    """Size of this CPU's last-level cache in bytes (Linux sysfs), or None when unknown.

    The CPU sweep's working set should be several times larger, so that it measures reads from
    memory, not from the cache.
    """
    best = (0, None)
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return None
    for entry in entries:
        try:
            with open(os.path.join(base, entry, "level"), encoding="utf-8") as fh:
                level = int(fh.read().strip())
            with open(os.path.join(base, entry, "size"), encoding="utf-8") as fh:
                text = fh.read().strip().upper()
        except (OSError, ValueError):
            continue
        mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * mult
        except ValueError:
            continue
        if level >= best[0]:
            best = (level, size)
    return best[1]


def detect(purpose: Literal["sweep", "check"] = "sweep") -> Backend:
    """Choose the backend for ``purpose`` on this machine.

    Args:
        purpose: "sweep" (timing at realistic sizes) or "check" (correctness on a tiny shape).

    Returns:
        :class:`Backend`. With CUDA and a compiling Triton: "cuda" for both purposes. Without
        CUDA: "torch-cpu" for sweeps; for checks "triton-interpreter" when Triton's interpreter is
        active, else "torch-cpu".

    Raises:
        FieldError (``purpose``): not "sweep" or "check".
    """
    if purpose not in ("sweep", "check"):
        raise FieldError("purpose", f" must be 'sweep' or 'check', got {purpose!r}")
    importable, interp, msg = triton_status()
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        if importable and not interp:
            peak, src = cuda_peak_bandwidth(0)
            return Backend("cuda", name, "A CUDA GPU is present and Triton compiles for it.", peak, src)
        why = msg if not importable else "TRITON_INTERPRET=1 is set, so Triton will not compile"
        return Backend("torch-cpu", cpu_description(),
                       f"A CUDA GPU ({name}) is present but {why}; using the torch CPU path.")
    if purpose == "check" and importable and interp:
        return Backend("triton-interpreter", cpu_description(),
                       "No CUDA GPU: the Triton kernel runs in Triton's CPU interpreter "
                       "(slow; tiny shapes only, for correctness).")
    if purpose == "check":
        return Backend("torch-cpu", cpu_description(),
                       f"No CUDA GPU and {msg}; checking the torch CPU path instead of the Triton kernel.")
    return Backend("torch-cpu", cpu_description(),
                   "No CUDA GPU: timing the same block-table gather and attention written in torch on "
                   "the CPU (the Triton interpreter is far too slow to time).")


def versions() -> dict[str, str]:
    """Return the versions that matter for a recorded result: python, torch, triton, cuda."""
    out = {"python": sys.version.split()[0], "torch": torch.__version__,
           "cuda": str(torch.version.cuda or "none")}
    try:
        import triton
        out["triton"] = triton.__version__
    except Exception:
        out["triton"] = "not installed"
    return out
