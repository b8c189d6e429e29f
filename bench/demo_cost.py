"""The cost of `make demo` as a multiple of the box workload (bench/_common.box_seconds, the team's
shared/tools/box_speed.py), both measured in this run: the box before and after the demo, the demo
in between (`supportbench demo` in a fresh results folder; `--cold` also in a fresh cache, so every
theta_0 is built). Target (issue 32): the demo within 600x the box workload.

usage: OMP_NUM_THREADS=1 python bench/demo_cost.py [--cold] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import box_seconds, result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cold", action="store_true", help="a fresh cache: every theta_0 is built")
    ap.add_argument(
        "--keep", default=None, help="write the demo's results here (default: a temporary folder)"
    )
    args = ap.parse_args()
    before = box_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(args.keep or Path(tmp) / "demo")
        cmd = [sys.executable, "-m", "supportbench.cli", "demo", "--results", str(results)]
        if args.cold:
            cmd += ["--cache", str(Path(tmp) / "cache")]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, env=env).returncode
        wall = time.perf_counter() - t0
    after = box_seconds()
    box = statistics.median([before, after])
    print(
        f"box workload: {before:.3f} s before, {after:.3f} s after; "
        f"demo ({'cold' if args.cold else 'warm'} cache, exit "
        f"{rc}): {wall:.0f} s = {wall / box:.0f}x the box workload"
    )
    if (
        rc != 0
    ):  # a demo that did not finish has no cost to compare: its time would flatter the ratio
        print(
            f"RESULT name=demo_box_ratio value=nan target=<=600 FAIL (the demo exited {rc})",
            flush=True,
        )
        sys.exit(rc)
    result("demo_box_ratio", wall / box, "<=", 600)


if __name__ == "__main__":
    main()
