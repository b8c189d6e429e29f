"""``registry import``: results users already have, in four formats, stored as imported runs.

    supportbench-csv   this project's outcome table (CSV/Parquet, one row per run; ``tables``)
    tofu-logs          TOFU's four eval files of one model, + ``--retain DIR`` for forget quality (``tofu_logs``)
    ou-eval            open-unlearning's <NAME>_EVAL.json and/or <NAME>_SUMMARY.json, + ``--retain`` (the retain
                       model's TOFU_EVAL.json) for a forget quality it lacks (``ou_eval``)
    lacuna-summary     a LACUNA run folder: Panorama_SUMMARY/EVAL.json, lm_eval.json, extraction_leakage.json
                       (``lacuna_summary``)

The format is detected from PATH where only one fits; otherwise the error names the candidates. An imported
run has no RunSpec: its identity (experiment, benchmark, field, objective, method, seed; variant and split with
defaults) comes from the table's columns or, for the single-run formats, from options, and its run key is the
hash of that identity (``import_key``). It is stored with origin 'import', source = PATH, J NULL unless the
source carries J, its metrics as outcome components (open-unlearning's names mapped to component names through
the registry's ``metric_names``), and its per-item values beside records (``ResultsDir.items``). Everything is
read and checked before anything is written; the write is one transaction, logged in the ingest log.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from supportbench.errors import RegistryError
from supportbench.experiments.record import RecordError, check_levels
from supportbench.experiments.results import ResultsDir
from supportbench.registry import ledger
from supportbench.registry.ingest import IngestReport
from supportbench.registry.names import NameCheck, check_text
from supportbench.registry.store import one, scalar

FORMATS = ("supportbench-csv", "tofu-logs", "ou-eval", "lacuna-summary")
CELL = ("experiment", "benchmark", "field", "objective", "method", "variant", "seed", "split")
REQUIRED = ("experiment", "field", "objective", "method", "seed")    # benchmark: a format may know it
DEFAULTS = {"variant": "static", "split": "final"}


@dataclass
class ImportedRun:
    """One run as read from a source, before it is stored."""
    cell: dict                      # CELL -> value
    status: str = "ok"
    J: float | None = None
    G_F: float | None = None
    D_coll: float | None = None
    step_equivalents: float | None = None
    gate: dict = field(default_factory=dict)      # triggered, probe_signal, chosen_rho, available_gain
    metrics: dict[str, float] = field(default_factory=dict)   # metric name (open-unlearning's or own) -> value
    items: dict[str, list[float]] = field(default_factory=dict)
    model: str | None = None
    occurrence: int = 0             # the n-th row of the same cell in one table (duplicates are kept)
    skipped: list[str] = field(default_factory=list)   # source metrics with no finite value (named, not stored)

    @property
    def run_key(self) -> str:
        return import_key(self.cell, self.occurrence)


def import_key(cell: dict, occurrence: int = 0) -> str:
    """An imported run's key: its cell (and its theta_0 build when not 0, so keys of build 0 are the ones
    imports had before builds existed) and its occurrence among identical cells of one source."""
    ident = json.dumps([cell[c] for c in CELL] + ([cell["build"]] if cell.get("build") else []))
    return hashlib.sha256(f"import|{ident}|{occurrence}".encode()).hexdigest()


# benchmarks a source may be imported under without being registered here (open-unlearning's MUSE evaluator)
IMPORT_ONLY_BENCHMARKS = ("muse",)
# an inferred benchmark and the explicit --benchmark values that agree with it (natural_tofu is TOFU's data)
COMPATIBLE = {"tofu": ("tofu", "natural_tofu")}


def benchmark_names() -> list[str]:
    """Registered benchmark names (built-ins read from source, plugins' entry-point names; nothing imported)."""
    from supportbench._registry import declared_names, plugin_names

    return sorted(set(declared_names("supportbench.benchmarks", "register_benchmark", recursive=True))
                  | set(plugin_names("supportbench.benchmarks")))


def check_benchmark(given: str, inferred: str | None, fmt: str, source: Path) -> None:
    """An explicit --benchmark must be a registered name and agree with what the format says the source is."""
    known = benchmark_names()
    if given not in known and given not in IMPORT_ONLY_BENCHMARKS:
        import difflib

        near = difflib.get_close_matches(given, known + list(IMPORT_ONLY_BENCHMARKS), n=1)
        hint = f". Did you mean '{near[0]}'?" if near else "."
        raise RegistryError(f"--benchmark '{given}': no such benchmark{hint} Allowed: {', '.join(known)} (and, for "
                            f"imports only: {', '.join(IMPORT_ONLY_BENCHMARKS)})")
    if inferred and given not in COMPATIBLE.get(inferred, (inferred,)):
        raise RegistryError(f"--benchmark '{given}' contradicts the source: {source} is a {fmt} import of benchmark "
                            f"'{inferred}' (allowed: {', '.join(COMPATIBLE.get(inferred, (inferred,)))}); drop "
                            "--benchmark or fix it")


def identity(options: dict, fmt: str, source: Path, inferred: dict | None = None) -> dict:
    """The cell of a single-run import: options first, then what the format inferred from the source, then the
    defaults; the error names every required option that is missing. An explicit --benchmark is checked
    (``check_benchmark``)."""
    inferred = inferred or {}
    if options.get("benchmark") not in (None, ""):
        check_benchmark(options["benchmark"], inferred.get("benchmark"), fmt, source)
    cell = {c: options.get(c) if options.get(c) not in (None, "") else inferred.get(c, DEFAULTS.get(c))
            for c in CELL}
    missing = [c for c in ("benchmark", *REQUIRED) if cell[c] in (None, "")]
    if missing:
        raise RegistryError(f"{source}: a {fmt} import is one run; name it with "
                            f"{', '.join('--' + c for c in missing)} (its cell: --experiment, --benchmark, --field, "
                            f"--objective, --method, --seed; --variant {DEFAULTS['variant']} and --split "
                            f"{DEFAULTS['split']} by default)")
    cell["seed"] = whole(cell["seed"], "--seed")
    try:
        check_levels(str(source), variant=cell["variant"], split=cell["split"])
    except RecordError as exc:
        raise RegistryError(str(exc)) from None
    return cell


MAX_SEED = 2**63 - 1


def whole(v, what: str) -> int:
    """A seed or build: a whole number in 0..2^63-1 written as digits (an int as it is), or a
    ``RegistryError`` naming ``what`` and the value (no sign, underscores, exponent or blanks)."""
    if isinstance(v, int) and not isinstance(v, bool):
        n = v
    elif isinstance(v, str) and v.isascii() and v.isdigit():
        n = int(v)
    else:
        raise RegistryError(f"{what} must be a whole number in 0..2^63-1 written as digits, got "
                            f"{v!r}")
    if not 0 <= n <= MAX_SEED:
        raise RegistryError(f"{what} {v!r} is out of range; allowed: a whole number in 0..2^63-1")
    return n


def check_names(runs: list[ImportedRun], source: str | Path,
                allow_unknown: bool = False) -> NameCheck:
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


def finite(v, what: str) -> float:
    """A finite float, or a ``RegistryError`` naming ``what``."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise RegistryError(f"{what} must be a finite number, got {v!r}")
    return float(v)


# ---- format detection -----------------------------------------------------------------------------------
def candidates(path: Path) -> list[str]:
    """The formats whose files PATH holds (``detect`` decides)."""
    from supportbench.registry import lacuna_summary, ou_eval, tofu_logs

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
        found.remove("ou-eval")     # a LACUNA run folder: its Panorama files are read as LACUNA's
    return found


def detect(path: Path) -> str:
    if not path.exists():
        raise RegistryError(f"no such file or directory: {path}")
    found = candidates(path)
    if len(found) == 1:
        return found[0]
    if not found:
        raise RegistryError(
            f"{path}: no import format recognises it; --format one of {', '.join(FORMATS)}: supportbench-csv = a "
            ".csv/.parquet outcome table; tofu-logs = a folder with TOFU's eval_log.json, eval_log_forget.json, "
            "eval_real_author_wo_options.json, eval_real_world_wo_options.json (or eval_log_aggregated.json); "
            "ou-eval = open-unlearning's <NAME>_EVAL.json / <NAME>_SUMMARY.json; lacuna-summary = a LACUNA run "
            "folder (Panorama_SUMMARY.json, Panorama_EVAL.json, lm_eval.json, extraction_leakage.json)")
    raise RegistryError(f"{path}: ambiguous, it could be read as {' or '.join(found)}; choose with --format")


# ---- reading --------------------------------------------------------------------------------------------
def read(path: str | Path, fmt: str | None = None, options: dict | None = None,
         retain: str | Path | None = None) -> list[ImportedRun]:
    """Every run PATH holds in format ``fmt`` (detected when None), checked; nothing is written."""
    from supportbench.registry import lacuna_summary, ou_eval, tables, tofu_logs

    path, options = Path(path), {k: v for k, v in (options or {}).items() if v not in (None, "")}
    fmt = fmt or detect(path)
    if fmt not in FORMATS:
        raise RegistryError(f"unknown import format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if not path.exists():
        raise RegistryError(f"no such file or directory: {path}")
    if retain is not None and fmt not in ("tofu-logs", "ou-eval"):
        raise RegistryError(f"--retain is the retain model's TOFU logs (tofu-logs) or TOFU_EVAL.json (ou-eval); a "
                            f"{fmt} import does not use it")
    if fmt == "supportbench-csv":
        given = sorted(set(options) & set(CELL) | ({"model"} & set(options)))
        if given:
            raise RegistryError(f"{path.name}: an outcome table names each run in its own columns; drop "
                                f"{', '.join('--' + g for g in given)}")
        return tables.read_table(path)
    if fmt == "tofu-logs":
        return [tofu_logs.read(path, options, retain)]
    if fmt == "ou-eval":
        return [ou_eval.read(path, options, retain)]
    return [lacuna_summary.read(path, options)]


# ---- writing --------------------------------------------------------------------------------------------
def component_names(con) -> dict[str, str]:
    """Metric name (open-unlearning's) -> component name, from the registry's ``metric_names``."""
    return {name: comp for comp, name in con.execute("SELECT component, name FROM metric_names").fetchall()}


def to_components(metrics: dict[str, float], names: dict[str, str], where: str) -> dict[str, float]:
    out, origin = {}, {}
    for name, v in metrics.items():
        comp = names.get(name, name)
        if comp in out:
            raise RegistryError(f"{where}: '{origin[comp]}' and '{name}' are the same metric ({comp}); keep one")
        out[comp], origin[comp] = v, name
    return out


def store(con, runs: list[ImportedRun], source: str | Path,
          results_root: str | Path | None = None, *, allow_unknown: bool = False) -> IngestReport:
    """Store imported runs in one transaction: new ones are inserted (and their per-item values written under
    ``results_root``), unchanged ones counted, a stored run with other content is a conflict (never
    overwritten). Unknown benchmark, method or objective names are refused unless ``allow_unknown``
    (``check_names``)."""
    check = check_names(runs, source, allow_unknown)
    names = component_names(con)
    rows = []
    for r in runs:
        comps = to_components(r.metrics, names, f"{source} ({r.cell['method']}, seed {r.cell['seed']})")
        blob = {**r.cell, "status": r.status, "J": r.J, "G_F": r.G_F, "D_coll": r.D_coll,
                "step_equivalents": r.step_equivalents, **r.gate, "metrics": comps, "model": r.model,
                "items": hashlib.md5(json.dumps(r.items, sort_keys=True).encode()).hexdigest() if r.items else None}
        rows.append((r, comps, hashlib.md5(json.dumps(blob, sort_keys=True).encode()).hexdigest()))
    results = ResultsDir(results_root) if results_root is not None else None
    rep = IngestReport(files=1)
    con.execute("BEGIN TRANSACTION")
    try:
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
            c = r.cell
            con.execute("INSERT INTO runs (run_key, experiment, benchmark, field, objective, method, variant, seed, "
                        "split, model, origin, source, content_hash, ingest_seq, ingested_at, build) VALUES "
                        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'import', ?, ?, ?, ?, ?)",
                        [key, c["experiment"], c["benchmark"], c["field"], c["objective"], c["method"], c["variant"],
                         c["seed"], c["split"], r.model, str(source), h, seq, now, c.get("build") or 0])
            con.execute("INSERT INTO outcomes (run_key, status, J, G_F, D_coll, step_equivalents, components) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [key, r.status, r.J, r.G_F, r.D_coll, r.step_equivalents,
                         json.dumps(comps, sort_keys=True) if comps else None])
            g = r.gate
            if any(g.get(k) is not None for k in ("triggered", "probe_signal", "chosen_rho", "available_gain")):
                con.execute("INSERT INTO gate_events (run_key, probe_signal, triggered, chosen_rho, available_gain, "
                            "complete) VALUES (?, ?, ?, ?, ?, ?)",
                            [key, g.get("probe_signal"), g.get("triggered"), g.get("chosen_rho"),
                             g.get("available_gain"), g.get("available_gain") is not None])
            con.execute("INSERT OR IGNORE INTO experiments VALUES (?, ?)", [c["experiment"], now])
            if r.items and results is not None:   # beside the record, as the runner writes them
                results.write_items(key, r.items)
            rep.new += 1
            rep.accepted.setdefault("import", []).append(key)
        ledger.append(con, "import", rep.accepted.get("import", []))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    rep.unknown = check.summary()
    return rep


def import_results(con, path: str | Path, fmt: str | None = None, options: dict | None = None,
                   retain: str | Path | None = None, results_root: str | Path | None = None, *,
                   allow_unknown: bool = False) -> IngestReport:
    """Read PATH (format ``fmt``, detected when None) and store its runs (``store``)."""
    runs = read(path, fmt, options, retain)
    return store(con, runs, path, results_root, allow_unknown=allow_unknown)
