"""Load run-record files and frozen decisions into the registry, idempotently; import/export tables.

Workers write one JSON file per run (atomically), so a reader never sees half a record. ``ingest``
runs in one transaction: a crash (even kill -9) leaves the database as it was, and rerunning completes
it. Re-ingesting unchanged files changes nothing. A record whose run_key is already stored with
different content replaces it only when it is the same run done again on purpose — the retry of a
failed run, a declared post-hoc completion (same J), or a rerun by other code (another fingerprint);
anything else is reported as a conflict (and kept in ``ingest_conflicts``), never overwritten.

Nothing invalid is stored: every record is checked before the transaction writes it — UTF-8 JSON
object, run_key equal to the hash of its own spec, known variant and split, whole seed, known status,
and a finite J, G_F and D_coll when the status is ``ok``; the error names the file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from supportbench.errors import DecisionError, RegistryError
from supportbench.experiments.decisions import verify_decision
from supportbench.experiments.spec import SPLITS, VARIANTS, spec_key
from supportbench.registry.store import one, scalar

STATUSES = ("ok", "failed", "diverged")
# One JSON parse per record: json_transform into this typed structure (unknown keys are ignored).
# spec.T and spec.t differ only by case, which json_transform cannot tell apart: they are read with
# one multi-path json_extract instead.
RECORD_STRUCTURE = json.dumps({
    "run_key": "VARCHAR", "status": "VARCHAR", "error": "VARCHAR",
    "fingerprint": {"hash": "VARCHAR"},
    "spec": {"experiment": "VARCHAR", "benchmark": "VARCHAR", "field": "VARCHAR", "objective": "VARCHAR",
             "method": "VARCHAR", "variant": "VARCHAR", "seed": "BIGINT", "split": "VARCHAR", "budget": "DOUBLE",
             "d": "INTEGER", "rho_p": "DOUBLE", "model": "VARCHAR",
             "hyperparameters": "JSON"},
    "outcome": {"J": "DOUBLE", "G_F": "DOUBLE", "D_coll": "DOUBLE", "components": "JSON"},
    "support": {"n_groups": "INTEGER", "cost": "BIGINT", "budget": "BIGINT", "groups": ["INTEGER"]},
    "dirr": {"decision_hash": "VARCHAR", "tau": "DOUBLE", "probe_signal": "DOUBLE", "triggered": "BOOLEAN",
             "chosen_rho": "DOUBLE", "selection": "VARCHAR", "post_hoc": "BOOLEAN", "complete": "BOOLEAN",
             "unfrozen": "BOOLEAN", "rho0_J": "DOUBLE", "candidates": "JSON", "candidates_J": "JSON"},
    "compute": {"step_equivalents": "DOUBLE", "wall_s": "JSON"},
    "provenance": {"supportbench": "VARCHAR", "git": "VARCHAR", "torch": "VARCHAR", "transformers": "VARCHAR",
                   "data_hash": "VARCHAR", "model_hash": "VARCHAR", "started_at": "VARCHAR",
                   "finished_at": "VARCHAR"},
})
OUTCOME_COLUMNS = ("experiment", "benchmark", "field", "objective", "method", "variant", "seed", "split", "J", "G_F",
                   "D_coll", "status")
DIRR_COLUMNS = ("triggered", "probe_signal", "chosen_rho", "available_gain", "step_equivalents")


@dataclass
class IngestReport:
    files: int = 0
    new: int = 0
    unchanged: int = 0
    conflicts: list[dict] = field(default_factory=list)
    decisions_new: int = 0
    decision_conflicts: list[dict] = field(default_factory=list)
    replaced: int = 0  # stored records replaced by a retry, a post-hoc completion or a rerun by other code

    def summary(self) -> str:
        s = (f"{self.files} record files: {self.new} new, {self.unchanged} unchanged, {len(self.conflicts)} conflicts; "
             f"{self.decisions_new} new decisions")
        if self.replaced:
            s += (f"\n  {self.replaced} stored records replaced by the same run done again (a retried failure, a "
                  "post-hoc completion, or a rerun by changed code)")
        for c in self.conflicts[:10]:
            s += (f"\n  conflict: run {c['run_key'][:12]} in {c['source']} differs from the stored record "
                  "(not overwritten)")
        for c in self.decision_conflicts[:10]:
            s += f"\n  conflict: decision {c['hash'][:12]} in {c['source']} differs from the stored one"
        return s


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _read_all(names: list[str]) -> list[bytes]:
    """Read and check one chunk (on the reader thread, while DuckDB ingests the previous chunk)."""
    texts = [_read(n) for n in names]
    for n, t in zip(names, texts):
        check_record(n, t)
    return texts


def _finite(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x)


def check_record(name: str, text: bytes) -> dict:
    """The parsed record, or a ``RegistryError`` naming the file and what is wrong."""
    try:
        rec = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RegistryError(f"{name}: not UTF-8 text (byte {exc.start}); nothing ingested") from None
    except json.JSONDecodeError as exc:
        raise RegistryError(f"truncated or invalid record file(s), nothing ingested: {name} (not valid JSON: "
                            f"{exc.msg} at line {exc.lineno})") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("spec"), dict) or not rec.get("run_key"):
        raise RegistryError(f"record file(s) without run_key or spec, nothing ingested: {name}")
    spec = rec["spec"]
    if spec.get("variant") not in VARIANTS:
        raise RegistryError(f"{name}: unknown variant {spec.get('variant')!r}; allowed: {', '.join(VARIANTS)}")
    if spec.get("split") not in SPLITS:
        raise RegistryError(f"{name}: unknown split {spec.get('split')!r}; allowed: {', '.join(SPLITS)}")
    if isinstance(spec.get("seed"), bool) or not isinstance(spec.get("seed"), int):
        raise RegistryError(f"{name}: seed must be a whole number, got {spec.get('seed')!r}")
    for k in ("experiment", "benchmark", "field", "objective", "method"):
        if not isinstance(spec.get(k), str) or not spec[k]:
            raise RegistryError(f"{name}: spec.{k} must be a non-empty string, got {spec.get(k)!r}")
    want = spec_key(spec)
    if rec["run_key"] != want:
        raise RegistryError(f"{name}: run_key {str(rec['run_key'])[:16]!r} does not match its spec (recomputed "
                            f"{want[:16]}...): the record was edited or its key invented; nothing ingested")
    if rec.get("status") not in STATUSES:
        raise RegistryError(f"unknown status in record file(s), nothing ingested: {name}: {rec.get('status')!r}; "
                            f"allowed: {', '.join(STATUSES)}")
    if rec["status"] == "ok":
        out = rec.get("outcome")
        bad = [k for k in ("J", "G_F", "D_coll") if not isinstance(out, dict) or not _finite(out.get(k))]
        if bad:
            got = {k: (out or {}).get(k) for k in bad} if isinstance(out, dict) else out
            raise RegistryError(f"{name}: status 'ok' but {', '.join(bad)} not a finite number ({got!r}); "
                                "a run without a finite outcome is 'failed' or 'diverged'")
    return rec


def _list(directory: Path) -> list[str]:
    if not directory.is_dir():
        return []
    out = []
    for e in os.scandir(directory):
        if e.name.endswith(".json") and not e.name.startswith("."):
            if not e.is_file():
                raise RegistryError(f"{e.path} is a directory, not a record file: move it out of {directory}")
            out.append(e.path)
    return sorted(out)


def ingest(con, results_dir: str | Path, *, chunk: int = 20_000) -> IngestReport:
    """Ingest ``<results_dir>/decisions/*.json`` and ``<results_dir>/runs/*.json`` into ``con``."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise RegistryError(f"no results directory '{results_dir}' (expected {results_dir}/runs/*.json)")
    if not (results_dir / "runs").is_dir() and not (results_dir / "decisions").is_dir():
        raise RegistryError(f"'{results_dir}' has neither runs/ nor decisions/: not a results directory")
    rep = IngestReport()
    run_files = _list(results_dir / "runs")
    dec_files = _list(results_dir / "decisions")
    rep.files = len(run_files)
    con.execute("BEGIN TRANSACTION")
    try:
        _ingest_decisions(con, dec_files, rep)
        # Read chunk k+1 on a thread while DuckDB (which releases the GIL) ingests chunk k.
        chunks = [run_files[s:s + chunk] for s in range(0, len(run_files), chunk)]
        with ThreadPoolExecutor(max_workers=1) as reader:
            pending = reader.submit(_read_all, chunks[0]) if chunks else None
            for k, names in enumerate(chunks):
                texts = pending.result()
                pending = reader.submit(_read_all, chunks[k + 1]) if k + 1 < len(chunks) else None
                _ingest_chunk(con, names, texts, rep)
        _derive(con)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return rep


def _ingest_decisions(con, files: list[str], rep: IngestReport) -> None:
    for f in files:
        try:
            dec = json.loads(_read(f).decode("utf-8"))
            if not isinstance(dec, dict):
                raise RegistryError(f"decision file {f} must hold a JSON object")
            verify_decision(dec, source=f)
        except UnicodeDecodeError:
            raise RegistryError(f"decision file {f} is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise RegistryError(f"truncated or invalid decision file {f}: {exc.msg}") from None
        except DecisionError as exc:
            raise RegistryError(str(exc)) from None
        blob = json.dumps(dec, sort_keys=True)
        old = one(con, "SELECT content FROM decisions WHERE hash = ?", [dec["hash"]])
        if old is not None:
            if json.dumps(json.loads(old[0]), sort_keys=True) != blob:
                rep.decision_conflicts.append({"hash": dec["hash"], "source": f})
            continue
        lo, hi = (dec.get("admissible_range") or [None, None])[:2]
        con.execute("INSERT INTO decisions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            dec["hash"], dec["tau"], dec["rho_p"], dec["d"], dec["t"], dec["T"], dec["actions"], lo, hi,
            dec["calibration_seeds"], dec["baselines"], dec["benchmark"], dec["objective"], dec["selection"],
            dec["frozen_at"], blob, f])
        for inst in (dec.get("calibration") or {}).get("instances", []):
            con.execute("INSERT OR IGNORE INTO calibration VALUES (?, ?, ?, ?, ?, ?)",
                        [dec["hash"], inst["run_key"], inst.get("field"), inst.get("seed"), inst["s"], inst["gamma"]])
        rep.decisions_new += 1


def _ingest_chunk(con, names: list[str], texts: list[bytes], rep: IngestReport) -> None:
    tbl = pa.table({"filename": names, "content": pa.array(texts, type=pa.binary()).cast(pa.string())})
    con.register("raw_chunk", tbl)
    try:  # one pass: validity, content hash and a single typed parse per record
        con.execute(f"""CREATE OR REPLACE TEMP TABLE st2 AS
            SELECT p.*, r2.content_hash AS old_h,
                   row_number() OVER (PARTITION BY p.run_key ORDER BY p.filename) AS k
            FROM (SELECT filename, h, ok, r, r.run_key AS run_key, r.status AS status,
                   tt[1]::INTEGER AS horizon, tt[2]::INTEGER AS checkpoint
            FROM (SELECT filename, md5(content) AS h, json_valid(content) AS ok,
                         CASE WHEN json_valid(content) THEN json_transform(content, '{RECORD_STRUCTURE}') END AS r,
                         CASE WHEN json_valid(content) THEN json_extract(content, ['$.spec.T', '$.spec.t']) END AS tt
                  FROM raw_chunk)) p LEFT JOIN runs r2 ON r2.run_key = p.run_key""")
    finally:
        con.unregister("raw_chunk")
    bad = con.execute("SELECT filename FROM st2 WHERE NOT ok LIMIT 5").fetchall()
    if bad:
        raise RegistryError("truncated or invalid record file(s), nothing ingested: "
                            + ", ".join(b[0] for b in bad) + " (not valid JSON)")
    bad = con.execute("SELECT filename FROM st2 WHERE run_key IS NULL OR r.spec IS NULL OR r.spec.field IS NULL "
                      "LIMIT 5").fetchall()
    if bad:
        raise RegistryError("record file(s) without run_key or spec, nothing ingested: " + ", ".join(b[0] for b in bad))
    bad = con.execute("SELECT filename, status FROM st2 WHERE status IS NULL OR status NOT IN "
                      "('ok', 'failed', 'diverged') LIMIT 5").fetchall()
    if bad:
        raise RegistryError("unknown status in record file(s), nothing ingested: "
                            + ", ".join(f"{f}: {s!r}" for f, s in bad) + f"; allowed: {', '.join(STATUSES)}")
    # the same run done again on purpose replaces the stored record: a retried failure, a declared post-hoc
    # completion that reproduces J, or a rerun by other code (its fingerprint differs)
    again = [r[0] for r in con.execute("""SELECT s.run_key FROM st2 s JOIN outcomes o USING (run_key)
        LEFT JOIN gate_events g USING (run_key) LEFT JOIN provenance p USING (run_key)
        WHERE s.old_h <> s.h AND s.k = 1 AND (o.status = 'failed'
           OR (coalesce(s.r.dirr.post_hoc, false) AND NOT coalesce(g.complete, false) AND s.r.outcome.J = o.J)
           OR (s.r.fingerprint.hash IS NOT NULL AND s.r.fingerprint.hash IS DISTINCT FROM p.fingerprint))
        """).fetchall()]
    if again:
        con.execute("CREATE OR REPLACE TEMP TABLE again AS SELECT unnest(?::VARCHAR[]) AS run_key", [again])
        for tbl in ("outcomes", "supports", "provenance", "gate_events", "candidates", "runs"):
            con.execute(f"DELETE FROM {tbl} WHERE run_key IN (SELECT run_key FROM again)")
        con.execute("UPDATE st2 SET old_h = NULL WHERE run_key IN (SELECT run_key FROM again)")
        rep.replaced += len(again)
    # classify against what is stored: new, unchanged, or conflicting (kept aside, never overwritten)
    rep.unchanged += scalar(con, "SELECT count(*) FROM st2 WHERE old_h = h")
    clash = con.execute("SELECT run_key, filename FROM st2 WHERE old_h <> h").fetchall()
    # the same run_key twice within the batch with different content is a conflict too
    clash += con.execute("SELECT run_key, filename FROM (SELECT run_key, filename, h, first_value(h) OVER "
                         "(PARTITION BY run_key ORDER BY filename) AS h1 FROM st2) WHERE h <> h1").fetchall()
    for rk, src in clash:
        rep.conflicts.append({"run_key": rk, "source": src})
    if clash:
        con.execute("INSERT OR IGNORE INTO ingest_conflicts SELECT run_key, filename, h, now() FROM st2 "
                    "WHERE old_h <> h")
    con.execute("CREATE OR REPLACE TEMP VIEW nw AS SELECT * FROM st2 WHERE old_h IS NULL AND k = 1")
    n = scalar(con, "SELECT count(*) FROM nw")
    rep.new += n
    if not n:
        return
    seq0 = scalar(con, "SELECT coalesce(max(ingest_seq), 0) FROM runs")
    con.execute(f"""INSERT INTO runs SELECT run_key, r.spec.experiment, r.spec.benchmark, r.spec.field,
        r.spec.objective, r.spec.method, r.spec.variant, r.spec.seed, r.spec.split, r.spec.budget, horizon,
        checkpoint, r.spec.d, r.spec.rho_p, r.spec.model, r.spec.hyperparameters, 'record', filename, h,
        {seq0} + row_number() OVER (ORDER BY filename), now() FROM nw""")
    con.execute("""INSERT INTO outcomes SELECT run_key, status, r.error, r.outcome.J, r.outcome.G_F, r.outcome.D_coll,
        r.outcome.components, r.compute.step_equivalents, r.compute.wall_s FROM nw""")
    con.execute("""INSERT INTO supports SELECT run_key, r.support.n_groups, r.support.cost, r.support.budget,
        r.support.groups FROM nw WHERE r.support IS NOT NULL""")
    con.execute("""INSERT INTO provenance SELECT run_key, r.provenance.supportbench, r.provenance.git,
        r.provenance.torch, r.provenance.transformers, r.provenance.data_hash, r.provenance.model_hash,
        TRY_CAST(r.provenance.started_at AS TIMESTAMPTZ), TRY_CAST(r.provenance.finished_at AS TIMESTAMPTZ),
        r.fingerprint.hash FROM nw""")
    con.execute("""INSERT INTO gate_events SELECT run_key, r.dirr.decision_hash, r.dirr.tau, r.dirr.probe_signal,
        r.dirr.triggered, r.dirr.chosen_rho, r.dirr.selection, r.dirr.post_hoc, r.dirr.complete, r.dirr.unfrozen,
        r.dirr.rho0_J, NULL FROM nw WHERE r.dirr IS NOT NULL""")
    con.execute("""INSERT INTO candidates SELECT run_key, je.key::DOUBLE, je.value::DOUBLE,
        json_extract(r.dirr.candidates_J, '$."' || je.key || '"')::DOUBLE
        FROM nw, json_each(nw.r.dirr.candidates) je WHERE r.dirr IS NOT NULL""")
    con.execute("INSERT OR IGNORE INTO experiments SELECT DISTINCT r.spec.experiment, now() FROM nw")


def _derive(con) -> None:
    """Available candidate-set gain (Eq. 20 per run): max_rho J(rho) - J(0) when every candidate is known."""
    con.execute("""UPDATE gate_events SET available_gain = a.gain FROM (
        SELECT run_key, max(J) - max(CASE WHEN rho = 0 THEN J END) AS gain FROM candidates GROUP BY run_key) a
        WHERE gate_events.run_key = a.run_key AND gate_events.complete AND gate_events.available_gain IS NULL""")


# ---- outcome tables ------------------------------------------------------------------------------------
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
        if status not in STATUSES:
            raise RegistryError(f"{path.name} row {i}: unknown status {r['status']!r}; allowed: {', '.join(STATUSES)}")
        for col in ("experiment", "benchmark", "field", "objective", "method", "variant", "split"):
            if not r[col]:
                raise RegistryError(f"{path.name} row {i}: '{col}' is empty")
        p = {c: r[c] for c in ("experiment", "benchmark", "field", "objective", "method", "variant", "split")}
        if p["variant"] not in VARIANTS:
            raise RegistryError(f"{path.name} row {i}: unknown variant {p['variant']!r}; "
                                f"allowed: {', '.join(VARIANTS)}")
        if p["split"] not in SPLITS:
            raise RegistryError(f"{path.name} row {i}: unknown split {p['split']!r}; allowed: {', '.join(SPLITS)}")
        p["seed"] = num(r["seed"], "seed", i, int, nullable=False)
        p["status"] = status
        for col in ("J", "G_F", "D_coll"):
            p[col] = num(r[col], col, i, nullable=status != "ok")
        for col in ("probe_signal", "chosen_rho", "available_gain", "step_equivalents"):
            p[col] = num(r.get(col), col, i)
        p["triggered"] = boolean(r.get("triggered"), i)
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
            con.execute("INSERT INTO outcomes (run_key, status, J, G_F, D_coll, step_equivalents) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        [p["run_key"], p["status"], p["J"], p["G_F"], p["D_coll"], p["step_equivalents"]])
            if any(p[c] is not None for c in ("triggered", "probe_signal", "chosen_rho", "available_gain")):
                con.execute("INSERT INTO gate_events (run_key, probe_signal, triggered, chosen_rho, available_gain, "
                            "complete) VALUES (?, ?, ?, ?, ?, ?)",
                            [p["run_key"], p["probe_signal"], p["triggered"], p["chosen_rho"], p["available_gain"],
                             p["available_gain"] is not None])
            con.execute("INSERT OR IGNORE INTO experiments VALUES (?, ?)", [p["experiment"], now])
            rep.new += 1
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return rep


def export_table(con, path: str | Path, experiment: str | None = None) -> int:
    """Write the outcome table (one row per run, DIR-R columns included) as CSV or Parquet."""
    path = Path(path)
    if path.suffix not in (".csv", ".parquet"):
        raise RegistryError(f"{path.name}: unknown table format '{path.suffix}'; allowed: .csv, .parquet")
    cols = ", ".join(OUTCOME_COLUMNS + DIRR_COLUMNS)
    where = "WHERE experiment = $exp" if experiment else ""
    df = con.sql(f"SELECT {cols} FROM results {where} ORDER BY ingest_seq",
                 params={"exp": experiment} if experiment else None).pl()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    (df.write_parquet if path.suffix == ".parquet" else df.write_csv)(tmp)
    os.replace(tmp, path)
    return df.height
