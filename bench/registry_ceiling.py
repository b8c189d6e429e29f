"""How fast an ingest could be on this box today: bench/registry.py's ingest taken apart.

bench/registry.py times ``ingest`` of 100,000 synthetic records (target >= 20,000 records/s). An
ingest is two pipelines that overlap: the reader (read each file, check it against ``RunRecord``:
Python, one core) and DuckDB's side (parse, store, digest, log, commit). This bench times, on the
same files and in the same run:

- the reader alone: every chunk read and checked, nothing stored;
- DuckDB's side alone: the ingest with the chunks already read (the reader replaced by a lookup);
- the ingest as it is.

No ingest can take less than DuckDB's side alone, nor than the reader spread over every core,
nor than the CPU time of both parts spread over the cores: ``N / max(db_wall, reader_wall / cores,
(reader_cpu + db_cpu) / cores)`` records/s is the most any overlap of the two reaches here. The
first RESULT line says whether 20,000 records/s is within reach of this box today; the second, how
much of that ceiling the ingest reaches (target: 80 %). Each figure is from the run of median wall
time of three, the registry opened before the clock starts and closed after it, as in
bench/registry.py; ``box_seconds`` first, for the day's speed. Noise can put the ingest above the
ceiling (a share over 1) on a small N.

usage: OMP_NUM_THREADS=1 python bench/registry_ceiling.py
"""

from __future__ import annotations

import inspect
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import box_seconds, result  # noqa: E402

import supportbench.registry.ingest as ingest_module  # noqa: E402
from supportbench.registry import synthetic as syn  # noqa: E402
from supportbench.registry.names import NameCheck  # noqa: E402
from supportbench.registry.store import connect  # noqa: E402

N = 100_000
REPEATS = 3


def _cpu() -> float:
    """CPU seconds of this process so far, every thread's (DuckDB's included)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _timed(fn, setup=lambda: None) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn(setup())``, setup untimed, in the run of median wall time of
    ``REPEATS`` (both figures from that one run)."""
    runs = []
    for _ in range(REPEATS):
        arg = setup()
        c0, t0 = _cpu(), time.perf_counter()
        fn(arg)
        runs.append((time.perf_counter() - t0, _cpu() - c0))
    return sorted(runs)[len(runs) // 2]


def main() -> None:
    box = box_seconds()
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "res"
        (res / "runs").mkdir(parents=True)
        for r in syn.grid(N):  # setup only, as in bench/registry.py
            (res / "runs" / f"{r['run_key']}.json").write_text(json.dumps(r))
        os.sync()
        files = sorted(str(p) for p in (res / "runs").iterdir())
        chunk = inspect.signature(ingest_module.ingest).parameters["chunk"].default
        chunks = ingest_module._chunks(files, chunk)  # the ingest's own chunks
        tables: list = []

        def reader_alone(_) -> None:
            check = NameCheck(False)
            tables[:] = [ingest_module._read_all(c, check) for c in chunks]

        fresh = iter(range(10 * REPEATS))
        opened: list = []

        def registry():  # as bench/registry.py: opened (created) before the clock starts
            opened.append(connect(Path(tmp) / f"r{next(fresh)}.duckdb"))
            return opened[-1]

        def ingest(con) -> None:
            rep = ingest_module.ingest(con, res)
            assert rep.new == N

        read_wall, read_cpu = _timed(reader_alone)
        real_reader = ingest_module._read_all
        by_first_file = {t.column("filename")[0].as_py(): t for t in tables}
        ingest_module._read_all = lambda names, check=None: by_first_file[names[0]]
        try:
            db_wall, db_cpu = _timed(ingest, registry)
        finally:
            ingest_module._read_all = real_reader
        wall, cpu = _timed(ingest, registry)
        for con in opened:  # closed after the clock, as bench/registry.py leaves its own open
            con.close()
    floor = max(db_wall, read_wall / cores, (read_cpu + db_cpu) / cores)
    print(f"box_seconds {box:.2f}; {cores} cores; {N} records; each the median run of {REPEATS}")
    print(f"reader alone      {read_wall:6.2f} s wall {read_cpu:6.2f} s CPU")
    print(f"DuckDB side alone {db_wall:6.2f} s wall {db_cpu:6.2f} s CPU")
    print(f"ingest            {wall:6.2f} s wall {cpu:6.2f} s CPU = {N / wall:,.0f} records/s")
    print(f"no overlap of the two is faster than {floor:.2f} s = {N / floor:,.0f} records/s here")
    result("ingest_ceiling_records_per_s", N / floor, ">=", 20_000)
    result("ingest_share_of_ceiling", floor / wall, ">=", 0.8)


if __name__ == "__main__":
    main()
