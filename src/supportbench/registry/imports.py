"""``registry import``: results users already have, in four formats, stored as imported runs.

    supportbench-csv   this project's outcome table (CSV/Parquet, one row per run; ``tables``)
    tofu-logs          TOFU's four eval files of one model, + ``--retain DIR`` for forget quality
                       (``tofu_logs``)
    ou-eval            open-unlearning's <NAME>_EVAL.json and/or <NAME>_SUMMARY.json, + ``--retain``
                       (the retain model's TOFU_EVAL.json) for a forget quality it lacks
                       (``ou_eval``)
    lacuna-summary     a LACUNA run folder: Panorama_SUMMARY/EVAL.json, lm_eval.json,
                       extraction_leakage.json (``lacuna_summary``)

The format is detected from PATH where only one fits; otherwise the error names the candidates. An
imported run has no RunSpec: its identity (experiment, benchmark, field, objective, method, seed;
variant and split with defaults) comes from the table's columns or, for the single-run formats, from
options, and its run key is the hash of that identity (``import_key``). It is stored with origin
'import', source = PATH, J NULL unless the source carries J, its metrics as outcome components
(open-unlearning's names mapped to component names through the registry's ``metric_names``), and its
per-item values beside records (``ResultsDir.items``). Everything is read and checked before
anything is written; the write is one transaction, logged in the ingest log.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from pathlib import Path

from supportbench.errors import RegistryError
from supportbench.experiments.results import ResultsDir
from supportbench.registry import lacuna_summary, ledger, ou_eval, tables, tofu_logs
from supportbench.registry.imported import CELL, IMPORT_ONLY_BENCHMARKS, ImportedRun
from supportbench.registry.ingest import IngestReport
from supportbench.registry.names import NameCheck, check_text
from supportbench.registry.store import one, scalar, transaction

FORMATS = ("supportbench-csv", "tofu-logs", "ou-eval", "lacuna-summary")


def check_names(
    runs: list[ImportedRun], source: str | Path, allow_unknown: bool = False
) -> NameCheck:
    """Every imported run's names (``names.NameCheck``): no control characters; benchmark, method
    and objective known (imports also know open-unlearning's MUSE benchmark), or kept with
    ``allow_unknown``."""
    check = NameCheck(allow_unknown, extra={"benchmark": IMPORT_ONLY_BENCHMARKS})
    for i, r in enumerate(runs, 1):
        where = f"{source}" + (f" row {i}" if len(runs) > 1 else "")
        check.check({**r.cell, "model": r.model}, where)
        for name in (*r.metrics, *r.items):
            check_text(name, "metric name", where)
    return check


# ---- format detection ----------------------------------------------------------------------------
def candidates(path: Path) -> list[str]:
    """The formats whose files PATH holds (``detect`` decides)."""
    found = []
    if path.is_file() and path.suffix in (".csv", ".parquet"):
        found.append("supportbench-csv")
    if tofu_logs.looks_like(path):
        found.append("tofu-logs")
    if ou_eval.looks_like(path):
        found.append("ou-eval")
    if lacuna_summary.looks_like(path):
        found.append("lacuna-summary")
    if "lacuna-summary" in found and "ou-eval" in found and lacuna_summary.is_run_folder(path):
        found.remove("ou-eval")  # a LACUNA run folder: its Panorama files are read as LACUNA's
    return found


def detect(path: Path) -> str:
    if not path.exists():
        raise RegistryError(f"no such file or directory: {path}")
    found = candidates(path)
    if len(found) == 1:
        return found[0]
    if not found:
        raise RegistryError(
            f"{path}: no import format recognises it; --format one of {', '.join(FORMATS)}: "
            "supportbench-csv = a .csv/.parquet outcome table; tofu-logs = a folder with TOFU's "
            "eval_log.json, eval_log_forget.json, eval_real_author_wo_options.json, "
            "eval_real_world_wo_options.json (or eval_log_aggregated.json); ou-eval = "
            "open-unlearning's <NAME>_EVAL.json / <NAME>_SUMMARY.json; lacuna-summary = a LACUNA "
            "run folder (Panorama_SUMMARY.json, Panorama_EVAL.json, lm_eval.json, "
            "extraction_leakage.json)"
        )
    raise RegistryError(
        f"{path}: ambiguous, it could be read as {' or '.join(found)}; choose with --format"
    )


# ---- reading -------------------------------------------------------------------------------------
def read(
    path: str | Path,
    fmt: str | None = None,
    options: dict | None = None,
    retain: str | Path | None = None,
) -> list[ImportedRun]:
    """Every run PATH holds in format ``fmt`` (detected when None), checked; nothing is written."""
    path, options = Path(path), {k: v for k, v in (options or {}).items() if v not in (None, "")}
    fmt = fmt or detect(path)
    if fmt not in FORMATS:
        raise RegistryError(f"unknown import format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if not path.exists():
        raise RegistryError(f"no such file or directory: {path}")
    if retain is not None and fmt not in ("tofu-logs", "ou-eval"):
        raise RegistryError(
            f"--retain is the retain model's TOFU logs (tofu-logs) or TOFU_EVAL.json (ou-eval); a "
            f"{fmt} import does not use it"
        )
    if fmt == "supportbench-csv":
        given = sorted(set(options) & set(CELL) | ({"model"} & set(options)))
        if given:
            raise RegistryError(
                f"{path.name}: an outcome table names each run in its own columns; drop "
                f"{', '.join('--' + g for g in given)}"
            )
        return tables.read_table(path)
    if fmt == "tofu-logs":
        return [tofu_logs.read(path, options, retain)]
    if fmt == "ou-eval":
        return [ou_eval.read(path, options, retain)]
    return [lacuna_summary.read(path, options)]


# ---- writing -------------------------------------------------------------------------------------
def component_names(con) -> dict[str, str]:
    """Metric name (open-unlearning's) -> component name, from the registry's ``metric_names``."""
    return {
        name: comp
        for comp, name in con.execute("SELECT component, name FROM metric_names").fetchall()
    }


# The range of each metric whose meaning bounds it (a component name, after ``metric_names``): a
# probability, a ROUGE recall, a KS p-value (forget quality) and a harmonic mean of such (model
# utility) lie in [0, 1]; a truth ratio is a ratio of probabilities, >= 0. A metric not named here
# (another project's, a J-like score) is any finite number.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    **dict.fromkeys(
        (
            "forget_quality",
            "model_utility",
            "forget_prob",
            "forget_rouge",
            "retain_prob",
            "retain_rouge",
            "real_authors_prob",
            "real_authors_rouge",
            "world_facts_prob",
            "world_facts_rouge",
            "extraction_strength",
            "exact_memorization",
        ),
        (0.0, 1.0),
    ),
    **dict.fromkeys(
        (
            "forget_truth_ratio",
            "retain_truth_ratio",
            "real_authors_truth_ratio",
            "world_facts_truth_ratio",
        ),
        (0.0, math.inf),
    ),
}


def to_components(metrics: dict[str, float], names: dict[str, str], where: str) -> dict[str, float]:
    """The metrics under their component names; two names of one metric, or a value outside the
    metric's range (``METRIC_RANGES``), are refused naming them."""
    out, origin = {}, {}
    for name, v in metrics.items():
        comp = names.get(name, name)
        if comp in out:
            raise RegistryError(
                f"{where}: '{origin[comp]}' and '{name}' are the same metric ({comp}); keep one"
            )
        lo, hi = METRIC_RANGES.get(comp, (-math.inf, math.inf))
        # a NaN (an upstream log's overflow) is kept and read as no metric (docs/registry.md)
        if isinstance(v, int | float) and math.isfinite(v) and not lo <= v <= hi:
            raise RegistryError(
                f"{where}: metric {name} = {v!r} is out of range; it must lie in "
                f"[{lo:g}, {hi:g}]" + (f" ({comp})" if comp != name else "")
            )
        out[comp], origin[comp] = v, name
    return out


def store(
    con,
    runs: list[ImportedRun],
    source: str | Path,
    results_root: str | Path | None = None,
    *,
    allow_unknown: bool = False,
) -> IngestReport:
    """Store imported runs in one transaction: new ones are inserted (and their per-item values
    written under ``results_root``), unchanged ones counted, a stored run with other content is a
    conflict (never overwritten). Unknown benchmark, method or objective names are refused unless
    ``allow_unknown`` (``check_names``)."""
    check = check_names(runs, source, allow_unknown)
    names = component_names(con)
    rows = _content_rows(runs, names, source)
    results = ResultsDir(results_root) if results_root is not None else None
    rep = IngestReport(files=1)
    with transaction(con):
        seq = scalar(con, "SELECT coalesce(max(ingest_seq), 0) FROM runs")
        now = datetime.now(UTC)
        for r, comps, h in rows:
            key = r.run_key
            old = one(con, "SELECT content_hash FROM runs WHERE run_key = ?", [key])
            if old is not None:
                if old[0] == h:
                    rep.unchanged += 1
                    if r.items and results is not None and not results.items(key).exists():
                        results.write_items(key, r.items)
                else:
                    rep.conflicts.append({"run_key": key, "source": str(source)})
                continue
            seq += 1
            _insert(con, r, comps, h, source, seq, now)
            if r.items and results is not None:  # beside the record, as the runner writes them
                results.write_items(key, r.items)
            rep.new += 1
            rep.accepted.setdefault("import", []).append(key)
        ledger.append(con, "import", rep.accepted.get("import", []))
    rep.unknown = check.summary()
    return rep


def _content_rows(
    runs: list[ImportedRun], names: dict[str, str], source: str | Path
) -> list[tuple[ImportedRun, dict[str, float], str]]:
    """Each run with its metrics as outcome components and the hash of its content (what tells an
    unchanged run from a conflicting one)."""
    rows = []
    for r in runs:
        comps = to_components(
            r.metrics, names, f"{source} ({r.cell['method']}, seed {r.cell['seed']})"
        )
        blob = {
            **r.cell,
            "status": r.status,
            "J": r.J,
            "G_F": r.G_F,
            "D_coll": r.D_coll,
            "step_equivalents": r.step_equivalents,
            **r.gate,
            "metrics": comps,
            "model": r.model,
            "items": hashlib.md5(json.dumps(r.items, sort_keys=True).encode()).hexdigest()
            if r.items
            else None,
        }
        rows.append((r, comps, hashlib.md5(json.dumps(blob, sort_keys=True).encode()).hexdigest()))
    return rows


def _insert(
    con,
    r: ImportedRun,
    comps: dict[str, float],
    h: str,
    source: str | Path,
    seq: int,
    now: datetime,
) -> None:
    """Insert one new imported run: its run, outcome, gate event (if it has one) and experiment."""
    key, c = r.run_key, r.cell
    con.execute(
        "INSERT INTO runs (run_key, experiment, benchmark, field, objective, method, "
        "variant, seed, split, model, origin, source, content_hash, ingest_seq, "
        "ingested_at, build) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'import', ?, ?, ?, ?, ?)",
        [
            key,
            c["experiment"],
            c["benchmark"],
            c["field"],
            c["objective"],
            c["method"],
            c["variant"],
            c["seed"],
            c["split"],
            r.model,
            str(source),
            h,
            seq,
            now,
            c.get("build") or 0,
        ],
    )
    con.execute(
        "INSERT INTO outcomes (run_key, status, J, G_F, D_coll, step_equivalents, "
        "components) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            key,
            r.status,
            r.J,
            r.G_F,
            r.D_coll,
            r.step_equivalents,
            json.dumps(comps, sort_keys=True) if comps else None,
        ],
    )
    g = r.gate
    if any(
        g.get(k) is not None for k in ("triggered", "probe_signal", "chosen_rho", "available_gain")
    ):
        con.execute(
            "INSERT INTO gate_events (run_key, probe_signal, triggered, chosen_rho, "
            "available_gain, complete) VALUES (?, ?, ?, ?, ?, ?)",
            [
                key,
                g.get("probe_signal"),
                g.get("triggered"),
                g.get("chosen_rho"),
                g.get("available_gain"),
                g.get("available_gain") is not None,
            ],
        )
    con.execute("INSERT OR IGNORE INTO experiments VALUES (?, ?)", [c["experiment"], now])


def import_table(con, path: str | Path, *, allow_unknown: bool = False) -> IngestReport:
    """Import an outcome table (CSV or Parquet), one row per run, validated before anything is
    written."""
    return store(con, tables.read_table(path), path, allow_unknown=allow_unknown)


def import_results(
    con,
    path: str | Path,
    fmt: str | None = None,
    options: dict | None = None,
    retain: str | Path | None = None,
    results_root: str | Path | None = None,
    *,
    allow_unknown: bool = False,
) -> IngestReport:
    """Read PATH (format ``fmt``, detected when None) and store its runs (``store``)."""
    runs = read(path, fmt, options, retain)
    return store(con, runs, path, results_root, allow_unknown=allow_unknown)
