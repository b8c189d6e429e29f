"""theta_0 of the demo's default recipes (TOFU, LACUNA and controlled presets, full sizes) built in
two fresh processes that differ in Python's hash seed, torch's thread count and the tokenizers'
parallelism: the number of presets whose weights and every cache file are byte-identical (target:
all 3). The test ``tests/integration/test_theta0_determinism.py`` checks the same with shortened
recipes; this is the check of the sizes the demo and the findings use. Minutes: both builds run at
once, one per core."""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import result  # noqa: E402

BENCHMARKS = ("tofu", "lacuna", "controlled")


def _build(cache: Path, hash_seed: str, threads: str, tok_parallel: str) -> subprocess.Popen:
    env = dict(
        os.environ,
        PYTHONHASHSEED=hash_seed,
        OMP_NUM_THREADS=threads,
        MKL_NUM_THREADS=threads,
        TOKENIZERS_PARALLELISM=tok_parallel,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "supportbench.harness.theta0_digest", str(cache)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def main():
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        procs = [_build(Path(d, "a"), "0", "1", "false"), _build(Path(d, "b"), "1", "2", "true")]
        out = []
        for p in procs:
            stdout, stderr = p.communicate()
            if p.returncode != 0:
                print(stderr[-3000:])
                result("theta0_identical_presets", 0, ">=", len(BENCHMARKS))
                return
            out.append(
                json.loads(next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))[7:])
            )
        wall = time.perf_counter() - t0
    a, b = out
    same = 0
    for name in BENCHMARKS:
        differ = sorted(
            f
            for f in a[name]["files"].keys() | b[name]["files"].keys()
            if a[name]["files"].get(f) != b[name]["files"].get(f)
        )
        ok = a[name]["weights"] == b[name]["weights"] and not differ
        same += ok
        print(
            f"{name:11s} theta_0 {a[name]['model_hash'][:12]} / {b[name]['model_hash'][:12]}  "
            f"{'identical' if ok else 'DIFFERENT: ' + ', '.join(differ[:5])}"
        )
    print(
        f"threads {a['threads']} vs {b['threads']}; both "
        f"builds, default recipes, cold: {wall:.0f} s"
    )
    result("theta0_identical_presets", same, ">=", len(BENCHMARKS))


if __name__ == "__main__":
    main()
