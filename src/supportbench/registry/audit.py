"""Audit an experiment in the registry: what is missing, duplicated, failed, from the wrong split,
or governed by a decision frozen after its outcomes started (paper App. B: "Missing runs are not
imputed, and DIR-R settings are frozen before final outcomes are read").

Each check is an entry of ``CHECKS`` (name, summary line, the function that finds its rows);
``audit`` builds the tables they read and runs them in order. Expected grid: from the experiment's
spec when given; otherwise, per (experiment, benchmark, split), the full cross product of the levels
the rows show: builds x fields x objectives x (method, variant) x seeds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from supportbench.errors import CalibrationError, RegistryError
from supportbench.experiments.calibration import calibrate
from supportbench.experiments.plan import CELL, ExperimentSpec
from supportbench.registry import ledger
from supportbench.registry.store import scalar

CELL_COLS = ", ".join(CELL)


@dataclass(frozen=True)
class Check:
    """One audit check: its name (the report's key, ``rep.<name>``), the words of its summary line,
    and what finds its rows (each row one problem; none is a pass). Checks are data, as the tables'
    ``TABLES``: a new check is one entry of ``CHECKS`` and one function."""

    name: str
    title: str
    rows: Callable[[Audited], list[dict]]


@dataclass
class Audited:
    """What every check reads: the connection (with the temp tables ``arun``, ``expected`` and, with
    a spec, ``declared``) and the experiment's spec, if given."""

    con: object
    spec: ExperimentSpec | None


@dataclass
class AuditReport:
    """The audit's result: per check (``CHECKS``, in order) the rows it found; ``rep.missing`` etc.
    read them."""

    experiments: list[str]
    expected: int
    observed_cells: int
    findings: dict[str, list[dict]] = field(default_factory=dict)
    head: dict = field(
        default_factory=dict
    )  # the ingest log's last entry: note it to pin this registry
    # enforcement on record (issue 35): ok runs whose record carries the counts of scalars changed
    # inside and outside their support, of all ok runs
    enforced: dict = field(default_factory=dict)
    spec: str | None = None  # the spec whose grid is expected; None: the grid is inferred

    @property
    def grid(self) -> str:
        """Where the expected cells come from, in words."""
        if self.spec is not None:
            return f"the grid of experiment spec {self.spec!r}"
        return (
            "inferred from the runs (per benchmark and split, the cross product of the levels they "
            "show); pass --spec for the experiment's own grid"
        )

    def __getattr__(self, name: str) -> list[dict]:
        findings = self.__dict__.get("findings", {})
        if name in findings:
            return findings[name]
        raise AttributeError(
            f"AuditReport has no check {name!r}; checks: {', '.join(c.name for c in CHECKS)}"
        )

    @property
    def ok(self) -> bool:
        return not any(self.findings.values())

    def to_dict(self) -> dict:
        return {
            "experiments": self.experiments,
            "expected": self.expected,
            "observed_cells": self.observed_cells,
            **self.findings,
            "head": self.head,
            "enforced": self.enforced,
            "grid": self.grid,
            "ok": self.ok,
        }

    def text(self) -> str:
        lines = [
            f"audit of {', '.join(self.experiments) or '(no experiments)'}: {self.observed_cells} "
            f"of {self.expected} expected cells present -> {'PASS' if self.ok else 'FAIL'}",
            f"expected cells: {self.grid}",
        ]
        if self.head:
            lines.append(
                f"ingest log head: entry {self.head['seq']}, {self.head['hash']} (note it: a later "
                "audit that shows another hash at this entry means the registry was rewritten)"
            )
        if self.enforced:
            e = self.enforced
            lines.append(
                f"enforcement on record: {e['checked']} of {e['ok']} ok runs checked against "
                f"theta_0 ({e['outside']} with a change outside their support or interface; "
                "imported runs and older records carry no counts)"
            )
        for check in CHECKS:
            rows = self.findings.get(check.name, [])
            lines.append(f"{check.title}: {len(rows)}")
            for r in rows[:20]:
                lines.append("  " + ", ".join(f"{k}={v}" for k, v in r.items()))
            if len(rows) > 20:
                lines.append(f"  ... and {len(rows) - 20} more (use --json)")
        return "\n".join(lines)


def _rows(con, sql: str, params=None) -> list[dict]:
    cur = con.execute(sql, params or [])
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _recomputed_tau(con) -> list[dict]:
    """tau* of each DIR-R decision governing an audited final run, recomputed with the calibration
    rule on the signals and gains of the calibration records it cites (as the registry holds them):
    a decision whose tau is not what the rule gives on its own evidence was edited, or frozen from
    other records."""
    out = []
    decs = con.execute(
        """SELECT d.hash, d.tau, d.horizon, d.checkpoint, d.d, len(d.actions), """
        """d.admissible_lo,
            d.admissible_hi, d.content FROM decisions d WHERE d.tau IS NOT NULL AND d.hash """
        """IN (SELECT g.decision_hash
            FROM arun a JOIN gate_events g USING (run_key) WHERE a.variant = 'dirr' """
        """AND a.split <> 'calibration')
        ORDER BY 1"""
    ).fetchall()
    for h, tau, T, t, d, n_actions, lo, hi, content in decs:
        found = dict(
            (k, (s, gamma))
            for k, s, gamma in con.execute(
                """SELECT k.run_key, g.probe_signal,
                greatest(0, max(c.V) - max(c.V) FILTER (WHERE c.rho = 0))
            FROM calibration k JOIN gate_events g USING (run_key) JOIN candidates c USING (run_key)
            WHERE k.decision_hash = ? GROUP BY k.run_key, g.probe_signal""",
                [h],
            ).fetchall()
        )
        # in the decision's own order: the rule's sums are then the same floating-point sums
        order = [
            i.get("run_key")
            for i in (json.loads(content).get("calibration") or {}).get("instances", [])
        ]
        ev = [found.get(k, (None, None)) for k in order]
        if not ev or any(s is None or gamma is None for s, gamma in ev):
            continue  # missing evidence is reported by decision_evidence
        try:
            want = calibrate(
                [s for s, _ in ev],
                [gamma for _, gamma in ev],
                T=T,
                t=t,
                d=d,
                n_actions=n_actions,
                admissible=(lo, hi),
            ).tau
        except CalibrationError as exc:
            out.append(
                {
                    "hash": h,
                    "run_key": None,
                    "reason": f"the calibration rule fails on the cited records: {exc}",
                }
            )
            continue
        if want != tau:
            out.append(
                {
                    "hash": h,
                    "run_key": None,
                    "reason": f"tau {tau!r} is not what the calibration rule gives on "
                    f"the cited records ({want!r})",
                }
            )
    return out


def _claims(con, spec: ExperimentSpec | None) -> list[dict]:
    """The claims an experiment is judged on (experiments.claims) were registered before its
    outcomes and are the ones it names now: one claims decision per experiment, frozen before its
    first final run started and ingested no later than its first final run (the ingest log's order);
    every decision of the experiment cites its hash; the claims file it names (the spec's, else the
    registered decision's own source) still has that hash. An experiment that names none (no
    spec, nothing registered: a single ``supportbench run``) is not checked."""
    reg = _rows(
        con,
        """SELECT a.experiment, d.hash, json_extract_string(d.content, '$.claims_hash') """
        """AS claims_hash, json_extract_string(d.content, '$.source') AS source,
            d.frozen_at, (SELECT min(seq) FROM ingest_log l WHERE l.kind = 'decision' """
        """AND l.key = d.hash) AS seq
        FROM (SELECT DISTINCT experiment FROM arun) a JOIN decisions d
          ON json_extract_string(d.content, '$.kind') = 'claims'
         AND json_extract_string(d.content, '$.experiment') = a.experiment ORDER BY ALL""",
    )
    out: list[dict] = []
    exps = [spec.name] if spec is not None else sorted({r["experiment"] for r in reg})
    for exp in exps:
        mine = [r for r in reg if r["experiment"] == exp]
        if not mine:
            out.append(
                {
                    "experiment": exp,
                    "hash": None,
                    "reason": "no claims registered (a sweep registers them "
                    "before its first run: supportbench sweep)",
                }
            )
            continue
        if len({r["claims_hash"] for r in mine}) > 1:
            out.append(
                {
                    "experiment": exp,
                    "hash": ", ".join(r["hash"][:12] for r in mine),
                    "reason": "claims registered more than once, with different texts",
                }
            )
        first = mine[0]
        out += [
            {"experiment": exp, "hash": first["hash"], "reason": r}
            for r in _claims_order(con, exp, first)
        ]
        out += _claims_file(exp, first, spec)
        out += [
            {
                "experiment": exp,
                "hash": h,
                "reason": f"decision cites claims {c[:12] if c else 'none'}, not the "
                f"registered {first['claims_hash'][:12]}",
            }
            for h, c in con.execute(
                """
            SELECT hash, json_extract_string(content, '$.claims_hash') FROM decisions
            WHERE json_extract_string(content, '$.experiment') = $exp
              AND coalesce(json_extract_string(content, '$.kind'), 'dirr') <> 'claims'
              AND json_extract_string(content, '$.claims_hash') IS DISTINCT FROM $c ORDER BY 1""",
                {"exp": exp, "c": first["claims_hash"]},
            ).fetchall()
        ]
    return out


def _claims_file(exp: str, first: dict, spec: ExperimentSpec | None) -> list[dict]:
    """The claims file the experiment names (the spec's, else the one the registered decision came
    from) still hashes to what was registered; a file that is not there any more (a registry read
    on another machine) cannot be compared and is not a finding."""
    from supportbench.errors import SpecError
    from supportbench.experiments.claims import load

    name = spec.claims if spec is not None else first["source"]
    try:
        now = load(name).hash
    except SpecError:
        if spec is not None:
            raise
        return []
    if now == first["claims_hash"]:
        return []
    return [
        {
            "experiment": exp,
            "hash": first["hash"],
            "reason": f"the claims file the experiment names ({name or 'paper'}) hashes to "
            f"{now[:12]} now, but the runs were judged under {first['claims_hash'][:12]}: it "
            "changed after they were registered",
        }
    ]


# clock skew allowed between the machine that wrote a file and the registry's
SKEW = "INTERVAL 5 MINUTE"


def _clock(con) -> list[dict]:
    """Dates that cannot be true: a DIR-R decision frozen before the calibration runs it cites had
    finished (by their own records; one without a finish time cannot be checked, and says so), and
    a decision frozen, or a run started or finished, later than
    the registry's own clock when ingest accepted it (the ingest log's ``logged_at``)."""
    return _rows(
        con,
        """
        SELECT d.hash AS key, 'decision frozen at ' || d.frozen_at || CASE
            WHEN bool_or(p.finished_at IS NULL) THEN ' cites the calibration run ' """
        """|| c.run_key[:12] || ', whose record has no finish time: the order cannot be checked'
            ELSE ', before the calibration run ' || c.run_key[:12] || ' it cites finished (' """
        """|| max(p.finished_at) || ')' END AS reason
        FROM decisions d JOIN calibration c ON c.decision_hash = d.hash JOIN provenance p """
        """ON p.run_key = c.run_key
        WHERE d.hash IN (SELECT DISTINCT g.decision_hash FROM arun a JOIN gate_events g """
        """USING (run_key))
        GROUP BY d.hash, d.frozen_at, c.run_key
        HAVING bool_or(p.finished_at IS NULL) OR max(p.finished_at) > d.frozen_at
        UNION ALL
        SELECT d.hash, 'decision frozen at ' || d.frozen_at """
        f"""|| ', in the future of the registry''s clock when it '
               || 'was ingested (' || min(l.logged_at) || ')'
        FROM decisions d JOIN ingest_log l ON l.key = d.hash AND l.kind = 'decision'
        GROUP BY d.hash, d.frozen_at HAVING d.frozen_at > min(l.logged_at) + {SKEW}
        UNION ALL
        SELECT a.run_key, 'run dated ' || greatest(p.started_at, p.finished_at) """
        """|| ', in the future of the '
               || 'registry''s clock when it was ingested (' || min(l.logged_at) || ')'
        FROM arun a JOIN provenance p USING (run_key) JOIN ingest_log l ON l.key = a.run_key """
        f"""AND l.kind <> 'decision'
        GROUP BY a.run_key, p.started_at, p.finished_at
        HAVING greatest(p.started_at, p.finished_at) > min(l.logged_at) + {SKEW}
        ORDER BY ALL""",
    )


def claims_order(con, experiment: str | None, claims_hash: str) -> tuple | None:
    """(first final run's start as text, whether it started before the claims decision
    ``claims_hash`` was frozen, the first final run's ingest log entry); None without final runs,
    a start of None when none records one (imported rows). The one rule the audit and findings.md
    read."""
    rows = con.execute(
        """SELECT min(p.started_at)::VARCHAR, min(p.started_at) < d.frozen_at, min(l.seq)
        FROM runs a LEFT JOIN provenance p USING (run_key)
            LEFT JOIN ingest_log l ON l.key = a.run_key AND l.kind <> 'decision', decisions d
        WHERE ($exp IS NULL OR a.experiment = $exp) AND a.split <> 'calibration' AND d.hash = $h
        GROUP BY d.frozen_at""",
        {"exp": experiment, "h": claims_hash},
    ).fetchall()
    return rows[0] if rows else None


def _claims_order(con, experiment: str, claims: dict) -> list[str]:
    """Why a registered claims decision does not precede the final runs it judges: frozen after the
    first started, or ingested (the registry's own order) after the first was ingested."""
    order = claims_order(con, experiment, claims["hash"])
    if order is None:
        return []
    (started, late, seq), out = order, []
    if late:
        out.append(
            f"registered at {claims['frozen_at']}, after the first final run started ({started})"
        )
    if seq is not None and claims["seq"] is not None and claims["seq"] > seq:
        out.append(
            f"ingested as log entry {claims['seq']}, after the first final run (entry {seq})"
        )
    return out


def audit(con, experiment: str | None = None, spec: ExperimentSpec | None = None) -> AuditReport:
    """Build the temp tables every check reads (the experiment's runs ``arun``, the ``expected``
    grid, the declared seeds), then run each of ``CHECKS``."""
    filt = "WHERE experiment = $exp" if experiment else ""
    params = {"exp": experiment} if experiment else {}
    # every run, J or not (an imported run may carry metrics only); a registry written before
    # results_all existed and opened read-only (not migrated) has only results
    src = (
        "results_all"
        if scalar(con, "SELECT count(*) FROM duckdb_views() WHERE view_name = 'results_all'")
        else "results"
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE arun AS SELECT * FROM {src} {filt}", params)
    if not scalar(
        con,
        "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'arun' AND column_name = 'build'",
    ):
        con.execute(
            "ALTER TABLE arun ADD COLUMN build BIGINT DEFAULT 0"
        )  # written before builds existed
    exps = [r[0] for r in con.execute("SELECT DISTINCT experiment FROM arun ORDER BY 1").fetchall()]
    if (
        not exps and spec is None
    ):  # nothing to audit is not a pass (with a spec, every cell is missing)
        held = [
            r[0]
            for r in con.execute(f"SELECT DISTINCT experiment FROM {src} ORDER BY 1").fetchall()
        ]
        raise RegistryError(
            f"the registry holds no run of experiment {experiment!r}; it holds: "
            f"{', '.join(held) or 'no runs at all'}"
        )
    if spec is not None:
        import polars as pl  # noqa: F401  (arrow interchange for the expected grid)
        import pyarrow as pa

        cells = spec.expected_cells()
        grid = pa.table({c: [row[i] for row in cells] for i, c in enumerate(CELL)})
        con.register("expected_grid", grid)
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE expected AS SELECT DISTINCT {CELL_COLS} "
            "FROM expected_grid"
        )
        con.unregister("expected_grid")
    else:
        con.execute(f"""CREATE OR REPLACE TEMP TABLE expected AS
            WITH fo AS (SELECT DISTINCT experiment, benchmark, field FROM arun),
                 ob AS (SELECT DISTINCT experiment, benchmark, objective FROM arun),
                 mv AS (SELECT DISTINCT experiment, benchmark, split, method, variant FROM arun),
                 sd AS (SELECT DISTINCT experiment, benchmark, split, seed FROM arun),
                 bd AS (SELECT DISTINCT experiment, benchmark, build FROM arun)
            SELECT DISTINCT {CELL_COLS} FROM fo JOIN ob USING (experiment, benchmark)
                JOIN mv USING (experiment, benchmark) JOIN sd USING (experiment, benchmark, split)
                JOIN bd USING (experiment, benchmark)""")
    expected = scalar(con, "SELECT count(*) FROM expected")
    # present: the expected cells a run fills (a run outside the grid fills none of them)
    observed = scalar(
        con,
        f"SELECT count(*) FROM (SELECT {CELL_COLS} FROM arun INTERSECT SELECT {CELL_COLS} "
        "FROM expected)",
    )
    if spec is not None:  # the seeds the experiment declares per benchmark and split (wrong_split)
        declared = [
            (b, s, seed)
            for b in spec.benchmarks
            for s, seeds in spec.settings(b)["seeds"].items()
            for seed in seeds
        ]
        con.execute(
            "CREATE OR REPLACE TEMP TABLE declared (benchmark VARCHAR, split VARCHAR, seed BIGINT)"
        )
        if declared:
            con.executemany("INSERT INTO declared VALUES (?, ?, ?)", declared)
    audited = Audited(con, spec)
    return AuditReport(
        exps,
        expected,
        observed,
        {c.name: c.rows(audited) for c in CHECKS},
        ledger.head(con),
        _enforced(con),
        None if spec is None else spec.name,
    )


def _enforced(con) -> dict:
    """How many ok runs carry enforcement counts, of all ok runs, and how many of them changed
    anything outside their support (a run that did is stored as failed: this counts records that
    say otherwise)."""
    ok, checked, outside = con.execute(
        """SELECT count(*) FILTER (WHERE a.status = 'ok'),
               count(*) FILTER (WHERE a.status = 'ok' AND c.value IS NOT NULL),
               count(*) FILTER (WHERE a.status = 'ok' AND c.value > 0)
        FROM arun a LEFT JOIN components c ON c.run_key = a.run_key
            AND c.name = 'changed_outside'"""
    ).fetchall()[0]
    return {"ok": ok, "checked": checked, "outside": outside}


# ---- the checks, in the order the report lists them ----------------------------------------------
def _sql(text: str) -> Callable[[Audited], list[dict]]:
    """A check that is one query."""
    return lambda a: _rows(a.con, text)


def _failed(a: Audited) -> list[dict]:
    rows = _rows(
        a.con,
        f"SELECT run_key, {CELL_COLS}, status, error FROM arun WHERE status <> 'ok' ORDER BY ALL",
    )
    for r in rows:
        r["error"] = (r["error"] or "").splitlines()[0][:200] if r["error"] else None
    return rows


def _wrong_split(a: Audited) -> list[dict]:
    if a.spec is not None:  # the seeds the spec declares for each split
        return _rows(
            a.con,
            f"""SELECT run_key, {CELL_COLS}, 'seed not declared for this split' AS reason
            FROM arun a WHERE NOT EXISTS (SELECT 1 FROM declared d WHERE d.benchmark = a.benchmark
                AND d.split = a.split AND d.seed = a.seed) ORDER BY ALL""",
        )
    return _rows(
        a.con,
        f"""SELECT run_key, {CELL_COLS}, 'seed is a calibration seed' AS reason
        FROM arun a WHERE split <> 'calibration' AND EXISTS (SELECT 1 FROM arun c """
        """WHERE c.split = 'calibration'
          AND c.experiment = a.experiment AND c.benchmark = a.benchmark AND c.seed = a.seed) """
        """ORDER BY ALL""",
    )


def _decision_evidence(a: Audited) -> list[dict]:
    # a decision is checked against the calibration records it cites: each cited run is in the
    # registry as a calibration-split DIR-R run of the decision's benchmark and objective, ok, with
    # the cited signal s and gain gamma (recomputed from its candidates), the cited code
    # fingerprint, a seed among the decision's calibration seeds and no final or replication seed of
    # the experiment; every calibration seed is cited
    rows = _rows(
        a.con,
        """WITH gov AS (
            SELECT DISTINCT g.decision_hash AS hash, a.experiment FROM arun a JOIN gate_events g """
        """USING (run_key)
            WHERE a.variant = 'dirr' AND a.split <> 'calibration' AND g.decision_hash IS NOT NULL),
        dec AS (SELECT d.*, gov.experiment FROM decisions d JOIN gov USING (hash) """
        """WHERE d.tau IS NOT NULL),
        cited AS (SELECT dec.hash, dec.experiment, dec.benchmark AS d_benchmark, dec.objective """
        """AS d_objective,
                         dec.calibration_seeds, c.run_key, c.seed AS c_seed, c.s, c.gamma,
                         (SELECT split_part(x, ':', 2) """
        """FROM (SELECT unnest(CAST(json_extract(dec.content,
                            '$.calibration_runs') AS VARCHAR[])) AS x) """
        """WHERE split_part(x, ':', 1) = c.run_key
                          LIMIT 1) AS c_fingerprint
                  FROM dec JOIN calibration c ON c.decision_hash = dec.hash),
        gain AS (SELECT run_key, greatest(0, max(V) - max(V) FILTER (WHERE rho = 0)) AS gamma
                 FROM candidates GROUP BY run_key)
        SELECT x.hash, x.run_key, CASE
            WHEN r.run_key IS NULL THEN 'cited calibration run not in the registry'
            WHEN r.split <> 'calibration' OR r.variant <> 'dirr' """
        """THEN 'cited run is not a calibration DIR-R run'
            WHEN r.benchmark <> x.d_benchmark OR r.objective <> x.d_objective
                THEN 'cited run is of another benchmark or objective'
            WHEN o.status <> 'ok' THEN 'cited run did not finish ok'
            WHEN r.seed <> x.c_seed OR NOT list_contains(x.calibration_seeds, r.seed)
                THEN 'cited run''s seed is not among the calibration seeds'
            WHEN EXISTS (SELECT 1 FROM runs f WHERE f.experiment = x.experiment """
        """AND f.benchmark = r.benchmark
                         AND f.split <> 'calibration' AND f.seed = r.seed)
                THEN 'a calibration seed is also a final seed'
            WHEN g.probe_signal IS DISTINCT FROM x.s THEN 'cited signal s differs from the record'
            WHEN abs(gn.gamma - x.gamma) > 1e-9 * greatest(1, abs(x.gamma))
                THEN 'cited gain gamma differs from the record''s candidates'
            WHEN x.c_fingerprint IS DISTINCT FROM coalesce(p.fingerprint, '')
                THEN 'cited code fingerprint differs from the record'
            END AS reason
        FROM cited x LEFT JOIN runs r USING (run_key) LEFT JOIN outcomes o USING (run_key)
        LEFT JOIN gate_events g USING (run_key) LEFT JOIN gain gn USING (run_key)
        LEFT JOIN provenance p USING (run_key)
        WHERE reason IS NOT NULL
        UNION ALL
        SELECT dec.hash, NULL AS run_key, 'decision cites no calibration run' AS reason FROM dec
        WHERE NOT EXISTS (SELECT 1 FROM calibration c WHERE c.decision_hash = dec.hash)
        UNION ALL
        SELECT dec.hash, NULL, 'a calibration seed of the decision is cited by none of its runs' """
        """FROM dec
        WHERE EXISTS (SELECT 1 FROM (SELECT unnest(dec.calibration_seeds) AS s) u WHERE NOT EXISTS
                      (SELECT 1 FROM calibration c WHERE c.decision_hash = dec.hash """
        """AND c.seed = u.s))
        ORDER BY ALL""",
    )
    rows += _recomputed_tau(a.con)
    if a.spec is not None:  # the rules the experiment declared, not ones chosen after seeing a tau
        lo, hi = map(float, a.spec.admissible_range)
        rows += _rows(
            a.con,
            """SELECT DISTINCT d.hash, NULL AS run_key,
                'frozen under rules the experiment does not declare (admissible range ' """
            """|| d.admissible_lo || '-'
                || d.admissible_hi || ', selection ' || d.selection || ')' AS reason
            FROM decisions d JOIN gate_events g ON g.decision_hash = d.hash JOIN arun a """
            """USING (run_key)
            WHERE a.variant = 'dirr' AND a.split <> 'calibration' AND d.tau IS NOT NULL
              AND (d.admissible_lo <> $lo OR d.admissible_hi <> $hi OR d.selection <> $sel) """
            """ORDER BY 1""",
            {"lo": lo, "hi": hi, "sel": a.spec.selection},
        )
    return rows


CHECKS: list[Check] = [
    Check(
        "missing",
        "missing cells (not imputed)",
        _sql(f"SELECT {CELL_COLS} FROM expected EXCEPT SELECT {CELL_COLS} FROM arun ORDER BY ALL"),
    ),
    Check(
        "duplicates",
        "duplicated cells",
        _sql(
            f"SELECT {CELL_COLS}, count(*) AS n FROM arun GROUP BY ALL HAVING count(*) > 1 "
            "ORDER BY ALL"
        ),
    ),
    Check("failed", "failed runs", _failed),
    Check(
        "changed_outside",
        "ok runs whose record counts changes outside their support",
        _sql(
            f"""SELECT a.run_key, {", ".join("a." + c for c in CELL)}, c.value AS changed_outside
        FROM arun a JOIN components c ON c.run_key = a.run_key AND c.name = 'changed_outside'
        WHERE a.status = 'ok' AND c.value > 0 ORDER BY ALL"""
        ),
    ),
    Check("wrong_split", "runs from the wrong split", _wrong_split),
    Check(
        "post_hoc_decisions",
        "decisions frozen after the outcomes they govern",
        _sql(
            """SELECT d.hash, d.tau, d.frozen_at::VARCHAR AS frozen_at,
            min(p.started_at)::VARCHAR AS first_outcome_started, count(*) AS runs
        FROM decisions d JOIN arun a ON a.decision_hash = d.hash JOIN provenance p """
            """ON p.run_key = a.run_key
        GROUP BY d.hash, d.tau, d.frozen_at HAVING min(p.started_at) < d.frozen_at ORDER BY 1"""
        ),
    ),
    Check(
        "conflicts",
        "ingest conflicts",
        _sql(
            "SELECT run_key, source FROM ingest_conflicts c WHERE EXISTS "
            "(SELECT 1 FROM arun a WHERE a.run_key = c.run_key) ORDER BY ALL"
        ),
    ),
    # per variant: a DIR-R run's code includes DIR-R's orchestration, a static run's does not
    Check(
        "mixed_fingerprints",
        "methods whose records mix code fingerprints (stale records reused)",
        _sql("""SELECT a.experiment, a.benchmark, a.objective, a.method, a.variant,
            count(DISTINCT p.fingerprint) AS fingerprints, count(*) AS runs
        FROM arun a JOIN provenance p ON p.run_key = a.run_key WHERE p.fingerprint IS NOT NULL
        GROUP BY ALL HAVING count(DISTINCT p.fingerprint) > 1 ORDER BY ALL"""),
    ),
    # a final DIR-R record must carry its gate (the dirr block) and name a frozen decision
    Check(
        "unfrozen",
        "final DIR-R runs without a frozen decision (or without their dirr block)",
        _sql(
            f"""SELECT a.run_key, {", ".join("a." + c for c in CELL)},
            CASE WHEN g.run_key IS NULL THEN 'record has no dirr block' """
            """WHEN coalesce(g.unfrozen, false)
                 THEN 'marked unfrozen' ELSE 'names no decision' END AS reason
        FROM arun a LEFT JOIN gate_events g USING (run_key)
        WHERE a.variant = 'dirr' AND a.split <> 'calibration' AND (g.run_key IS NULL """
            """OR coalesce(g.unfrozen, false)
              OR g.decision_hash IS NULL) ORDER BY ALL"""
        ),
    ),
    Check(
        "undeclared_decisions",
        "DIR-R runs whose decision is not in the registry or disagrees with it",
        _sql(
            """SELECT a.run_key, a.experiment, a.benchmark, a.objective, a.seed,
            g.decision_hash, g.tau AS run_tau, d.tau AS decision_tau,
            CASE WHEN d.hash IS NULL """
            """THEN 'decision not in the registry (not in decisions/, or edited)'
                 WHEN g.tau IS NOT NULL AND g.tau <> d.tau THEN 'tau differs from the decision'
                 ELSE 'the decision was frozen for another benchmark, objective or T/t/d/rho_p' """
            """END AS reason
        FROM arun a JOIN gate_events g USING (run_key) JOIN runs r USING (run_key)
        LEFT JOIN decisions d ON d.hash = g.decision_hash
        WHERE a.variant = 'dirr' AND a.split <> 'calibration' AND g.decision_hash IS NOT NULL
          AND (d.hash IS NULL OR (g.tau IS NOT NULL AND g.tau <> d.tau)
               OR d.benchmark IS DISTINCT FROM a.benchmark OR d.objective IS DISTINCT """
            """FROM a.objective
               OR d.horizon IS DISTINCT FROM r.horizon OR d.checkpoint IS DISTINCT FROM r.checkpoint
               OR d.d IS DISTINCT FROM r.d OR d.rho_p IS DISTINCT FROM r.rho_p) ORDER BY ALL"""
        ),
    ),
    Check(
        "decisions_after_baselines",
        "decisions frozen after the baseline outcomes they name",
        _sql(
            """SELECT d.hash, d.benchmark, d.objective,
            d.frozen_at::VARCHAR AS frozen_at, min(p.started_at)::VARCHAR AS first_baseline_started,
            count(*) AS baseline_runs_started_before
        FROM decisions d JOIN arun a ON a.benchmark = d.benchmark AND a.objective = d.objective
            AND a.variant = 'static' AND a.split <> 'calibration'
            AND (list_contains(d.baselines, a.method) OR a.method = 'intervention_score')
            AND a.experiment = coalesce(json_extract_string(d.content, '$.experiment'), """
            """a.experiment)
        JOIN provenance p ON p.run_key = a.run_key
        WHERE p.started_at < d.frozen_at
        GROUP BY ALL ORDER BY 1"""
        ),
    ),
    Check(
        "undated",
        "records without a start time",
        _sql(
            f"""SELECT a.run_key, {", ".join("a." + c for c in CELL)} FROM arun a
        LEFT JOIN provenance p USING (run_key) WHERE a.origin = 'record' """
            """AND p.started_at IS NULL ORDER BY ALL"""
        ),
    ),
    # the controlled separation: its primary locator and learning rates are frozen (on calibration
    # targets) before any final run starts; a final run names its decision in ``benchmark.decision``
    Check(
        "controlled_unfrozen",
        "final controlled runs without a controlled decision frozen before they started",
        _sql(
            f"""SELECT a.run_key, {", ".join("a." + c for c in CELL)},
            json_extract_string(r.hyperparameters, '$."benchmark.decision"') AS decision_hash,
            d.frozen_at::VARCHAR AS frozen_at, p.started_at::VARCHAR AS started_at,
            CASE WHEN json_extract_string(r.hyperparameters, '$."benchmark.decision"') IS NULL
                      THEN 'no frozen controlled decision'
                 WHEN d.hash IS NULL """
            """THEN 'decision not in the registry (not in decisions/, or edited)'
                 ELSE 'run started before the decision was frozen' END AS reason
        FROM arun a JOIN runs r USING (run_key) LEFT JOIN provenance p USING (run_key)
        LEFT JOIN decisions d ON d.hash = json_extract_string(r.hyperparameters, """
            """'$."benchmark.decision"')
            AND json_extract_string(d.content, '$.kind') = 'controlled'
        WHERE a.benchmark = 'controlled' AND a.split <> 'calibration'
          AND (d.hash IS NULL OR p.started_at < d.frozen_at) ORDER BY ALL"""
        ),
    ),
    # one (experiment, benchmark, objective): its final DIR-R runs follow one decision (a re-frozen
    # decision reruns them all; two in the registry means records of a superseded decision were kept
    # or forged)
    Check(
        "competing_decisions",
        "experiments whose final DIR-R runs follow more than one decision",
        _sql(
            """SELECT a.experiment, a.benchmark, a.objective,
            count(DISTINCT g.decision_hash) AS decisions, list(DISTINCT g.decision_hash """
            """ORDER BY g.decision_hash)
                AS hashes
        FROM arun a JOIN gate_events g USING (run_key)
        WHERE a.variant = 'dirr' AND a.split <> 'calibration' AND g.decision_hash IS NOT NULL
        GROUP BY ALL HAVING count(DISTINCT g.decision_hash) > 1 ORDER BY ALL"""
        ),
    ),
    Check(
        "decision_evidence",
        "decisions not borne out by the calibration records they cite",
        _decision_evidence,
    ),
    Check(
        "ledger",
        "registry rows that disagree with its ingest log (edited after ingest)",
        lambda a: ledger.verify(a.con),
    ),  # the whole registry: an edit anywhere is evidence
    Check(
        "claims",
        "claims not registered before the outcomes they judge, or changed since",
        lambda a: _claims(a.con, a.spec),
    ),
    Check(
        "clock",
        "decisions and runs whose dates contradict their evidence or the registry's clock",
        lambda a: _clock(a.con),
    ),
]
