"""The same theta_0 bits whatever kernels the CPU offers (supportbench._cpumode, issue 32): TOFU's
and the controlled separation's theta_0, built in fresh processes that ask ATen for different
instruction sets (ATEN_CPU_CAPABILITY=avx2, =default, and =avx512 where the CPU has it), come out
byte-identical in the default CPU mode, which pins the kernels before torch loads, and, on an Intel
CPU, identical to recorded bits (``GOLDEN_AVX2``, recorded on one Xeon: within one run the mode asks
every process for the same kernels, so only a recorded value can see a CPU kind); the cache entry
and every record name the mode (``native-avx2`` on other vendors' CPUs, where MKL runs its own
branch). The control: without the mode (SUPPORTBENCH_CPU_MODE=native) the
same two settings give different weights on this CPU, so the equality above is the mode's doing, not
an accident of the workload. Shortened recipes (``harness.theta0_digest.SHORT_BUILDS``), as in
test_theta0_determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import supportbench
from supportbench import _cpumode

pytestmark = pytest.mark.slow
ONLY = "tofu,controlled"
# The avx2 mode's bits, as the shortened builds give them: recorded 2026-11-27 on an Intel Xeon
# (with AVX-512 and AMX; the mode asks for AVX2 kernels) with torch 2.13.0+cpu and
# transformers 5.23.0. The comparisons within one run below cannot see a CPU kind (the mode asks
# every process for the same kernels); these can: any Intel x86-64 CPU with AVX2 and FMA must
# reproduce them. On other vendors' CPUs MKL ignores its AVX2 branch (supportbench._cpumode) and the
# mode is native there: an AMD EPYC gave be9b7e97... (tofu) and 8b952e5e... (controlled), its own
# bits. They change with theta_0's own code (benchmarks.base.build_code) or the pinned
# torch/transformers, never with the Intel machine: regenerate with `SUPPORTBENCH_CPU_MODE=avx2
# python -m supportbench.harness.theta0_digest DIR --short --only tofu,controlled` and say why.
GOLDEN_AVX2 = {
    "tofu": "038fa7928307f659dd8ad57f969aa5c71e5a7fa927dfb939a32a9ec447a4713f",
    "controlled": "c11a0e7992e45bf5c8ca73fda7757a312bacefaa52148f408898b54b6bd62a88",
}


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def _digest(cache: Path, only: str = ONLY, **env_vars) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "SUPPORTBENCH_CPU_MODE")
    }
    env.update(env_vars, OMP_NUM_THREADS="1")
    src = str(Path(supportbench.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "supportbench.harness.theta0_digest",
            str(cache),
            "--short",
            "--only",
            only,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))[7:])


# The mode the default asks for reports itself only where MKL runs its AVX2 branch: on Intel CPUs
# (supportbench._cpumode); elsewhere the same settings are the CPU's own kind.
MODE = "avx2" if _cpumode.cpu_vendor() == _cpumode.INTEL else "native-avx2"
ASKED = ["avx2", "default"] + (["avx512"] if "avx512f" in _cpu_flags() else [])


@pytest.fixture(scope="module")
def asked_digests(tmp_path_factory):
    """theta_0 built once per ATen setting in ``ASKED``, each in a fresh process in the default mode
    (the tests below read the same builds)."""
    root = tmp_path_factory.mktemp("cpu-mode")
    return {isa: _digest(root / isa, ATEN_CPU_CAPABILITY=isa) for isa in ASKED}


@pytest.mark.skipif(
    "avx2" not in _cpu_flags(), reason="the default CPU mode (avx2) needs a CPU with AVX2"
)
def test_theta0_has_the_same_bits_whatever_isa_aten_is_asked_for(asked_digests, tmp_path):
    got = asked_digests
    for isa, d in got.items():
        assert d["cpu_mode"] == MODE, (
            f"ATEN_CPU_CAPABILITY={isa}: the process ran in {d['cpu_mode']}, not {MODE} "
            f"(a {_cpumode.cpu_vendor() or 'unknown'} CPU)"
        )
    first = got[ASKED[0]]
    for isa in ASKED[1:]:
        for name in ONLY.split(","):
            assert got[isa][name]["weights"] == first[name]["weights"], (
                f"{name}: theta_0 differs between "
                f"ATEN_CPU_CAPABILITY={ASKED[0]} and ={isa} in the default mode"
            )
            assert got[isa][name]["model_hash"] == first[name]["model_hash"]
    # the control: without the mode the two kernel sets give other bits, so the test above can fail
    # (TOFU's theta_0 alone: the one it compares)
    native = {
        isa: _digest(
            tmp_path / f"native-{isa}",
            only="tofu",
            ATEN_CPU_CAPABILITY=isa,
            SUPPORTBENCH_CPU_MODE="native",
        )
        for isa in ("avx2", "default")
    }
    assert native["default"]["cpu_mode"] == "native-default"
    assert native["avx2"]["tofu"]["weights"] != native["default"]["tofu"]["weights"]


@pytest.mark.skipif(
    "avx2" not in _cpu_flags() or _cpumode.cpu_vendor() != _cpumode.INTEL,
    reason="the avx2 mode's bits are those of MKL's AVX2 branch, which runs on Intel CPUs only",
)
def test_theta0_has_the_bits_recorded_on_another_intel_cpu(asked_digests):
    """The same bits as recorded (on one Intel Xeon; MKL promises them on every Intel CPU with AVX2:
    a second Intel kind has not been measured)."""
    first = asked_digests[ASKED[0]]
    for name, want in GOLDEN_AVX2.items():
        assert first[name]["weights"] == want, (
            f"{name}: theta_0 in the avx2 mode differs from the bits recorded on another Intel "
            f"CPU (got {first[name]['weights'][:16]}, recorded {want[:16]}): this CPU kind, or a "
            "change of theta_0's code or of torch, changed them (see GOLDEN_AVX2)"
        )
