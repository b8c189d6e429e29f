"""What enforcement on record costs (issue 35): the exact count of scalars changed inside and
outside the support, against theta_0, as a share of each run's wall time. Target: <= 2 %.

Reads the records of a results folder (default: the demo's, ``results/demo/runs``), where every run
measured its own ``compute.wall_s["enforce"]`` in the same process as the rest of the run, so the
ratio is one run's own; reports the median and the worst over the runs that carry it (every ok
run of this code: a selection method's support and a benchmark's own interface alike). Run
``make demo`` first, or pass a folder: ``python bench/enforcement.py RESULTS/runs``.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import result  # noqa: E402

TARGET = 0.02


def shares(folder: Path) -> list[float]:
    out = []
    for f in sorted(folder.rglob("*.json")):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        wall = ((rec.get("compute") or {}).get("wall_s")) or {}
        if rec.get("status") == "ok" and "enforce" in wall:
            total = sum(v for v in wall.values() if isinstance(v, int | float))
            out.append(wall["enforce"] / total if total > 0 else 0.0)
    return out


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "results/demo/runs")
    s = shares(folder)
    if not s:
        sys.exit(f"no ok record with an enforcement time under {folder}: run `make demo` first")
    print(f"{len(s)} runs under {folder}: enforcement share of the run's wall time")
    print(f"  median {statistics.median(s):.4%}, worst {max(s):.4%}")
    result("enforcement_share_median", statistics.median(s), "<=", TARGET)
    result("enforcement_share_worst", max(s), "<=", TARGET)


if __name__ == "__main__":
    main()
