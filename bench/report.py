"""Generate every paper table from a registry of 1M synthetic outcome rows. Target: <= 5 s.

The registry is filled with SQL (not timed): LACUNA and Natural-TOFU runs of the 10 baselines,
Static-IV and DIR-R (with triggers and complete candidate sets) over 4 fields x 3 objectives x
seeds. Timed: reading the registry into Polars and rendering all 14 tables.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import result  # noqa: E402

from supportbench.registry.store import connect  # noqa: E402
from supportbench.reports.tables import Context, render_all  # noqa: E402

N = 1_000_000
METHODS = [
    "random",
    "activation",
    "wagle",
    "storage",
    "memflex",
    "fila",
    "ap_mlp",
    "grail",
    "activation_down",
    "projected_causal",
    "intervention_score",
    "intervention_score",
]  # the last one is DIR-R
FIELDS = ["Email_Address", "Phone_Number", "Birth_City", "Drivers_License"]


def fill(con) -> None:
    m = len(METHODS)
    con.execute(
        f"""CREATE TEMP TABLE g AS SELECT i,
        (i % {m})::INTEGER AS mi, ((i // {m}) % 4)::INTEGER AS fi, """
        f"""((i // {m * 4}) % 3)::INTEGER AS oi,
        (i // {m * 12}) AS cell FROM range({N}) t(i)"""
    )
    con.execute(
        f"""INSERT INTO runs SELECT md5(i::VARCHAR), 'bench', """
        f"""CASE WHEN cell % 2 = 0 THEN 'lacuna'
        ELSE 'natural_tofu' END, {FIELDS!r}[fi + 1], ['npo', 'simnpo', 'graddiff'][oi + 1], """
        f"""{METHODS!r}[mi + 1],
        CASE WHEN mi = {m - 1} THEN 'dirr' ELSE 'static' END, cell // 2,
        CASE WHEN cell % 10 = 9 THEN 'replication' ELSE 'final' END, 0.1, 200, 160, 20, 0.01, """
        f"""'x', NULL,
        'import', 'bench', md5(i::VARCHAR), i, now() FROM g"""
    )
    con.execute(
        """INSERT INTO outcomes SELECT md5(i::VARCHAR), 'ok', NULL, sin(i) + 1 + """
        """CASE WHEN mi = 11 THEN 0.05
        ELSE 0 END, 0, 0, NULL, 200, NULL FROM g"""
    )
    con.execute(
        """INSERT INTO gate_events SELECT md5(i::VARCHAR), NULL, 0.02, abs(cos(i)), cos(i) > 0, """
        """0.01,
        'evaluation', false, true, false, sin(i) + 1, 0.1 FROM g WHERE mi = 11"""
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        con = connect(Path(tmp) / "r.duckdb")
        t0 = time.perf_counter()
        fill(con)
        con.close()
        print(
            f"filled a registry with {N:,} outcome rows in "
            f"{time.perf_counter() - t0:.1f} s (not timed)"
        )
        ro = connect(Path(tmp) / "r.duckdb", read_only=True)
        t0 = time.perf_counter()
        ctx = Context.from_registry(ro)
        status = render_all(ctx, Path(tmp) / "tables")
        dt = time.perf_counter() - t0
    rendered = sum(v is None for v in status.values())
    print(
        f"{rendered} tables rendered, {len(status) - rendered} missing (no "
        f"controlled runs / calibration): {dt:.2f} s for {ctx.results.height:,} rows"
    )
    result("report_seconds_1M_rows", dt, "<=", 5.0)


if __name__ == "__main__":
    main()
