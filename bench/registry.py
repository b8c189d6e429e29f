"""Ingest 100k synthetic run records into a fresh registry, then audit the experiment.

Records are written first (not timed), in the real on-disk format; the median of three ingests into
fresh registries is reported. Targets: ingest >= 20k records/s,
audit <= 2 s.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import result  # noqa: E402

from supportbench.registry import synthetic as syn  # noqa: E402
from supportbench.registry.audit import audit  # noqa: E402
from supportbench.registry.ingest import ingest  # noqa: E402
from supportbench.registry.store import connect  # noqa: E402

N = 100_000
REPEATS = 3


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "res"
        t0 = time.perf_counter()
        (res / "runs").mkdir(parents=True)
        for r in syn.grid(
            N
        ):  # setup only: the real writer's per-file fsync is not what is measured
            (res / "runs" / f"{r['run_key']}.json").write_text(json.dumps(r))
        os.sync()  # let writeback finish so it does not compete with the timed ingest
        print(f"wrote {N} record files in {time.perf_counter() - t0:.1f} s (not timed)")
        times = []
        for i in range(REPEATS):  # each into a fresh registry
            con = connect(Path(tmp) / f"r{i}.duckdb")
            t0 = time.perf_counter()
            rep = ingest(con, res)
            times.append(time.perf_counter() - t0)
            assert rep.new == N
        t_ingest = statistics.median(times)
        t0 = time.perf_counter()
        a = audit(con, "synthetic")
        t_audit = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = ingest(con, res)
        t_re = time.perf_counter() - t0
    print(
        f"ingest  {N} records: median {t_ingest:.2f} s of {REPEATS} fresh registries "
        f"({', '.join(f'{t:.2f}' for t in times)}) = {N / t_ingest:,.0f} records/s"
    )
    print(f"re-ingest (all unchanged: {again.unchanged}) {t_re:.2f} s")
    print(f"audit   {a.expected} expected cells, {len(a.missing)} missing: {t_audit:.3f} s")
    result("ingest_records_per_s", N / t_ingest, ">=", 20_000)
    result("audit_seconds", t_audit, "<=", 2.0)


if __name__ == "__main__":
    main()
