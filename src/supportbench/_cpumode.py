"""The CPU kernels a process computes with, pinned before torch loads, so that theta_0 and every run
have the same bits on any x86 CPU of the mode's class (docs/sweeps.md, "The same bits on any x86
CPU").

ATen picks its vectorised kernels, MKL its GEMM code path and oneDNN its JIT kernels by the
instruction set of the CPU they run on, and each choice changes the last bits of a sum: the same
seeded training gives other weights on an AVX-512 box than on an AVX2 box. Each library reads one
environment variable, once, when it loads, that pins the choice:

  mode      ATEN_CPU_CAPABILITY  MKL_CBWR    ONEDNN_MAX_CPU_ISA  the same bits on
  avx2      avx2                 AVX2        AVX2                every Intel x86-64 CPU with AVX2
                                                                 and FMA; the default
  portable  default              COMPATIBLE  SSE41               every x86-64 CPU, Intel or not, at
                                                                 a cost (bench/cpu_mode.py)
  native    (as set, or unset)                                   this CPU kind only

MKL's AVX2 branch is Intel's: on any other vendor's CPU MKL ignores ``MKL_CBWR=AVX2`` and runs its
own code path (oneMKL's developer guide, "Getting Started with Conditional Numerical
Reproducibility": "On non-Intel CPUs ... the AUTO branch is used instead"). Every GEMM of a run
goes through MKL, so there the avx2 mode computes other bits than on an Intel CPU (measured: TOFU's
and the controlled theta_0 on an AMD EPYC and on an Intel Xeon differ): ``effective`` calls it
``native-<capability>`` there. ``COMPATIBLE`` is MKL's branch for every vendor.

``apply`` sets them (``SUPPORTBENCH_CPU_MODE`` names the mode, default ``avx2``); it must run before
torch is imported, so ``import supportbench`` runs it (``on_import``): the command, the Python API
imported before torch, worker processes and Slurm jobs all compute in the mode. ``effective`` says,
given what torch reports, which mode a process actually runs with; a theta_0 cache key and every
record carry it, so what was computed under other kernels is never mixed in. No torch here: layer 0.
"""

from __future__ import annotations

import contextlib
import os
import sys

MODES: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "portable": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },
    "native": {},
}
VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
DEFAULT_MODE = "avx2"
ENV = "SUPPORTBENCH_CPU_MODE"
# torch.backends.cpu.get_cpu_capability() when a mode's ATen setting took effect
_CAPABILITY = {"avx2": "AVX2", "portable": "DEFAULT"}
_late = False  # apply() changed the settings after torch loaded: this process keeps its kernels


def requested() -> str:
    """The mode this process was asked for: ``SUPPORTBENCH_CPU_MODE``, default ``avx2``."""
    raw = os.environ.get(ENV, "")
    mode = raw.strip().lower() or DEFAULT_MODE
    if mode not in MODES:
        from supportbench.errors import SpecError

        raise SpecError(f"{ENV}={raw!r} is not a CPU mode; allowed: {', '.join(MODES)}")
    return mode


def apply(mode: str | None = None) -> bool:
    """Pin the kernels of ``mode`` (default ``requested()``) for this process and those it starts.
    False when torch had loaded here with other settings: only processes started later follow."""
    global _late
    mode = mode or requested()
    already = all(os.environ.get(v) == MODES[mode][v] for v in MODES[mode])
    os.environ[ENV] = mode
    os.environ.update(MODES[mode])  # native: the variables stay as the user set them (or unset)
    if "torch" in sys.modules and not already:
        _late = True
        return False
    return True


def on_import() -> None:
    """``apply`` as ``import supportbench`` runs it: a mode name ``requested`` refuses is left for
    the command that reads it to report (importing a package never fails on an environment
    variable)."""
    with contextlib.suppress(Exception):  # a SpecError, reported by the command
        apply()


def effective(capability: str, vendor: str | None = None) -> str:
    """The mode a process computes with, given torch's ``get_cpu_capability()``
    (``unlearning.models.cpu_mode`` asks torch) and the CPU's vendor (default ``cpu_vendor()``):
    ``avx2`` or ``portable`` when every library took its setting, else ``native-<capability>``
    (torch loaded before ``apply``, a CPU without AVX2, or the avx2 mode on a CPU that is not
    Intel's, where MKL runs its own branch)."""
    if not _late:
        for mode, want in _CAPABILITY.items():
            libs = {k: v for k, v in MODES[mode].items() if k != "ATEN_CPU_CAPABILITY"}
            if capability != want or any(os.environ.get(k) != v for k, v in libs.items()):
                continue
            if mode in _INTEL_ONLY and (cpu_vendor() if vendor is None else vendor) != INTEL:
                break
            return mode
    return f"native-{capability.lower()}"


INTEL = "GenuineIntel"
_INTEL_ONLY = ("avx2",)  # modes whose MKL branch runs only on Intel CPUs (the module's docstring)


def cpu_vendor() -> str:
    """The CPU's vendor as the kernel reports it (``GenuineIntel``, ``AuthenticAMD``, ...); ``""``
    where /proc/cpuinfo cannot be read or names none (another system, another architecture): the
    avx2 mode is then not assumed to hold."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, colon, value = line.partition(":")
                if colon and key.strip() == "vendor_id":
                    return value.strip()
    except OSError:
        pass
    return ""
