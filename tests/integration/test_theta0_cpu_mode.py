"""The same theta_0 bits whatever kernels the CPU offers (supportbench._cpumode, issue 32): TOFU's
and the controlled separation's theta_0, built in fresh processes that ask ATen for different
instruction sets (ATEN_CPU_CAPABILITY=avx2, =default, and =avx512 where the CPU has it), come out
byte-identical in the default CPU mode, which pins the kernels before torch loads; the cache entry
and every record name the mode. The control: without the mode (SUPPORTBENCH_CPU_MODE=native) the
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

pytestmark = pytest.mark.slow
ONLY = "tofu,controlled"


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def _digest(cache: Path, **env_vars) -> dict:
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
            ONLY,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))[7:])


@pytest.mark.skipif(
    "avx2" not in _cpu_flags(), reason="the default CPU mode (avx2) needs a CPU with AVX2"
)
def test_theta0_has_the_same_bits_whatever_isa_aten_is_asked_for(tmp_path):
    asked = ["avx2", "default"] + (["avx512"] if "avx512f" in _cpu_flags() else [])
    got = {isa: _digest(tmp_path / isa, ATEN_CPU_CAPABILITY=isa) for isa in asked}
    for isa, d in got.items():
        assert d["cpu_mode"] == "avx2", (
            f"ATEN_CPU_CAPABILITY={isa}: the process ran in {d['cpu_mode']}"
        )
    first = got[asked[0]]
    for isa in asked[1:]:
        for name in ONLY.split(","):
            assert got[isa][name]["weights"] == first[name]["weights"], (
                f"{name}: theta_0 differs between "
                f"ATEN_CPU_CAPABILITY={asked[0]} and ={isa} in the avx2 mode"
            )
            assert got[isa][name]["model_hash"] == first[name]["model_hash"]
    # the control: without the mode the two kernel sets give other bits, so the test above can fail
    native = {
        isa: _digest(
            tmp_path / f"native-{isa}", ATEN_CPU_CAPABILITY=isa, SUPPORTBENCH_CPU_MODE="native"
        )
        for isa in ("avx2", "default")
    }
    assert native["default"]["cpu_mode"] == "native-default"
    assert native["avx2"]["tofu"]["weights"] != native["default"]["tofu"]["weights"]
