import json

import pytest

from supportbench.errors import RegistryError
from supportbench.experiments.decisions import freeze_decision
from supportbench.experiments.plan import ExperimentSpec
from supportbench.registry import synthetic as syn
from supportbench.registry.audit import audit
from supportbench.registry.imports import import_table
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect, scalar
from supportbench.registry.tables import export_table

FULL = {"0.0": 1.0, "0.01": 1.2, "0.025": 0.9, "0.05": 1.2, "0.1": 0.5}


def small_experiment(tmp_path, **over):
    recs = []
    for seed in (1, 2):
        for m in ("intervention_score", "random"):
            recs.append(syn.record(experiment="e", method=m, seed=seed, J=seed + (m == "random")))
        recs.append(
            syn.record(
                experiment="e",
                variant="dirr",
                seed=seed,
                J=1.2,
                candidates=FULL,
                triggered=True,
                probe_signal=0.3,
            )
        )
    recs.append(
        syn.record(experiment="e", variant="dirr", seed=7, split="calibration", candidates=FULL)
    )
    for r in recs:
        syn.write(tmp_path / "res", r)
    return recs


def snapshot(con):
    return con.execute("SELECT * FROM results ORDER BY run_key").fetchall()


def test_ingest_is_idempotent(tmp_path):
    recs = small_experiment(tmp_path)
    con = connect(tmp_path / "r.duckdb")
    rep = ingest(con, tmp_path / "res")
    assert (rep.new, rep.unchanged, rep.conflicts) == (len(recs), 0, [])
    before = snapshot(con)
    rep = ingest(con, tmp_path / "res")
    assert (rep.new, rep.unchanged) == (0, len(recs))
    assert snapshot(con) == before
    # derived values: candidates and the available gain (max J - J(0) = 0.2)
    assert scalar(con, "SELECT count(*) FROM candidates") == 5 * 3
    gain = scalar(
        con, "SELECT available_gain FROM gate_events g JOIN runs r USING (run_key) WHERE seed = 1"
    )
    assert gain == pytest.approx(0.2)
    assert scalar(con, "SELECT value FROM components WHERE name = 'forget_prob' LIMIT 1") == 0.1


def test_conflicting_record_is_reported_not_overwritten(tmp_path):
    recs = small_experiment(tmp_path)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, tmp_path / "res")
    changed = dict(recs[0], outcome={**recs[0]["outcome"], "J": 99.0})
    syn.write(tmp_path / "res", changed)
    rep = ingest(con, tmp_path / "res")
    assert [c["run_key"] for c in rep.conflicts] == [recs[0]["run_key"]]
    assert (
        scalar(con, "SELECT J FROM outcomes WHERE run_key = ?", [recs[0]["run_key"]])
        == recs[0]["outcome"]["J"]
    )
    assert audit(con, "e").conflicts[0]["run_key"] == recs[0]["run_key"]


@pytest.mark.parametrize("chunk", [2, 20_000])
def test_copies_of_a_run_key_in_one_ingest_store_the_first_by_name(tmp_path, chunk):
    """Files holding the same run key, in one chunk or across chunks: the first by file name is
    stored, an identical copy is not a run of its own, a changed copy is a conflict."""
    recs = small_experiment(tmp_path)
    runs = tmp_path / "res" / "runs"
    first, changed = recs[0]["run_key"], recs[1]["run_key"]
    (runs / "000-copy.json").write_text((runs / f"{first}.json").read_text())
    (runs / "zzz-changed.json").write_text(
        json.dumps(dict(recs[1], outcome={**recs[1]["outcome"], "J": 99.0}))
    )
    con = connect(tmp_path / "r.duckdb")
    rep = ingest(con, tmp_path / "res", chunk=chunk)
    assert rep.new == len(recs) and rep.files == len(recs) + 2
    assert [(c["run_key"], c["source"].rsplit("/", 1)[1]) for c in rep.conflicts] == [
        (changed, "zzz-changed.json")
    ]
    stored = dict(con.execute("SELECT run_key, source FROM runs").fetchall())
    assert stored[first].endswith("000-copy.json") and stored[changed].endswith(f"{changed}.json")
    assert (
        scalar(con, "SELECT J FROM outcomes WHERE run_key = ?", [changed])
        == recs[1]["outcome"]["J"]
    )
    assert scalar(con, "SELECT count(*) FROM ingest_log WHERE kind = 'run'") == len(recs)


def test_truncated_record_names_file_and_writes_nothing(tmp_path):
    recs = small_experiment(tmp_path)
    bad = tmp_path / "res" / "runs" / f"{recs[1]['run_key']}.json"
    bad.write_text(bad.read_text()[:40])
    con = connect(tmp_path / "r.duckdb")
    with pytest.raises(
        RegistryError, match=rf"truncated or invalid record file.*{recs[1]['run_key']}\.json"
    ):
        ingest(con, tmp_path / "res")
    assert scalar(con, "SELECT count(*) FROM runs") == 0


def test_unknown_status_in_record(tmp_path):
    syn.write(tmp_path / "res", dict(syn.record(), status="weird"))
    with pytest.raises(
        RegistryError, match=r"unknown status .*'weird'; allowed: ok, failed, diverged"
    ):
        ingest(connect(tmp_path / "r.duckdb"), tmp_path / "res")


def test_failed_run_stays_visible(tmp_path):
    syn.write(tmp_path / "res", syn.record(experiment="e", status="failed", seed=1))
    syn.write(tmp_path / "res", syn.record(experiment="e", seed=2))
    con = connect(tmp_path / "r.duckdb")
    ingest(con, tmp_path / "res")
    assert scalar(con, "SELECT count(*) FROM results WHERE status = 'failed' AND J IS NULL") == 1
    rep = audit(con, "e")
    assert (
        len(rep.failed) == 1
        and rep.failed[0]["error"] == "RuntimeError: synthetic failure"
        and not rep.ok
    )


def test_audit_finds_deleted_duplicated_posthoc_and_wrong_split(tmp_path):
    recs = small_experiment(tmp_path)
    res = tmp_path / "res"
    (res / "runs" / f"{recs[0]['run_key']}.json").unlink()  # a deleted run
    syn.write(
        res, syn.record(experiment="e", method="random", seed=2, J=5, extra_key="rerun")
    )  # same cell twice
    syn.write(
        res, syn.record(experiment="e", method="random", seed=7, J=5)
    )  # calibration seed among finals
    dec = freeze_decision(
        res / "decisions",
        tau=0.02,
        rho_p=0.01,
        d=20,
        t=160,
        T=200,
        actions=[0, 0.01],
        admissible_range=[0.2, 0.8],
        calibration_seeds=[7],
        baselines=[],
        benchmark="natural_tofu",
        objective="npo",
        selection="evaluation",
        calibration_runs=[],
    )
    syn.write(
        res,
        syn.record(
            experiment="e",
            variant="dirr",
            seed=3,
            decision_hash=dec["hash"],
            started_at="2020-01-01T00:00:00+00:00",
            candidates={"0.0": 1.0},
        ),
    )  # before frozen_at
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    rep = audit(con, "e")
    missing = {(m["method"], m["seed"], m["variant"]) for m in rep.missing}
    assert ("intervention_score", 1, "static") in missing
    assert [(d["method"], d["seed"], d["n"]) for d in rep.duplicates] == [("random", 2, 2)]
    assert [(w["method"], w["seed"]) for w in rep.wrong_split] == [("random", 7)]
    assert [p["hash"] for p in rep.post_hoc_decisions] == [dec["hash"]]
    assert not rep.ok


def test_audit_against_experiment_spec(tmp_path):
    small_experiment(tmp_path)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, tmp_path / "res")
    spec = ExperimentSpec.from_dict(
        {
            "experiment": {
                "name": "e",
                "benchmarks": ["natural_tofu"],
                "fields": ["forget10"],
                "objectives": ["npo"],
                "methods": ["intervention_score", "random"],
                "seeds": {"calibration": [7], "final": [1, 2, 3]},
            }
        }
    )
    rep = audit(con, "e", spec)
    assert rep.expected == 1 + 3 * 3
    assert rep.text().splitlines()[1] == (
        f"expected cells: the grid of experiment spec {spec.name!r}"
    )
    assert {(m["method"], m["variant"], m["seed"]) for m in rep.missing} == {
        ("intervention_score", "static", 3),
        ("random", "static", 3),
        ("intervention_score", "dirr", 3),
    }
    assert not rep.wrong_split


def test_outcome_table_roundtrip(tmp_path):
    small_experiment(tmp_path)
    con = connect(tmp_path / "a.duckdb")
    ingest(con, tmp_path / "res")
    for ext in ("csv", "parquet"):
        n = export_table(con, tmp_path / f"out.{ext}", "e")
        con2 = connect(tmp_path / f"b_{ext}.duckdb")
        rep = import_table(con2, tmp_path / f"out.{ext}")
        assert rep.new == n == 7
        assert import_table(con2, tmp_path / f"out.{ext}").unchanged == n  # idempotent
        q = (
            "SELECT method, variant, seed, split, J, triggered, "
            "available_gain FROM results ORDER BY ALL"
        )
        assert con2.execute(q).fetchall() == con.execute(q).fetchall()


def write_csv(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))


HEADER = [
    "experiment",
    "benchmark",
    "field",
    "objective",
    "method",
    "variant",
    "seed",
    "split",
    "J",
    "G_F",
    "D_coll",
    "status",
]
ROW = ["p", "lacuna", "Email_Address", "npo", "wagle", "static", 4099, "final", 1.5, 1.6, 0.1, "ok"]


@pytest.mark.parametrize(
    "mutate,msg",
    [
        (lambda h, r: (h[:-1], [x[:-1] for x in r]), r"missing column\(s\) \['status'\]"),
        (
            lambda h, r: (h, [r[0], r[1][:8] + ["abc"] + r[1][9:]]),
            r"bad\.csv row 2, column 'J': 'abc' is not allowed",
        ),
        (lambda h, r: (h, [r[0], r[1][:11] + ["lost"]]), r"bad\.csv row 2: unknown status 'lost'"),
    ],
)
def test_bad_outcome_tables_write_nothing(tmp_path, mutate, msg):
    h, rows = mutate(list(HEADER), [list(ROW), list(ROW[:6]) + [8191] + ROW[7:]])
    write_csv(tmp_path / "bad.csv", h, rows)
    con = connect(tmp_path / "r.duckdb")
    with pytest.raises(RegistryError, match=msg):
        import_table(con, tmp_path / "bad.csv")
    assert scalar(con, "SELECT count(*) FROM runs") == 0


def test_imported_duplicates_are_kept_and_audited(tmp_path):
    write_csv(tmp_path / "t.csv", HEADER, [ROW, ROW, ROW[:6] + [8191] + ROW[7:]])
    con = connect(tmp_path / "r.duckdb")
    assert import_table(con, tmp_path / "t.csv").new == 3
    rep = audit(con, "p")
    assert [(d["seed"], d["n"]) for d in rep.duplicates] == [(4099, 2)]


def test_decision_tampered_on_disk_is_refused(tmp_path):
    dec = freeze_decision(
        tmp_path / "res" / "decisions",
        tau=0.02,
        rho_p=0.01,
        d=20,
        t=160,
        T=200,
        actions=[0],
        admissible_range=[0.2, 0.8],
        calibration_seeds=[7],
        baselines=[],
        benchmark="b",
        objective="npo",
        selection="evaluation",
        calibration_runs=[],
    )
    p = tmp_path / "res" / "decisions" / f"{dec['hash']}.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), "tau": 0.5}))
    with pytest.raises(RegistryError, match="do not match their content hash"):
        ingest(connect(tmp_path / "r.duckdb"), tmp_path / "res")


def test_an_audit_check_is_one_entry_of_checks(tmp_path, monkeypatch):
    """Checks are data (issue 34): one more ``Check`` in ``CHECKS`` is run, listed in the text and
    the JSON, read as ``rep.<name>``, and fails the audit when it finds rows; names are unique."""
    from supportbench.registry import audit as audit_module

    assert len({c.name for c in audit_module.CHECKS}) == len(audit_module.CHECKS)
    res = tmp_path / "res"
    for s in (1, 2):
        syn.write(res, syn.record(experiment="e", seed=s, J=1.0))
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    assert audit(con, "e").ok
    extra = audit_module.Check(
        "odd_seeds",
        "runs with an odd seed (a test's check)",
        lambda a: audit_module._rows(
            a.con, "SELECT run_key, seed FROM arun WHERE seed % 2 = 1 ORDER BY ALL"
        ),
    )
    monkeypatch.setattr(audit_module, "CHECKS", [*audit_module.CHECKS, extra])
    rep = audit(con, "e")
    assert not rep.ok and [r["seed"] for r in rep.odd_seeds] == [1]
    assert "runs with an odd seed (a test's check): 1" in rep.text()
    assert rep.to_dict()["odd_seeds"] == rep.odd_seeds and rep.to_dict()["ok"] is False
    with pytest.raises(AttributeError, match="no check 'nope'"):
        _ = rep.nope


def test_the_registry_keeps_each_runs_cpu_mode_and_the_findings_stamp_counts_them(tmp_path):
    """A record's provenance.cpu_mode (the CPU kernels it computed with: theta_0's bits differ
    between an Intel avx2 and an AMD native-avx2 process) reaches the registry, and a report's
    provenance counts the runs of each mode; a record without one counts as unknown. A registry
    made before the column existed gains it, empty, when opened for writing and ingests new runs
    into it; opened read-only (as a report opens it) it is reported with every mode unknown."""
    import duckdb

    from supportbench.reports import findings as report_findings
    from supportbench.reports import html as report_html

    def write(res, modes):
        for seed, mode in modes:
            rec = syn.record(experiment="e", seed=seed, started_at=f"2026-01-0{seed + 1}T00:00:00Z")
            if mode is not None:
                rec["provenance"]["cpu_mode"] = mode
            syn.write(res, rec)

    def provenance_columns(path):
        with duckdb.connect(str(path), read_only=True) as c:
            return {r[0] for r in c.execute("DESCRIBE provenance").fetchall()}

    res = tmp_path / "res"
    modes = [(0, "avx2"), (1, "native-avx2"), (2, "avx2"), (3, None)]
    write(res, modes)
    con = connect(tmp_path / "new.duckdb")
    assert ingest(con, res).new == 4
    got = con.execute(
        "SELECT r.seed, p.cpu_mode FROM runs r JOIN provenance p USING (run_key) ORDER BY seed"
    ).fetchall()
    assert got == modes
    stamp = report_findings.registry_stamp(con, "e")
    assert stamp["cpu_modes"] == {"avx2": 2, "native-avx2": 1, "unknown": 1}
    text = report_findings.stamp_text(stamp)
    assert "CPU kernels of the runs (cpu_mode): avx2 (2 runs), native-avx2 (1 run), " in text
    assert report_findings.read_stamp(text)["cpu_modes"] == stamp["cpu_modes"]
    con.close()
    # a stamp written before the modes were kept says so instead of failing
    del stamp["cpu_modes"]
    assert "(cpu_mode): not kept by this stamp;" in report_findings.stamp_text(stamp)

    # a registry from before the column: its runs stored, then the column taken away
    old = tmp_path / "old.duckdb"
    con = connect(old)
    ingest(con, res)
    # both columns migrate added later (fingerprint before cpu_mode)
    con.execute("ALTER TABLE provenance DROP COLUMN cpu_mode")
    con.execute("ALTER TABLE provenance DROP COLUMN fingerprint")
    con.close()
    assert not {"cpu_mode", "fingerprint"} & provenance_columns(old)
    con = connect(old, read_only=True)  # never migrated: a report of it still has its stamp
    stamp = report_findings.registry_stamp(con, "e")
    assert stamp["cpu_modes"] == {"unknown": 4} and stamp["fingerprints"] == []
    page = report_html.identity_part(con, "e")  # and the page's table of runs
    assert page["total"] == 4 and all(r["fingerprint"] is None for r in page["rows"])
    con.close()
    con = connect(old)  # opened for writing: migrated
    assert "cpu_mode" in report_findings.columns(con, "provenance")
    write(res, [(4, "avx2")])
    assert ingest(con, res).new == 1  # the new run has its mode; the four stored ones stay unknown
    assert report_findings.registry_stamp(con, "e")["cpu_modes"] == {"avx2": 1, "unknown": 4}
    con.close()
