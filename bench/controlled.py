"""Wall time of the mini controlled experiment (paper §5.2) on this machine, cold: theta_pre, the
joint injection, the storage scores and 36 targets x 2 interfaces of NPO, then Table 1 from the
registry — as a share of the demo's 15-minute budget (target: at most 4 minutes)."""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import result  # noqa: E402


def main():
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "supportbench.cli",
                "run",
                "--benchmark",
                "controlled",
                "--T",
                "20",
                "--results",
                f"{d}/results",
                "--cache",
                f"{d}/cache",
                "--experiment",
                "bench-controlled",
                "--threads",
                "1",
            ],
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
    print(out.stdout.strip())
    if out.returncode != 0:
        print(out.stderr[-2000:])
    print(f"mini controlled experiment from a cold cache: {wall:.1f} s")
    result("controlled_minutes", wall / 60, "<=", 4)


if __name__ == "__main__":
    main()
