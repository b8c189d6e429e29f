"""Outcome tables: one row per run (CSV or Parquet), imported and exported (DESIGN "Outcome
import/export format"). An imported row is validated before anything is written; its run key is derived
from its identity columns (an imported run has no RunSpec).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path

from supportbench.errors import RegistryError
from supportbench.experiments.record import RecordError, check_levels
from supportbench.registry import ledger
from supportbench.registry.ingest import IngestReport
from supportbench.registry.store import one, scalar

OUTCOME_COLUMNS = ("experiment", "benchmark", "field", "objective", "method", "variant", "seed", "split", "J", "G_F",
                   "D_coll", "status")
DIRR_COLUMNS = ("triggered", "probe_signal", "chosen_rho", "available_gain", "step_equivalents")
METRIC = "metric:"   # a column per outcome component (forget quality, model utility, precision, ...): metric:<name>


def import_table(con, path: str | Path) -> IngestReport:
    """Import an outcome table (CSV or Parquet), one row per run, validated before anything is written."""
    import polars as pl

    path = Path(path)
    if not path.exists():
        raise RegistryError(f"no such file: {path}")
    if path.suffix not in (".csv", ".parquet"):
        raise RegistryError(f"{path.name}: unknown table format '{path.suffix}'; allowed: .csv, .parquet")
    if not path.is_file() or path.stat().st_size == 0:
        raise RegistryError(f"{path}: empty or not a file; an outcome table needs a header row with "
                            f"{', '.join(OUTCOME_COLUMNS)}")
    try:
        if path.suffix == ".parquet":
            df = pl.read_parquet(path)
            df = df.with_columns([pl.col(c).cast(pl.String) for c in df.columns])
        else:
            df = pl.read_csv(path, infer_schema=False)
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise RegistryError(f"{path}: cannot be read as {path.suffix[1:]}: {str(exc).splitlines()[0]}") from None
    if df.height == 0:
        raise RegistryError(f"{path}: no rows")
    missing = [c for c in OUTCOME_COLUMNS if c not in df.columns]
    if missing:
        raise RegistryError(f"{path.name}: missing column(s) {missing}; required: {', '.join(OUTCOME_COLUMNS)}")
    unknown = [c for c in df.columns if c not in OUTCOME_COLUMNS + DIRR_COLUMNS and not c.startswith(METRIC)]
    if unknown:   # never dropped without a word
        raise RegistryError(f"{path.name}: unknown column(s) {unknown}; allowed: {', '.join(OUTCOME_COLUMNS)}, "
                            f"{', '.join(DIRR_COLUMNS)}, and {METRIC}<name> for any other metric")
    metric_cols = [c for c in df.columns if c.startswith(METRIC) and len(c) > len(METRIC)]
    rows = df.to_dicts()

    def num(v, col, i, kind=float, nullable=True):
        if v is None or v == "":
            if nullable:
                return None
            raise RegistryError(f"{path.name} row {i}: '{col}' is empty")
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise RegistryError(f"{path.name} row {i}: '{col}' must be numeric, got {v!r}") from None
        if not math.isfinite(x):
            raise RegistryError(f"{path.name} row {i}: '{col}' must be a finite number, got {v!r}")
        if kind is int:
            if x != int(x):
                raise RegistryError(f"{path.name} row {i}: '{col}' must be a whole number, got {v!r}")
            return int(x)
        return x

    def boolean(v, i):
        if v in (None, ""):
            return None
        s = str(v).strip().lower()
        if s in ("true", "1", "yes"):
            return True
        if s in ("false", "0", "no"):
            return False
        raise RegistryError(f"{path.name} row {i}: 'triggered' must be true/false, got {v!r}")

    parsed, seen = [], {}
    for i, r in enumerate(rows, 1):  # row numbers count data rows from 1 (the header is row 0)
        status = (r["status"] or "").strip()
        for col in ("experiment", "benchmark", "field", "objective", "method", "variant", "split"):
            if not r[col]:
                raise RegistryError(f"{path.name} row {i}: '{col}' is empty")
        p = {c: r[c] for c in ("experiment", "benchmark", "field", "objective", "method", "variant", "split")}
        try:
            check_levels(f"{path.name} row {i}", status=status, variant=p["variant"], split=p["split"])
        except RecordError as exc:
            raise RegistryError(str(exc)) from None
        p["seed"] = num(r["seed"], "seed", i, int, nullable=False)
        p["status"] = status
        for col in ("J", "G_F", "D_coll"):
            p[col] = num(r[col], col, i, nullable=status != "ok")
        for col in ("probe_signal", "chosen_rho", "available_gain", "step_equivalents"):
            p[col] = num(r.get(col), col, i)
        p["triggered"] = boolean(r.get("triggered"), i)
        p["metrics"] = {c[len(METRIC):]: x for c in metric_cols if (x := num(r.get(c), c, i)) is not None}
        ident = json.dumps([p[c] for c in OUTCOME_COLUMNS[:8]])
        occ = seen.get(ident, 0)
        seen[ident] = occ + 1
        p["run_key"] = hashlib.sha256(f"import|{ident}|{occ}".encode()).hexdigest()
        p["h"] = hashlib.md5(json.dumps(p, sort_keys=True).encode()).hexdigest()
        parsed.append(p)
    rep = IngestReport(files=1)
    con.execute("BEGIN TRANSACTION")
    try:
        seq = scalar(con, "SELECT coalesce(max(ingest_seq), 0) FROM runs")
        now = datetime.now(UTC)
        for p in parsed:
            old = one(con, "SELECT content_hash FROM runs WHERE run_key = ?", [p["run_key"]])
            if old is not None:
                if old[0] == p["h"]:
                    rep.unchanged += 1
                else:
                    rep.conflicts.append({"run_key": p["run_key"], "source": str(path)})
                continue
            seq += 1
            con.execute("INSERT INTO runs (run_key, experiment, benchmark, field, objective, method, variant, seed, "
                        "split, origin, source, content_hash, ingest_seq, ingested_at) VALUES "
                        "(?, ?, ?, ?, ?, ?, ?, ?, ?, 'import', ?, ?, ?, ?)",
                        [p["run_key"], p["experiment"], p["benchmark"], p["field"], p["objective"], p["method"],
                         p["variant"], p["seed"], p["split"], str(path), p["h"], seq, now])
            con.execute("INSERT INTO outcomes (run_key, status, J, G_F, D_coll, step_equivalents, components) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [p["run_key"], p["status"], p["J"], p["G_F"], p["D_coll"], p["step_equivalents"],
                         json.dumps(p["metrics"], sort_keys=True) if p["metrics"] else None])
            if any(p[c] is not None for c in ("triggered", "probe_signal", "chosen_rho", "available_gain")):
                con.execute("INSERT INTO gate_events (run_key, probe_signal, triggered, chosen_rho, available_gain, "
                            "complete) VALUES (?, ?, ?, ?, ?, ?)",
                            [p["run_key"], p["probe_signal"], p["triggered"], p["chosen_rho"], p["available_gain"],
                             p["available_gain"] is not None])
            con.execute("INSERT OR IGNORE INTO experiments VALUES (?, ?)", [p["experiment"], now])
            rep.new += 1
            rep.accepted.setdefault("import", []).append(p["run_key"])
        ledger.append(con, "import", rep.accepted.get("import", []))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return rep


def export_table(con, path: str | Path, experiment: str | None = None) -> int:
    """Write the outcome table (one row per run: the outcome and DIR-R columns, and every numeric outcome
    component as a ``metric:<name>`` column) as CSV or Parquet; ``import_table`` reads it back whole."""
    path = Path(path)
    if path.suffix not in (".csv", ".parquet"):
        raise RegistryError(f"{path.name}: unknown table format '{path.suffix}'; allowed: .csv, .parquet")
    import polars as pl

    cols = ", ".join(OUTCOME_COLUMNS + DIRR_COLUMNS)
    where = "WHERE experiment = $exp" if experiment else ""
    params = {"exp": experiment} if experiment else None
    df = con.sql(f"SELECT run_key, {cols} FROM results {where} ORDER BY ingest_seq", params=params).pl()
    # every numeric outcome component as a metric:<name> column (none is dropped)
    long = con.sql(f"SELECT c.run_key, c.name, c.value FROM components c JOIN results r USING (run_key) {where} "
                   "AND c.value IS NOT NULL" if where else
                   "SELECT run_key, name, value FROM components WHERE value IS NOT NULL", params=params).pl()
    if long.height:
        wide = long.pivot(on="name", index="run_key", values="value", aggregate_function="first")
        wide = wide.rename({c: f"{METRIC}{c}" for c in wide.columns if c != "run_key"})
        wide = wide.select("run_key", *sorted(c for c in wide.columns if c != "run_key"))
        df = df.join(wide, on="run_key", how="left", maintain_order="left")
    df = df.drop("run_key").with_columns(pl.col("seed").cast(pl.Int64))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    (df.write_parquet if path.suffix == ".parquet" else df.write_csv)(tmp)
    os.replace(tmp, path)
    return df.height
