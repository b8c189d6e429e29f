"""Outcome tables: one row per run (CSV or Parquet), imported and exported (DESIGN "Outcome
import/export format"). An imported row is validated before anything is written; its run key is
derived from its identity columns (an imported run has no RunSpec).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from supportbench.errors import RegistryError
from supportbench.experiments.record import RecordError, check_levels
from supportbench.registry.imported import CELL, MAX_SEED, ImportedRun

REQUIRED_COLUMNS = (*CELL, "status")
# build: the theta_0 build, optional on import (default 0)
OUTCOME_COLUMNS = (*CELL, "J", "G_F", "D_coll", "status", "build")
DIRR_COLUMNS = ("triggered", "probe_signal", "chosen_rho", "available_gain", "step_equivalents")
# a column per outcome component (forget quality, model utility, precision, ...): metric:<name>
METRIC = "metric:"


def read_table(path: str | Path) -> list:
    """The runs of an outcome table (``imported.ImportedRun``), every row checked; the error names
    file and row. J, G_F and D_coll may be absent or empty (an imported run may carry metrics only);
    an ok row needs J or at least one ``metric:<name>`` value."""
    path = Path(path)
    df = _read_frame(path)
    metric_cols = [c for c in df.columns if c.startswith(METRIC)]
    runs, seen = [], {}
    # row numbers count data rows from 1 (the header is row 0)
    for i, r in enumerate(df.to_dicts(), 1):
        runs.append(_row_run(r, i, path.name, metric_cols, seen))
    return runs


def _read_frame(path: Path):
    """The table's rows as text (a polars DataFrame), read once the path is checked; it has rows,
    the required columns and no unknown one."""
    import polars as pl

    if not path.exists():
        raise RegistryError(f"no such file: {path}")
    check_table_path(path)
    if not path.is_file() or path.stat().st_size == 0:
        raise RegistryError(
            f"{path}: empty or not a file; an outcome table needs a header row with "
            f"{', '.join(REQUIRED_COLUMNS)}"
        )
    try:
        if path.suffix == ".parquet":
            df = pl.read_parquet(path)
            df = df.with_columns([pl.col(c).cast(pl.String) for c in df.columns])
        else:
            df = pl.read_csv(path, infer_schema=False)
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise RegistryError(
            f"{path}: cannot be read as {path.suffix[1:]}: {str(exc).splitlines()[0]}"
        ) from None
    if df.height == 0:
        raise RegistryError(f"{path}: no rows")
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise RegistryError(
            f"{path.name}: missing column(s) {missing}; required: {', '.join(REQUIRED_COLUMNS)}"
        )
    unknown = [
        c
        for c in df.columns
        if c not in OUTCOME_COLUMNS + DIRR_COLUMNS and not c.startswith(METRIC)
    ]
    if unknown:  # never dropped without a word
        raise RegistryError(
            f"{path.name}: unknown column(s) {unknown}; allowed: {', '.join(OUTCOME_COLUMNS)}, "
            f"{', '.join(DIRR_COLUMNS)}, and {METRIC}<name> for any other metric"
        )
    if METRIC in df.columns:
        raise RegistryError(
            f"{path.name}: a column named '{METRIC}' names no metric; use {METRIC}<name>"
        )
    return df


def _number(v, col: str, i: int, table: str, kind=float):
    """A cell as a number, strictly: a seed or build is digits (0..2^63-1), anything else a finite
    decimal number (no underscores, hex, inf or nan); the error names file, row, column and
    value."""
    from supportbench.registry.store import strict_float

    if v is None or v == "":
        return None
    if kind is int:
        if not (isinstance(v, str) and v.isascii() and v.isdigit()) or int(v) > MAX_SEED:
            raise RegistryError(
                f"{table} row {i}, column '{col}': {v!r} is not allowed; a "
                f"{col} is a whole number in 0..2^63-1 written as digits"
            )
        return int(v)
    x = strict_float(v)
    if x is None:
        raise RegistryError(
            f"{table} row {i}, column '{col}': {v!r} is not allowed; it "
            "must be a finite decimal number (e.g. 0.25, -1e-3; no "
            "underscores, hex, inf or nan)"
        )
    return x


def _boolean(v, i: int, table: str):
    """The cell 'triggered' as True, False or None (empty)."""
    if v in (None, ""):
        return None
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise RegistryError(f"{table} row {i}: 'triggered' must be true/false, got {v!r}")


def _row_run(r: dict, i: int, table: str, metric_cols: list[str], seen: dict) -> ImportedRun:
    """Row ``i`` of the table as an imported run, checked; ``seen`` counts the rows of each run
    identity so far (a repeated identity is another occurrence)."""
    status = (r["status"] or "").strip()
    for col in ("experiment", "benchmark", "field", "objective", "method", "variant", "split"):
        if not r[col]:
            raise RegistryError(f"{table} row {i}: '{col}' is empty")
    cell = {c: r[c] for c in CELL if c != "seed"}
    try:
        check_levels(
            f"{table} row {i}", status=status, variant=cell["variant"], split=cell["split"]
        )
    except RecordError as exc:
        raise RegistryError(str(exc)) from None
    seed = _number(r["seed"], "seed", i, table, int)
    if seed is None:
        raise RegistryError(f"{table} row {i}: 'seed' is empty")
    cell["seed"] = seed
    build = _number(r.get("build"), "build", i, table, int)
    cell = {c: cell[c] for c in CELL} | ({"build": build} if build else {})
    outcome = {col: _number(r.get(col), col, i, table) for col in ("J", "G_F", "D_coll")}
    metrics = {
        c[len(METRIC) :]: x
        for c in metric_cols
        if (x := _number(r.get(c), c, i, table)) is not None
    }
    if status == "ok" and outcome["J"] is None and not metrics:
        raise RegistryError(
            f"{table} row {i}: 'J' is empty and the row carries no {METRIC}<name> value; "
            "an ok row needs J or at least one metric"
        )
    gate = {
        col: _number(r.get(col), col, i, table)
        for col in ("probe_signal", "chosen_rho", "available_gain")
    }
    gate["triggered"] = _boolean(r.get("triggered"), i, table)
    ident = json.dumps([cell[c] for c in CELL] + [cell.get("build", 0)])
    occ = seen.get(ident, 0)
    seen[ident] = occ + 1
    return ImportedRun(
        cell=cell,
        status=status,
        **outcome,
        gate=gate,
        metrics=metrics,
        occurrence=occ,
        step_equivalents=_number(r.get("step_equivalents"), "step_equivalents", i, table),
    )


def check_table_path(path: str | Path) -> Path:
    """An outcome table's path: a .csv or .parquet file name (a ``RegistryError`` naming it
    otherwise)."""
    from supportbench.registry.store import check_path

    path = check_path(path, "outcome table", duckdb_file=False)
    if path.suffix not in (".csv", ".parquet") or path.is_dir():
        what = (
            "a folder"
            if path.is_dir()
            else f"format '{path.suffix}'"
            if path.suffix
            else "no suffix"
        )
        raise RegistryError(f"outcome table '{path}': {what}; it must be a .csv or .parquet file")
    return path


def export_table(con, path: str | Path, experiment: str | None = None) -> int:
    """Write the outcome table (one row per run: the outcome and DIR-R columns, and every numeric
    outcome component as a ``metric:<name>`` column) as CSV or Parquet; ``imports.import_table``
    reads it back whole."""
    from supportbench.registry.store import check_path, terminal_metrics

    path = check_path(check_table_path(path), "outcome table", writing=True, duckdb_file=False)
    import polars as pl

    if experiment is not None:
        from supportbench.registry.store import check_experiment

        check_experiment(con, experiment)
    cols = ", ".join(OUTCOME_COLUMNS + DIRR_COLUMNS)
    where = "WHERE experiment = $exp" if experiment else ""
    params = {"exp": experiment} if experiment else None
    # every run, J or not (results_all), and every metric it has (the metrics view) as a
    # metric:<name> column
    df = con.sql(
        f"SELECT run_key, {cols} FROM results_all {where} ORDER BY ingest_seq", params=params
    ).pl()
    long = con.sql(
        "SELECT m.run_key, m.name, m.value FROM metrics m JOIN results_all r USING (run_key) "
        f"{where} {'AND' if where else 'WHERE'} {terminal_metrics(con)}",
        params=params,
    ).pl()
    dup = long.filter(long.select("run_key", "name").is_duplicated()) if long.height else long
    if (
        dup.height
    ):  # a registry whose metrics view predates one-row-per-name: refuse rather than drop a value
        key, name = dup.row(0)[:2]
        raise RegistryError(
            f"run {key} has "
            f"{dup.filter((pl.col('run_key') == key) & (pl.col('name') == name)).height} values of "
            f"metric '{name}' (a component and its alias, e.g. forget_prob and forget_Q_A_Prob); "
            "open the registry once writable (`supportbench registry ingest`) to update its "
            "metrics view, which keeps the value under open-unlearning's name"
        )
    if long.height:
        wide = long.pivot(on="name", index="run_key", values="value")
        wide = wide.rename({c: f"{METRIC}{c}" for c in wide.columns if c != "run_key"})
        wide = wide.select("run_key", *sorted(c for c in wide.columns if c != "run_key"))
        df = df.join(wide, on="run_key", how="left", maintain_order="left")
    df = df.drop("run_key").with_columns(
        pl.col("seed").cast(pl.Int64), pl.col("build").cast(pl.Int64)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    (df.write_parquet if path.suffix == ".parquet" else df.write_csv)(tmp)
    os.replace(tmp, path)
    return df.height
