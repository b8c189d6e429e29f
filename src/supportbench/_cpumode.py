"""The CPU kernels a process computes with, pinned before torch loads, so that theta_0 and every run
have the same bits on any x86 CPU of the mode's class (docs/benchmarks.md, "The same bits on any x86
CPU").

ATen picks its vectorised kernels, MKL its GEMM code path and oneDNN its JIT kernels by the
instruction set of the CPU they run on, and each choice changes the last bits of a sum: the same
seeded training gives other weights on an AVX-512 box than on an AVX2 box. Each library reads one
environment variable, once, when it loads, that pins the choice:

  mode      ATEN_CPU_CAPABILITY  MKL_CBWR    ONEDNN_MAX_CPU_ISA  the same bits on
  avx2      avx2                 AVX2        AVX2                every x86-64 CPU with AVX2 and FMA
                                                                 (x86-64-v3); the default
  portable  default              COMPATIBLE  SSE41               every x86-64 CPU, at a cost
                                                                 (bench/cpu_mode.py)
  native    (as set, or unset)                                   this CPU kind only

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


def effective(capability: str) -> str:
    """The mode a process computes with, given torch's ``get_cpu_capability()``
    (``unlearning.models.cpu_mode`` asks torch): ``avx2`` or ``portable`` when every library took
    its setting, else ``native-<capability>`` (torch loaded before ``apply``, or a CPU without
    AVX2)."""
    if not _late:
        for mode, want in _CAPABILITY.items():
            libs = {k: v for k, v in MODES[mode].items() if k != "ATEN_CPU_CAPABILITY"}
            if capability == want and all(os.environ.get(k) == v for k, v in libs.items()):
                return mode
    return f"native-{capability.lower()}"
