"""Errors name the file, and nothing invalid is stored as ok: unreadable or invalid records and
imported rows are refused with their file and row; a stored outcome is never silently replaced."""

import json
import subprocess
import sys

import pytest

from supportbench.cli import main
from supportbench.errors import DecisionError, RegistryError
from supportbench.experiments.decisions import freeze_decision, load_decision
from supportbench.registry import synthetic as syn
from supportbench.registry.audit import audit
from supportbench.registry.imports import import_table
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect, scalar

CLI = [sys.executable, "-m", "supportbench.cli"]


# ---- clear errors naming the file ----------------------------------------------------------------
def test_truncated_decision_file_is_named(tmp_path):
    dec = freeze_decision(
        tmp_path,
        tau=0.1,
        rho_p=0.01,
        d=2,
        t=4,
        T=8,
        actions=[0, 0.01],
        admissible_range=[0, 1],
        calibration_seeds=[1],
        baselines=[],
        benchmark="tofu",
        objective="npo",
        selection="evaluation",
        calibration_runs=[],
    )
    p = tmp_path / f"{dec['hash']}.json"
    p.write_text(p.read_text()[:30])
    with pytest.raises(DecisionError, match=rf"{p.name}' is not valid JSON .*truncated"):
        load_decision(p)


def test_registry_path_that_is_not_duckdb(tmp_path, capsys):
    bogus = tmp_path / "notes.duckdb"
    bogus.write_text("hello")
    assert main(["audit", "--registry", str(bogus)]) == 2
    assert f"'{bogus}' is not a DuckDB registry file" in capsys.readouterr().err
    with pytest.raises(RegistryError, match="is a directory"):
        connect(tmp_path)


def test_empty_csv_is_named(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(RegistryError, match="empty.csv: empty or not a file"):
        import_table(connect(tmp_path / "r.duckdb"), tmp_path / "empty.csv")


def test_directory_named_json_and_non_utf8_record_are_named(tmp_path):
    res = tmp_path / "res"
    (res / "runs" / "oops.json").mkdir(parents=True)
    with pytest.raises(RegistryError, match="oops.json is a directory, not a record file"):
        ingest(connect(tmp_path / "r.duckdb"), res)
    (res / "runs" / "oops.json").rmdir()
    (res / "runs" / "latin1.json").write_bytes('{"run_key": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(RegistryError, match="latin1.json: not UTF-8"):
        ingest(connect(tmp_path / "r.duckdb"), res)


def test_ingest_of_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(RegistryError, match="no results directory"):
        ingest(connect(tmp_path / "r.duckdb"), tmp_path / "nope")


# ---- nothing invalid is stored as ok -------------------------------------------------------------
def _rekeyed(rec):
    from supportbench.experiments.spec import spec_key

    return {**rec, "run_key": spec_key(rec["spec"])}


def _edit_outcome(rec, **kw):
    return {**rec, "outcome": {**rec["outcome"], **kw}}


def _counts(rec, **kw):
    good = {"changed_inside": 5, "changed_outside": 0, "allowed_scalars": 10, "tensors_checked": 3}
    comps = {**rec["outcome"].get("components", {}), **good, **kw}
    return _edit_outcome(rec, components=comps)


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda r: _edit_outcome(r, J=float("nan")), "status 'ok' but J not a finite number"),
        (lambda r: _edit_outcome(r, J=float("inf")), "status 'ok' but J not a finite number"),
        (lambda r: _edit_outcome(r, J=None), "status 'ok' but J not a finite number"),
        (lambda r: _edit_outcome(r, J="1.0"), "status 'ok' but J not a finite number"),
        (
            lambda r: {**r, "spec": {**r["spec"], "seed": 1.5}},
            "seed must be a whole number, got 1.5",
        ),
        (lambda r: {**r, "spec": {**r["spec"], "variant": "dynamic"}}, "unknown variant 'dynamic'"),
        (lambda r: {**r, "spec": {**r["spec"], "split": "test"}}, "unknown split 'test'"),
        (lambda r: {**r, "run_key": "not-a-hash"}, "run_key 'not-a-hash' does not match its spec"),
        (
            lambda r: {**r, "spec": {**r["spec"], "seed": 99}},
            "does not match its spec",
        ),  # key kept, spec edited
        # issue 33: hyperparameters that are not a mapping, keyed right (an internal error before)
        (
            lambda r: _rekeyed({**r, "spec": {**r["spec"], "hyperparameters": "x"}}),
            "hyperparameters must be a mapping of setting names to values, got 'x'",
        ),
        (
            lambda r: _rekeyed({**r, "spec": {**r["spec"], "hyperparameters": [1, 2]}}),
            "hyperparameters must be a mapping",
        ),
        # a time the registry's cast would make NULL, hiding a back-dated decision from the audit
        (
            lambda r: {**r, "provenance": {**r["provenance"], "finished_at": "garbage"}},
            "provenance.finished_at = 'garbage' is not an ISO 8601 time with its UTC offset",
        ),
        (
            lambda r: {**r, "provenance": {**r["provenance"], "started_at": "2026-11-27T07:00"}},
            "provenance.started_at = '2026-11-27T07:00' is not an ISO 8601 time",
        ),
        (
            lambda r: {**r, "provenance": {**r["provenance"], "finished_at": 5}},
            "provenance.finished_at = 5 is not",
        ),
        # the enforcement counts the audit reads: whole numbers >= 0, all four (review of 33/35:
        # -3 and "0" were stored, and the audit counted the run as checked)
        (lambda r: _counts(r, changed_outside=-3), "changed_outside = -3 is not a whole number"),
        (lambda r: _counts(r, changed_outside="0"), "changed_outside = '0' is not a whole number"),
        (lambda r: _counts(r, changed_inside=1.5), "changed_inside = 1.5 is not a whole number"),
        (lambda r: _counts(r, tensors_checked=None), "tensors_checked = None is not a whole"),
        (
            lambda r: _counts(r, changed_inside=11, allowed_scalars=10),
            "changed_inside = 11 exceeds allowed_scalars = 10",
        ),
        (
            lambda r: _edit_outcome(r, components={"changed_outside": 0}),
            "enforcement counts without changed_inside, allowed_scalars, tensors_checked",
        ),
    ],
)
def test_invalid_records_are_refused_with_their_file(tmp_path, make, says):
    good = syn.record(experiment="e", seed=1)
    syn.write(tmp_path / "res", good)
    bad = make(syn.record(experiment="e", seed=2))
    path = tmp_path / "res" / "runs" / "bad.json"
    path.write_text(json.dumps(bad))
    con = connect(tmp_path / "r.duckdb")
    with pytest.raises(RegistryError, match=f"bad.json.*{says}|{says}"):
        ingest(con, tmp_path / "res")
    assert scalar(con, "SELECT count(*) FROM runs") == 0


HEADER = "experiment,benchmark,field,objective,method,variant,seed,split,J,G_F,D_coll,status\n"


@pytest.mark.parametrize(
    "row, says",
    [
        (
            "e,lacuna,F,npo,wagle,static,1,final,nan,1,0,ok",
            "row 1, column 'J': 'nan' is not allowed; it must be a finite decimal number",
        ),
        (
            "e,lacuna,F,npo,wagle,static,1,final,inf,1,0,ok",
            "row 1, column 'J': 'inf' is not allowed",
        ),
        ("e,lacuna,F,npo,wagle,static,1,final,,1,0,ok", "row 1: 'J' is empty"),
        (
            "e,lacuna,F,npo,wagle,static,1.5,final,1,1,0,ok",
            "row 1, column 'seed': '1.5' is not allowed; a seed is a whole number",
        ),
        ("e,lacuna,F,npo,wagle,dynamic,1,final,1,1,0,ok", "row 1: unknown variant 'dynamic'"),
        ("e,lacuna,F,npo,wagle,static,1,test,1,1,0,ok", "row 1: unknown split 'test'"),
    ],
)
def test_invalid_imported_rows_are_refused(tmp_path, row, says):
    (tmp_path / "t.csv").write_text(HEADER + row + "\n")
    con = connect(tmp_path / "r.duckdb")
    with pytest.raises(RegistryError, match=f"t.csv {says}"):
        import_table(con, tmp_path / "t.csv")
    assert scalar(con, "SELECT count(*) FROM runs") == 0


def test_retried_failure_and_declared_post_hoc_completion_replace_the_stored_record(tmp_path):
    res = tmp_path / "res"
    failed = syn.record(experiment="e", seed=1, status="failed")
    syn.write(res, failed)
    cands = {"0.0": 1.0, "0.01": 1.2}
    dirr = syn.record(
        experiment="e", variant="dirr", seed=2, J=1.0, candidates=cands, decision_hash=None
    )
    syn.write(res, dirr)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    syn.write(res, syn.record(experiment="e", seed=1, J=2.0))  # the retry succeeds
    full = {"0.0": 1.0, "0.01": 1.2, "0.025": 0.9, "0.05": 0.8, "0.1": 0.7}
    done = syn.record(
        experiment="e", variant="dirr", seed=2, J=1.0, candidates=full, decision_hash=None
    )
    done["dirr"]["post_hoc"] = True  # declared post-hoc completion
    syn.write(res, done)
    rep = ingest(con, res)
    assert rep.replaced == 2 and not rep.conflicts
    a = audit(con, "e")
    assert not a.failed and not a.duplicates and not a.conflicts
    assert scalar(con, "SELECT count(*) FROM runs") == 2
    assert scalar(con, "SELECT count(*) FROM candidates WHERE run_key = ?", [done["run_key"]]) == 5
    assert sorted(r[0] for r in con.execute("SELECT reason FROM replacements").fetchall()) == [
        "post_hoc",
        "retry",
    ]


def test_a_stored_outcome_is_never_silently_replaced(tmp_path):
    """Rewriting J and the code fingerprint of every record of a method is not a reason to replace
    stored outcomes: without --replace-reruns it is a conflict (nothing overwritten); with it, each
    replacement is logged with the old and the new content."""
    res = tmp_path / "res"
    recs = [syn.record(experiment="e", method="wagle", seed=s, J=1.0) for s in (1, 2)]
    for r in recs:
        r["fingerprint"] = {"hash": "a" * 16}
        syn.write(res, r)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    for r in recs:  # the same runs, "rerun by other code" with a better J
        r["fingerprint"] = {"hash": "b" * 16}
        r["outcome"]["J"] = 9.0
        syn.write(res, r)
    rep = ingest(con, res)
    assert rep.replaced == 0 and len(rep.conflicts) == 2
    assert scalar(con, "SELECT max(J) FROM outcomes") == 1.0  # the stored outcomes stand
    assert audit(con, "e").conflicts  # and the audit says so
    r = subprocess.run(
        CLI + ["registry", "ingest", str(res), "--registry", str(tmp_path / "r2.duckdb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0  # a fresh registry: all new
    rep = ingest(con, res, replace_reruns=True)
    assert rep.replaced == 2 and scalar(con, "SELECT max(J) FROM outcomes") == 9.0
    assert scalar(con, "SELECT count(*) FROM replacements WHERE reason = 'rerun'") == 2
