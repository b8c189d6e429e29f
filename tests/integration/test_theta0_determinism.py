"""theta_0 is a pure function of its spec: two fresh processes that differ in everything that must
not matter (Python's hash seed, torch's intra-op thread count, the tokenizers' parallelism) build
byte-identical cache entries for TOFU, LACUNA and the controlled separation. Before the fix, the
thread count changed the trained weights (ATen splits reductions per thread) and the controlled
LoRA's init came from torch's per-process random global seed.

Small honest sizes keep it short: fewer epochs (a difference shows from the first steps), the fewest
people / targets each benchmark allows (``harness.theta0_digest.SHORT_BUILDS``). The default recipes
the demo uses are checked the same way, in two fresh processes, by ``bench/theta0_determinism.py``
(minutes, so not here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import supportbench

pytestmark = pytest.mark.slow


def _build(cache: Path, hash_seed: str, threads: str, tok_parallel: str) -> subprocess.Popen:
    env = dict(
        os.environ,
        PYTHONHASHSEED=hash_seed,
        OMP_NUM_THREADS=threads,
        MKL_NUM_THREADS=threads,
        TOKENIZERS_PARALLELISM=tok_parallel,
    )
    src = str(Path(supportbench.__file__).resolve().parents[1])  # the children run this tree's code
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.Popen(
        [sys.executable, "-m", "supportbench.harness.theta0_digest", str(cache), "--short"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_theta0_is_identical_across_processes(tmp_path):
    # both at once: each build runs on one thread, so the two share two cores
    procs = [_build(tmp_path / "a", "0", "1", "false"), _build(tmp_path / "b", "1", "2", "true")]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr[-3000:]
        results.append(
            json.loads(next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))[7:])
        )
    a, b = results
    assert (a["threads"], b["threads"]) == (1, 2)  # the children really differ in thread count
    for name in ("tofu", "lacuna", "controlled"):
        assert a[name]["tokenizer"] == b[name]["tokenizer"], (
            f"{name}: tokenizer differs between processes"
        )
        assert a[name]["weights"] == b[name]["weights"], (
            f"{name}: theta_0 weights differ between processes"
        )
        differ = sorted(
            f
            for f in a[name]["files"].keys() | b[name]["files"].keys()
            if a[name]["files"].get(f) != b[name]["files"].get(f)
        )
        assert not differ, f"{name}: cache entry files differ: {differ}"
        # the build pins its own thread count and gives the process's back
        assert (a[name]["threads_after"], b[name]["threads_after"]) == (1, 2)
