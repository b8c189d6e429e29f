"""Load run-record files and frozen decisions into the registry, idempotently (outcome tables:
``tables``).

Workers write one JSON file per run (atomically), so a reader never sees half a record. ``ingest``
runs in one transaction: a crash (even kill -9) leaves the database as it was, and rerunning
completes it. Re-ingesting unchanged files changes nothing. A record whose run_key is already stored
with different content replaces it only when it is the same run done again on purpose — the retry of
a failed run, a declared post-hoc completion (same J), or a rerun by other code (another
fingerprint); anything else is reported as a conflict (and kept in ``ingest_conflicts``), never
overwritten.

Nothing invalid is stored: every record is parsed as a ``RunRecord`` (experiments/record.py) before
the transaction writes it — its types, run_key equal to the hash of its own spec, known variant,
split and status, whole seed, and a finite J, G_F and D_coll when the status is ``ok``; the error
names the file. The DuckDB parse structure is generated from the same type (``record_structure``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import types
import typing
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from supportbench._io import StrictJSONError, loads_json
from supportbench.errors import DecisionError, RegistryError
from supportbench.experiments.claims import is_claims, verify_claims
from supportbench.experiments.controlled_decision import is_controlled, verify_controlled
from supportbench.experiments.decisions import verify_decision
from supportbench.experiments.record import RecordError, RunRecord, records_with_shapes
from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec
from supportbench.registry import ledger
from supportbench.registry.names import NameCheck, check_text
from supportbench.registry.store import one, scalar, transaction


def duckdb_type(tp) -> Any:
    """The DuckDB ``json_transform`` structure of a record type: scalars by type, Structs as nested
    objects (their fields in declaration order), lists as ``[element]``, free-form mappings as
    JSON."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in args if a is not type(None)]
        return duckdb_type(inner)
    if origin is typing.Literal:
        return "VARCHAR"
    if origin is list:
        return [duckdb_type(args[0])]
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        hints = typing.get_type_hints(tp)
        return {f: duckdb_type(hints[f]) for f in tp.__struct_fields__}
    return _SCALARS.get(tp, "JSON")


_SCALARS = {str: "VARCHAR", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN"}


def record_structure() -> str:
    """One JSON parse per record: ``json_transform`` into this structure, generated from
    ``RunRecord`` (the spec's keys from ``RunSpec``). spec.T and spec.t differ only by case, which
    json_transform cannot tell apart: they are left out here and taken from the record the reader
    checked (``_read_all``)."""
    tree = duckdb_type(RunRecord)
    spec_types = typing.get_type_hints(RunSpec)
    tree["spec"] = {
        f.name: duckdb_type(spec_types[f.name])
        for f in dataclasses.fields(RunSpec)
        if f.name not in ("T", "t")
    }
    return json.dumps(tree)


RECORD_STRUCTURE = record_structure()


@dataclass
class IngestReport:
    files: int = 0
    new: int = 0
    unchanged: int = 0
    conflicts: list[dict] = field(default_factory=list)
    decisions_new: int = 0
    decision_conflicts: list[dict] = field(default_factory=list)
    replaced: int = 0  # stored records replaced (each logged in ``replacements``)
    # what this ingest accepted, by kind (for the ingest log, ``registry.ledger``)
    accepted: dict[str, list[str]] = field(
        default_factory=lambda: {"decision": [], "replacement": [], "run": []}, repr=False
    )
    unknown: str | None = None  # unknown names kept with --allow-unknown (NameCheck.summary)

    def summary(self) -> str:
        s = (
            f"{self.files} record files: {self.new} new, {self.unchanged} unchanged, "
            f"{len(self.conflicts)} conflicts; {self.decisions_new} new decisions"
        )
        if self.replaced:
            s += (
                f"\n  {self.replaced} stored records replaced by the same run done again (a "
                "retried failure, a post-hoc completion, or a rerun by changed code with "
                "--replace-reruns); each is logged in the registry's replacements table"
            )
        for c in self.conflicts[:10]:
            s += (
                f"\n  conflict: run {c['run_key'][:12]} in {c['source']} differs from the stored "
                "record (not overwritten; if it is a rerun by changed code, --replace-reruns "
                "replaces it, logged)"
            )
        for c in self.decision_conflicts[:10]:
            s += (
                f"\n  conflict: decision {c['hash'][:12]} in {c['source']} differs from the "
                "stored one"
            )
        if self.unknown:
            s += f"\n  {self.unknown}"
        return s


def _read(path: str) -> bytes:
    """The file's bytes, by the system calls alone (``open`` builds two file objects per file: a
    third of an ingest's reading); any error is ``open``'s own, the file read again by it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return _read_by_open(path)
    try:
        parts = []
        while part := os.read(fd, 1 << 16):
            parts.append(part)
    except OSError:  # a directory, say: read where open names it
        return _read_by_open(path)
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _read_by_open(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _read_all(names: list[str], check: NameCheck | None = None) -> pa.Table:
    """Read and check one chunk (on the reader thread, while DuckDB ingests the previous chunk):
    each record against ``RunRecord``, and its names (``check``: printable, known or allowed). The
    records are proven valid together (``records_with_shapes``); one it does not prove is checked
    on its own (``check_record``), which refuses it with the file's name, in the files' order.

    The chunk as the reader hands it to DuckDB: each file's name and text, the spec's T and t (the
    two keys ``json_transform`` cannot tell apart) and each record's rank among the chunk's records
    of its run key (``k``, 1: the first, in the files' sorted order), all read from the records the
    reader checked, so DuckDB parses each text once (and hashes it: ``_stage_chunk``)."""
    texts = [_read(n) for n in names]
    for n, t in zip(names, texts):
        if b"\\u" in t and _SURROGATE.search(t):
            _refuse_lone_surrogates(n, t)
    horizons, checkpoints, ranks = [], [], []
    seen: dict[str, int] = {}
    for n, t, (rec, shape) in zip(names, texts, records_with_shapes(texts, names)):
        if rec is None:
            rec = check_record(n, t)
        if check is not None:  # RunSpec refused control characters
            check.check_shape(rec.spec, n, shape)
        horizons.append(_whole(rec.spec.get("T")))
        checkpoints.append(_whole(rec.spec.get("t")))
        seen[rec.run_key] = rank = seen.get(rec.run_key, 0) + 1
        ranks.append(rank)
    return pa.table(
        {
            "filename": pa.array(names, pa.string()),
            # checked UTF-8 (``check_record`` refuses other bytes), so the cast holds
            "content": pa.array(texts, pa.binary()).cast(pa.string()),
            "horizon": pa.array(horizons, pa.int32()),
            "checkpoint": pa.array(checkpoints, pa.int32()),
            "k": pa.array(ranks, pa.int32()),
        }
    )


_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # an escaped UTF-16 surrogate, paired or not


def _refuse_lone_surrogates(name: str, text: bytes) -> None:
    """A lone surrogate escape (``\\udcff``: what ``json.dumps`` writes for a surrogate-escaped
    byte) is no Unicode text: Python reads it, DuckDB's JSON parser refuses the whole chunk. Refused
    here naming the file; a pair (one character beyond U+FFFF) passes."""
    try:
        json.dumps(json.loads(text), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end].encode("utf-16", "surrogatepass")[2:]
        raise RegistryError(
            f"truncated or invalid record file, nothing ingested: {name}: a lone UTF-16 "
            f"surrogate (\\u{int.from_bytes(bad, 'little'):04x}) in a text is not Unicode; "
            "write the text as valid UTF-8"
        ) from None
    except ValueError:  # not JSON: the record check names what is wrong
        return


def _whole(v: Any) -> int | None:
    """A spec's T or t as stored: a whole number (checked with the spec), else null."""
    return v if type(v) is int else None


def check_record(name: str, text: bytes) -> RunRecord:
    """The typed record (``experiments.record``), or a ``RegistryError`` naming the file and what is
    wrong."""
    try:
        return RunRecord.from_json(text, name)
    except RecordError as exc:
        raise RegistryError(f"truncated or invalid record file, nothing ingested: {exc}") from None


def ingest(
    con,
    results_dir: str | Path,
    *,
    chunk: int = 20_000,
    replace_reruns: bool = False,
    allow_unknown: bool = False,
) -> IngestReport:
    """Ingest a results directory's decisions and run records (``ResultsDir``) into ``con``.

    A stored record is replaced, and the replacement logged in ``replacements``, when the file is
    the same run done again: a retried failure (no outcome was stored), or a declared post-hoc
    completion that reproduces J. A rerun by other code (another fingerprint, possibly another
    outcome) replaces a stored outcome only when asked (``replace_reruns``; ``registry ingest
    --replace-reruns``); otherwise it is a conflict, kept aside and reported. A record whose
    benchmark, method or objective is not a known name is refused unless ``allow_unknown`` (then
    kept, and counted in the report); a name with a control character is always refused
    (``names``)."""
    from supportbench.registry.store import check_path

    results = ResultsDir(check_path(results_dir, "results directory", duckdb_file=False))
    if not results.root.is_dir():
        raise RegistryError(
            f"no results directory '{results.root}' (expected {results.runs}/*.json)"
        )
    if not results.is_results_dir():
        raise RegistryError(
            f"'{results.root}' has neither runs/ nor decisions/: not a results directory"
        )
    rep = IngestReport()
    run_files = results.record_files()
    dec_files = results.decision_files()
    rep.files = len(run_files)
    check = NameCheck(allow_unknown)
    with transaction(con), ledger.staging(con):
        _ingest_decisions(con, dec_files, rep)
        # Read chunk k+1 on a thread while DuckDB (which releases the GIL) ingests chunk k.
        chunks = _chunks(run_files, chunk)
        with ThreadPoolExecutor(max_workers=1) as reader:
            pending = reader.submit(_read_all, chunks[0], check) if chunks else None
            for k in range(len(chunks)):
                got = pending.result()
                pending = (
                    reader.submit(_read_all, chunks[k + 1], check) if k + 1 < len(chunks) else None
                )
                _ingest_chunk(con, got, rep, replace_reruns)
        _derive(con)
        # re-inserted as new rows, logged once, as replacements
        replaced = set(rep.accepted["replacement"])
        # after every insert of this ingest: the log vouches for it
        for kind, keys in rep.accepted.items():
            ledger.append(
                con,
                kind,
                [k for k in keys if kind != "run" or k not in replaced],
                staged=kind != "decision",
            )
    rep.unknown = check.summary()
    return rep


def _chunks(files: list[str], size: int) -> list[list[str]]:
    """``files`` in chunks of ``size``, but the first and the last a quarter of it: while the
    first is read and the last is ingested, the other side of the pipeline waits."""
    edge = max(1, size // EDGE)
    if len(files) <= 2 * edge:
        return [files[s : s + edge] for s in range(0, len(files), edge)]
    head, body, tail = files[:edge], files[edge:-edge], files[-edge:]
    return [head, *(body[s : s + size] for s in range(0, len(body), size)), tail]


EDGE = 4


def _ingest_decisions(con, files: list[str], rep: IngestReport) -> None:
    for f in files:
        try:
            dec = loads_json(_read(f).decode("utf-8"))
            if not isinstance(dec, dict):
                raise RegistryError(f"decision file {f} must hold a JSON object")
            if is_controlled(dec):
                verify_controlled(dec, source=f)
            elif is_claims(dec):
                verify_claims(dec, source=f)
            else:
                verify_decision(dec, source=f)
            _check_decision_extras(dec, f, dirr=not (is_controlled(dec) or is_claims(dec)))
        except UnicodeDecodeError:
            raise RegistryError(f"decision file {f} is not UTF-8 text") from None
        except StrictJSONError as exc:
            raise RegistryError(f"decision file {f}: {exc.msg}") from None
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
        if is_controlled(dec) or is_claims(dec):  # no DIR-R items; the content says the rest
            con.execute(
                "INSERT INTO decisions (hash, benchmark, objective, frozen_at, content, source) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    dec["hash"],
                    dec.get("benchmark"),
                    dec.get("objective"),
                    dec["frozen_at"],
                    blob,
                    f,
                ],
            )
            rep.decisions_new += 1
            rep.accepted["decision"].append(dec["hash"])
            continue
        lo, hi = (dec.get("admissible_range") or [None, None])[:2]
        con.execute(
            "INSERT INTO decisions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                dec["hash"],
                dec["tau"],
                dec["rho_p"],
                dec["d"],
                dec["t"],
                dec["T"],
                dec["actions"],
                lo,
                hi,
                dec["calibration_seeds"],
                dec["baselines"],
                dec["benchmark"],
                dec["objective"],
                dec["selection"],
                dec["frozen_at"],
                blob,
                f,
            ],
        )
        for inst in (dec.get("calibration") or {}).get("instances", []):
            con.execute(
                "INSERT OR IGNORE INTO calibration VALUES (?, ?, ?, ?, ?, ?)",
                [
                    dec["hash"],
                    inst["run_key"],
                    inst.get("field"),
                    inst.get("seed"),
                    inst["s"],
                    inst["gamma"],
                ],
            )
        rep.decisions_new += 1
        rep.accepted["decision"].append(dec["hash"])


def _check_decision_extras(dec: dict, source: str, dirr: bool = True) -> None:
    """What ingest reads from a decision beyond its hashed items (the calibration instances, the
    experiment) and its names: each a ``RegistryError`` naming the file and the field, not an
    internal error later."""
    import math

    for key in ("benchmark", "objective", "experiment", "selection"):
        if key in dec and dec[key] is not None:
            if not isinstance(dec[key], str) or not dec[key]:
                raise RegistryError(
                    f"decision file {source}: {key} = {dec[key]!r} must be a name (text)"
                )
            check_text(dec[key], key, f"decision file {source}")
    cal = dec.get("calibration")
    if cal is None or not dirr:  # only a DIR-R decision's calibration instances are read
        return
    insts = cal.get("instances", []) if isinstance(cal, dict) else None
    if not isinstance(insts, list):
        raise RegistryError(
            f"decision file {source}: calibration = {cal!r:.80} must be an object "
            "whose instances are a list of {run_key, field, seed, s, gamma}"
        )

    def finite(x) -> bool:
        return not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x)

    for i, inst in enumerate(insts):
        at = f"decision file {source}: calibration.instances[{i}]"
        if not isinstance(inst, dict):
            raise RegistryError(
                f"{at} = {inst!r:.80} must be an object {{run_key, field, seed, s, gamma}}"
            )
        if not isinstance(inst.get("run_key"), str) or not inst["run_key"]:
            raise RegistryError(f"{at}.run_key = {inst.get('run_key')!r} must be a run key (text)")
        for key in ("s", "gamma"):
            if not finite(inst.get(key)):
                raise RegistryError(f"{at}.{key} = {inst.get(key)!r} must be a finite number")
        seed = inst.get("seed")
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63
        ):
            raise RegistryError(f"{at}.seed = {seed!r} must be a whole number in 0..2^63-1")
        if inst.get("field") is not None and not isinstance(inst["field"], str):
            raise RegistryError(f"{at}.field = {inst['field']!r} must be a name (text)")


def _ingest_chunk(con, chunk: pa.Table, rep: IngestReport, replace_reruns: bool = False) -> None:
    """One chunk of records into the registry: parsed, the same runs done again replaced, the rest
    classified as new, unchanged or conflicting, and the new ones inserted."""
    _stage_chunk(con, chunk)
    # every record was checked against RunRecord on the reader thread (``check_record``) before this
    # chunk
    _replace_runs_done_again(con, rep, replace_reruns)
    if _classify_chunk(con, rep):
        _insert_new_runs(con)
        # their rows as stored now, for the ingest log: no later write of this ingest changes a
        # digested column but a replacement, which stores the run again as new in a later chunk
        # (``_derive`` sets available_gain, which the digest leaves out)
        ledger.take_digests(con, f"SELECT run_key FROM {_NEW}")


def _stage_chunk(con, chunk: pa.Table) -> None:
    """The temp table ``st2``: each record's content hash (``h``: DuckDB's md5 of the text, the
    md5 of the file's bytes) and typed parse (the records were checked on the reader: one
    ``json_transform``, no validation or second parse here), the content hash stored for its run
    key, and its rank among the chunk's records of that run key (``k``, counted by the reader)."""
    con.register("raw_chunk", chunk)
    try:
        con.execute(
            """CREATE OR REPLACE TEMP TABLE st2 AS
            SELECT p.*, r2.content_hash AS old_h
            FROM (SELECT filename, h, r, r.run_key AS run_key, r.status AS status, horizon,
                         checkpoint, k
            FROM (SELECT filename, md5(content) AS h, horizon, checkpoint, k, """
            f"""json_transform(content, '{RECORD_STRUCTURE}') AS r
                  FROM raw_chunk)) p LEFT JOIN runs r2 ON r2.run_key = p.run_key"""
        )
    finally:
        con.unregister("raw_chunk")


def _replace_runs_done_again(con, rep: IngestReport, replace_reruns: bool) -> None:
    """Delete the stored rows of the runs this chunk holds again and may replace, logging each
    replacement, so that they are inserted as new."""
    # the same run done again replaces the stored record, logged: a retried failure, a declared
    # post-hoc completion that reproduces J, or (only when asked) a rerun by other code (its
    # fingerprint differs); none can be unless the chunk holds a stored run key with other content
    if not scalar(con, "SELECT count(*) FROM st2 WHERE old_h <> h AND k = 1"):
        return
    con.execute(
        """CREATE OR REPLACE TEMP TABLE again AS SELECT * FROM (
        SELECT s.run_key, s.old_h, s.h, s.filename, CASE
            WHEN o.status = 'failed' THEN 'retry'
            WHEN coalesce(s.r.dirr.post_hoc, false) AND NOT coalesce(g.complete, false) """
        """AND s.r.outcome.J = o.J
                THEN 'post_hoc'
            WHEN s.r.fingerprint.hash IS NOT NULL AND s.r.fingerprint.hash IS DISTINCT """
        """FROM p.fingerprint
                THEN 'rerun' END AS reason
        FROM st2 s JOIN outcomes o USING (run_key) LEFT JOIN gate_events g USING (run_key)
        LEFT JOIN provenance p USING (run_key) WHERE s.old_h <> s.h AND s.k = 1)
        WHERE reason IN ('retry', 'post_hoc') OR (reason = 'rerun' AND $reruns)""",
        {"reruns": replace_reruns},
    )
    again = [r[0] for r in con.execute("SELECT run_key FROM again").fetchall()]
    if again:
        con.execute(
            "INSERT INTO replacements SELECT run_key, reason, old_h, h, filename, now() FROM again"
        )
        for tbl in ("outcomes", "supports", "provenance", "gate_events", "candidates", "runs"):
            con.execute(f"DELETE FROM {tbl} WHERE run_key IN (SELECT run_key FROM again)")
        con.execute("UPDATE st2 SET old_h = NULL WHERE run_key IN (SELECT run_key FROM again)")
        rep.replaced += len(again)
        rep.accepted["replacement"] += again


def _classify_chunk(con, rep: IngestReport) -> int:
    """Count the chunk's records as unchanged, conflicting (logged) or new (``_NEW``);
    the number of new ones."""
    # classify against what is stored: new, unchanged, or conflicting (kept aside, never
    # overwritten)
    same, changed, repeated, new = con.execute(
        "SELECT count(*) FILTER (WHERE old_h = h), count(*) FILTER (WHERE old_h <> h), "
        f"count(*) FILTER (WHERE k > 1), count(*) FILTER (WHERE {_NEW_ROWS}) FROM st2"
    ).fetchall()[0]  # all: DuckDB 2 keeps a result open after fetchone, refusing the next query
    rep.unchanged += same
    clash = (
        con.execute("SELECT run_key, filename FROM st2 WHERE old_h <> h").fetchall()
        if changed
        else []
    )
    if repeated:  # the same run_key twice within the batch with different content is a conflict
        clash += con.execute(
            "SELECT run_key, filename FROM (SELECT run_key, filename, h, first_value(h) OVER "
            "(PARTITION BY run_key ORDER BY filename) AS h1 FROM st2) WHERE h <> h1"
        ).fetchall()
    for rk, src in clash:
        rep.conflicts.append({"run_key": rk, "source": src})
    if changed:
        con.execute(
            "INSERT OR IGNORE INTO ingest_conflicts SELECT run_key, filename, h, now() FROM st2 "
            "WHERE old_h <> h"
        )
    rep.new += new
    if new:
        keys = con.sql(f"SELECT run_key FROM {_NEW}").to_arrow_table()["run_key"]
        rep.accepted["run"] += keys.to_pylist()
    return new


# the chunk's new runs: no stored record, the first of their run key in the chunk (a subquery, not a
# temp view: re-creating the view for every chunk cost some 14 ms of catalog work each time)
_NEW_ROWS = "old_h IS NULL AND k = 1"
_NEW = f"(SELECT * FROM st2 WHERE {_NEW_ROWS}) AS nw"


def _insert_new_runs(con) -> None:
    """Insert the new runs (``_NEW``) into every table a record fills."""
    seq0 = scalar(con, "SELECT coalesce(max(ingest_seq), 0) FROM runs")
    for sql in (
        f"""INSERT INTO runs SELECT run_key, r.spec.experiment, r.spec.benchmark, r.spec.field,
            r.spec.objective, r.spec.method, r.spec.variant, r.spec.seed, r.spec.split,
            r.spec.budget, horizon, checkpoint, r.spec.d, r.spec.rho_p, r.spec.model,
            r.spec.hyperparameters, 'record', filename, h,
            {seq0} + row_number() OVER (ORDER BY filename), now(), coalesce(r.spec.build, 0)
            FROM {_NEW}""",
        f"""INSERT INTO outcomes SELECT run_key, status, r.error, r.outcome.J, r.outcome.G_F,
            r.outcome.D_coll, r.outcome.components, r.compute.step_equivalents, r.compute.wall_s,
            to_json(r.outcome.curve) FROM {_NEW}""",
        f"""INSERT INTO supports SELECT run_key, r.support.n_groups, r.support.cost,
            r.support.budget, r.support.groups FROM {_NEW} WHERE r.support IS NOT NULL""",
        f"""INSERT INTO provenance SELECT run_key, r.provenance.supportbench, r.provenance.git,
            r.provenance.torch, r.provenance.transformers, r.provenance.data_hash,
            r.provenance.model_hash, TRY_CAST(r.provenance.started_at AS TIMESTAMPTZ),
            TRY_CAST(r.provenance.finished_at AS TIMESTAMPTZ), r.fingerprint.hash,
            r.provenance.cpu_mode FROM {_NEW}""",
        f"""INSERT INTO gate_events SELECT run_key, r.dirr.decision_hash, r.dirr.tau,
            r.dirr.probe_signal, r.dirr.triggered, r.dirr.chosen_rho, r.dirr.selection,
            r.dirr.post_hoc, r.dirr.complete, r.dirr.unfrozen, r.dirr.rho0_J, NULL
            FROM {_NEW} WHERE r.dirr IS NOT NULL""",
        f"""INSERT INTO candidates SELECT run_key, je.key::DOUBLE, je.value::DOUBLE,
            json_extract(r.dirr.candidates_J, '$."' || je.key || '"')::DOUBLE
            FROM {_NEW}, json_each(nw.r.dirr.candidates) je WHERE r.dirr IS NOT NULL""",
        f"INSERT OR IGNORE INTO experiments SELECT DISTINCT r.spec.experiment, now() FROM {_NEW}",
    ):
        con.execute(sql)


def _derive(con) -> None:
    """Available candidate-set gain (Eq. 20 per run): max_rho J(rho) - J(0) when every candidate is
    known."""
    con.execute(
        """UPDATE gate_events SET available_gain = a.gain FROM (
        SELECT run_key, max(J) - max(CASE WHEN rho = 0 THEN J END) AS gain FROM candidates """
        """GROUP BY run_key) a
        WHERE gate_events.run_key = a.run_key AND gate_events.complete """
        """AND gate_events.available_gain IS NULL"""
    )
