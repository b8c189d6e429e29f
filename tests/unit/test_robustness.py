"""The promises of the robustness issue, one test each: bad input fails fast and clearly (exit code 2 or a
named error, nothing written), nothing invalid is stored as ok, frozen decisions cannot be forged or
back-dated, the query command cannot touch other files, and processes behave under concurrency."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from supportbench.cli import main
from supportbench.errors import DecisionError, RegistryError, SpecError
from supportbench.experiments.decisions import decision_hash, freeze_decision, load_decision
from supportbench.experiments.plan import ExperimentSpec
from supportbench.experiments.record import RecordError, RunRecord
from supportbench.registry import synthetic as syn
from supportbench.registry.audit import audit
from supportbench.registry.imports import import_table
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect, scalar

CLI = [sys.executable, "-m", "supportbench.cli"]


def _now() -> str:
    """A run's start: now, after the decision just frozen and before the ingest that follows (the audit flags
    dates in the future of the registry's clock)."""
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="microseconds")


def nothing_written(*dirs: Path) -> bool:
    return all(not d.exists() or not any(d.rglob("*")) for d in dirs)


# ---- validate before any expensive work ------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["--method", "wagel"], "Did you mean 'wagle'"),
    (["--benchmark", "tofuu"], "Did you mean 'tofu'"),
    (["--objective", "npoo"], "Did you mean 'npo'"),
    (["--field", "forget11"], "Did you mean 'forget10'"),
    (["--variant", "dirr", "--rho-p", "0.07", "--allow-unfrozen"], "'0.07' is not a probe action"),
    (["--budget", "1.5"], "neither a fraction"),
    (["--budget", "nan"], "'nan' is not finite"),
    (["--budget", "inf"], "'inf' is not finite"),
    (["--budget", "10"], "below one group of 'tiny-llama' \\(96 scalars"),
    (["--set", "lr=-1"], re.escape("lr = -1.0: must be a number in (0, 1]")),
    (["--set", "method.nope=1"], re.escape("method 'intervention_score' has no option 'nope'; allowed: method.eps")),
])
def test_bad_run_input_exits_2_and_writes_nothing(tmp_path, capsys, args, says):
    res, cache = tmp_path / "results", tmp_path / "cache"
    try:
        rc = main(["run", "--results", str(res), "--cache", str(cache), *args])
    except SystemExit as exc:   # refused by argparse itself
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and __import__("re").search(says, err), err
    assert "Traceback" not in err
    assert nothing_written(res, cache)


@pytest.mark.parametrize("where", ["env-cache-is-a-file", "env-cache-under-a-file", "runs-not-writable"])
def test_where_a_run_writes_is_checked_before_it_trains(tmp_path, capsys, monkeypatch, where):
    """$SUPPORTBENCH_CACHE is checked as --cache is, and the results' runs/ folder itself (issue 33's second
    review: both failed after training, with an internal error)."""
    res = tmp_path / "results"
    (tmp_path / "afile").write_text("x")
    if where == "runs-not-writable":
        (res / "runs").mkdir(parents=True)
        if os.geteuid() == 0:
            if subprocess.run(["chattr", "+i", str(res / "runs")], capture_output=True).returncode:
                pytest.skip("chattr +i is not available here")
        else:
            (res / "runs").chmod(0o555)
    else:
        monkeypatch.setenv("SUPPORTBENCH_CACHE", str(tmp_path / "afile" / ("sub" if "under" in where else "")))
    try:
        rc = main(["run", "--benchmark", "tofu", "--method", "random", "--T", "2", "--results", str(res)])
    finally:
        if where == "runs-not-writable" and os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(res / "runs")], check=True)
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "internal error" not in err, err
    assert ("$SUPPORTBENCH_CACHE" in err) if where.startswith("env") else ("is not writable" in err), err
    assert not list((res / "runs").glob("*.json")) if (res / "runs").exists() else True


def test_model_folder_without_weights_exits_2_before_training(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    res, cache = tmp_path / "results", tmp_path / "cache"
    rc = main(["run", "--model", str(folder), "--results", str(res), "--cache", str(cache)])
    err = capsys.readouterr().err
    assert rc == 2 and "has config.json but no weights" in err and str(folder) in err
    assert nothing_written(res, cache)


SPEC = """
[experiment]
name = "x"
benchmarks = ["tofu"]
fields = ["forget10"]
objectives = ["npo"]
methods = ["random"]
dirr_methods = ["intervention_score"]
T = 4
t = 2
d = 1
rho_p = 0.05
[experiment.seeds]
calibration = [1]
final = [2]
"""


@pytest.mark.parametrize("edit, says", [
    (lambda s: s + "[hyperparamters]\nlr = 0.1\n",
     "unknown section 'hyperparamters' \\(did you mean 'hyperparameters'"),
    (lambda s: s + "[dir]\nselection = 'evaluation'\n", "unknown section 'dir' \\(did you mean 'dirr'"),
    (lambda s: s + "[dirr]\nadmisible_range = [0, 1]\n",
     "'dirr.admisible_range' \\(did you mean 'dirr.admissible_range'"),
    (lambda s: s.replace("final = [2]", 'final = ["a"]'), "experiment.seeds.final must hold whole numbers, got 'a'"),
    (lambda s: s.replace("rho_p = 0.05", "rho_p = 0.07"), "rho_p 0.07 is not a probe action"),
    (lambda s: s + "[dirr]\nselection = 'evaluatoin'\n", "dirr.selection 'evaluatoin' is not allowed"),
    (lambda s: s.replace("budgt", "x").replace("T = 4", "T = 4\nbudgt = 0.1"), "did you mean 'experiment.budget'"),
])
def test_bad_experiment_specs_are_refused_at_load(tmp_path, edit, says):
    f = tmp_path / "x.toml"
    f.write_text(edit(SPEC))
    with pytest.raises(SpecError, match=says):
        ExperimentSpec.from_toml(f)


@pytest.mark.parametrize("bad, says", [
    ('methods = ["random", "wagel"]', "Did you mean 'wagle'"),
    ('dirr_methods = ["intervention_scor"]', "Did you mean 'intervention_score'"),
    ('objectives = ["npoo"]', "Did you mean 'npo'"),
])
def test_sweep_checks_every_name_before_running(tmp_path, capsys, bad, says):
    key = bad.split(" = ")[0]
    text = "\n".join(bad if line.startswith(key + " ") else line for line in SPEC.splitlines())
    (tmp_path / "x.toml").write_text(text)
    res = tmp_path / "results"
    rc = main(["sweep", str(tmp_path / "x.toml"), "--results", str(res), "--workers", "1",
               "--cache", str(tmp_path / "cache")])
    assert rc == 2 and says in capsys.readouterr().err
    assert nothing_written(res, tmp_path / "cache")


# ---- clear errors naming the file ------------------------------------------------------------------------
def test_truncated_decision_file_is_named(tmp_path):
    dec = freeze_decision(tmp_path, tau=0.1, rho_p=0.01, d=2, t=4, T=8, actions=[0, 0.01], admissible_range=[0, 1],
                          calibration_seeds=[1], baselines=[], benchmark="tofu", objective="npo",
                          selection="evaluation", calibration_runs=[])
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


# ---- nothing invalid is stored as ok ---------------------------------------------------------------------
def _edit_outcome(rec, **kw):
    return {**rec, "outcome": {**rec["outcome"], **kw}}


@pytest.mark.parametrize("make, says", [
    (lambda r: _edit_outcome(r, J=float("nan")), "status 'ok' but J not a finite number"),
    (lambda r: _edit_outcome(r, J=float("inf")), "status 'ok' but J not a finite number"),
    (lambda r: _edit_outcome(r, J=None), "status 'ok' but J not a finite number"),
    (lambda r: _edit_outcome(r, J="1.0"), "status 'ok' but J not a finite number"),
    (lambda r: {**r, "spec": {**r["spec"], "seed": 1.5}}, "seed must be a whole number, got 1.5"),
    (lambda r: {**r, "spec": {**r["spec"], "variant": "dynamic"}}, "unknown variant 'dynamic'"),
    (lambda r: {**r, "spec": {**r["spec"], "split": "test"}}, "unknown split 'test'"),
    (lambda r: {**r, "run_key": "not-a-hash"}, "run_key 'not-a-hash' does not match its spec"),
    (lambda r: {**r, "spec": {**r["spec"], "seed": 99}}, "does not match its spec"),   # key kept, spec edited
])
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


@pytest.mark.parametrize("row, says", [
    ("e,lacuna,F,npo,wagle,static,1,final,nan,1,0,ok",
     "row 1, column 'J': 'nan' is not allowed; it must be a finite decimal number"),
    ("e,lacuna,F,npo,wagle,static,1,final,inf,1,0,ok", "row 1, column 'J': 'inf' is not allowed"),
    ("e,lacuna,F,npo,wagle,static,1,final,,1,0,ok", "row 1: 'J' is empty"),
    ("e,lacuna,F,npo,wagle,static,1.5,final,1,1,0,ok",
     "row 1, column 'seed': '1.5' is not allowed; a seed is a whole number"),
    ("e,lacuna,F,npo,wagle,dynamic,1,final,1,1,0,ok", "row 1: unknown variant 'dynamic'"),
    ("e,lacuna,F,npo,wagle,static,1,test,1,1,0,ok", "row 1: unknown split 'test'"),
])
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
    dirr = syn.record(experiment="e", variant="dirr", seed=2, J=1.0, candidates=cands, decision_hash=None)
    syn.write(res, dirr)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    syn.write(res, syn.record(experiment="e", seed=1, J=2.0))            # the retry succeeds
    full = {"0.0": 1.0, "0.01": 1.2, "0.025": 0.9, "0.05": 0.8, "0.1": 0.7}
    done = syn.record(experiment="e", variant="dirr", seed=2, J=1.0, candidates=full, decision_hash=None)
    done["dirr"]["post_hoc"] = True                                          # declared post-hoc completion
    syn.write(res, done)
    rep = ingest(con, res)
    assert rep.replaced == 2 and not rep.conflicts
    a = audit(con, "e")
    assert not a.failed and not a.duplicates and not a.conflicts
    assert scalar(con, "SELECT count(*) FROM runs") == 2
    assert scalar(con, "SELECT count(*) FROM candidates WHERE run_key = ?", [done["run_key"]]) == 5
    assert sorted(r[0] for r in con.execute("SELECT reason FROM replacements").fetchall()) == ["post_hoc", "retry"]


def test_a_stored_outcome_is_never_silently_replaced(tmp_path):
    """Rewriting J and the code fingerprint of every record of a method is not a reason to replace stored
    outcomes: without --replace-reruns it is a conflict (nothing overwritten); with it, each replacement is
    logged with the old and the new content."""
    res = tmp_path / "res"
    recs = [syn.record(experiment="e", method="wagle", seed=s, J=1.0) for s in (1, 2)]
    for r in recs:
        r["fingerprint"] = {"hash": "a" * 16}
        syn.write(res, r)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    for r in recs:                                   # the same runs, "rerun by other code" with a better J
        r["fingerprint"] = {"hash": "b" * 16}
        r["outcome"]["J"] = 9.0
        syn.write(res, r)
    rep = ingest(con, res)
    assert rep.replaced == 0 and len(rep.conflicts) == 2
    assert scalar(con, "SELECT max(J) FROM outcomes") == 1.0                     # the stored outcomes stand
    assert audit(con, "e").conflicts                                             # and the audit says so
    r = subprocess.run(CLI + ["registry", "ingest", str(res), "--registry", str(tmp_path / "r2.duckdb")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0                                                     # a fresh registry: all new
    rep = ingest(con, res, replace_reruns=True)
    assert rep.replaced == 2 and scalar(con, "SELECT max(J) FROM outcomes") == 9.0
    assert scalar(con, "SELECT count(*) FROM replacements WHERE reason = 'rerun'") == 2


# ---- frozen decisions that cannot be forged or back-dated ------------------------------------------------
def _decision(res, baselines=("random",)):
    return freeze_decision(res / "decisions", tau=0.02, rho_p=0.01, d=20, t=160, T=200, actions=[0, 0.01],
                           admissible_range=[0.2, 0.8], calibration_seeds=[7], baselines=list(baselines),
                           benchmark="natural_tofu", objective="npo", selection="evaluation", experiment="e",
                           calibration_runs=[])


def _final_dirr(res, dec, seed=3, **kw):
    rec = syn.record(experiment="e", variant="dirr", seed=seed, decision_hash=dec["hash"] if dec else None,
                     candidates={"0.0": 1.0}, started_at=_now(), **kw)
    syn.write(res, rec)
    return rec


def test_frozen_at_is_part_of_the_hash():
    dec = {"tau": 0.1, "rho_p": 0.01, "frozen_at": "2026-01-02T00:00:00+00:00"}
    assert decision_hash(dec) != decision_hash({**dec, "frozen_at": "2025-01-01T00:00:00+00:00"})


@pytest.mark.parametrize("change", [{"tau": 0.5}, {"frozen_at": "2000-01-01T00:00:00+00:00"}])
def test_forged_or_backdated_decision_with_a_recomputed_hash_is_caught(tmp_path, change):
    res = tmp_path / "res"
    dec = _decision(res)
    rec = _final_dirr(res, dec)
    forged = {**dec, **change}
    forged["hash"] = decision_hash(forged)                       # the forger recomputes the hash
    (res / "decisions" / f"{dec['hash']}.json").unlink()
    (res / "decisions" / f"{forged['hash']}.json").write_text(json.dumps(forged))
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    a = audit(con, "e")
    assert [u["run_key"] for u in a.undeclared_decisions] == [rec["run_key"]] and not a.ok


def test_audit_gaps_unfrozen_late_decision_and_undated_records(tmp_path):
    res = tmp_path / "res"
    dec = _decision(res, baselines=("random",))
    _final_dirr(res, None, seed=4)                                                       # unfrozen final run
    syn.write(res, syn.record(experiment="e", method="random", seed=3,
                              started_at="2000-01-01T00:00:00+00:00"))                   # baseline before freezing
    undated = syn.record(experiment="e", method="wagle", seed=3)
    undated["provenance"]["started_at"] = None
    syn.write(res, undated)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    a = audit(con, "e")
    assert [u["seed"] for u in a.unfrozen] == [4]
    assert [d["hash"] for d in a.decisions_after_baselines] == [dec["hash"]]
    assert [u["run_key"] for u in a.undated] == [undated["run_key"]]
    text = a.text()
    for title in ("final DIR-R runs without a frozen decision", "decisions frozen after the baseline outcomes",
                  "records without a start time"):
        assert f"{title}" in text


# ---- the query command is read-only in fact --------------------------------------------------------------
@pytest.fixture()
def registries(tmp_path):
    for name in ("mine", "other"):
        syn.write(tmp_path / name, syn.record(experiment=name))
        con = connect(tmp_path / f"{name}.duckdb")
        ingest(con, tmp_path / name)
        con.close()
    return tmp_path


@pytest.mark.parametrize("sql", [
    "COPY runs TO '{d}/leak.csv'",
    "EXPORT DATABASE '{d}/dump'",
    "SELECT * FROM read_text('/etc/hostname')",
    "SELECT * FROM read_csv('{d}/other.duckdb')",
    "ATTACH '{d}/other.duckdb' AS o (READ_WRITE)",
    "ATTACH '{d}/other.duckdb' AS o (READ_WRITE); DROP TABLE o.runs",
    "SET enable_external_access = true",
    "SELECT 1; SELECT 2",
])
def test_query_attacks_are_refused(registries, capsys, sql):
    d = registries
    rc = main(["registry", "query", "--registry", str(d / "mine.duckdb"), "-c", sql.format(d=d)])
    assert rc == 2 and "RegistryError" in capsys.readouterr().err
    assert not (d / "leak.csv").exists() and not (d / "dump").exists()
    other = connect(d / "other.duckdb", read_only=True)
    assert scalar(other, "SELECT count(*) FROM runs") == 1
    other.close()


def test_query_still_answers_read_queries(registries, capsys):
    rc = main(["registry", "query", "--registry", str(registries / "mine.duckdb"), "-c",
               "WITH x AS (SELECT count(*) AS n FROM runs) SELECT n FROM x"])
    assert rc == 0 and "1" in capsys.readouterr().out


@pytest.mark.parametrize(("sql", "env", "message"), [
    ("SELECT count(*) FROM range(100000000000000)", {"SUPPORTBENCH_QUERY_SECONDS": "1"},
     "query stopped at its time limit of 1 s"),
    ("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t",
     {"SUPPORTBENCH_QUERY_SECONDS": "1"}, "query stopped at its time limit of 1 s"),
    ("SELECT list(range) FROM range(200000000)", {"SUPPORTBENCH_QUERY_MEMORY": "64MB"},
     "query stopped at its memory limit"),
    ("SELECT 1", {"SUPPORTBENCH_QUERY_SECONDS": "nan"}, "SUPPORTBENCH_QUERY_SECONDS='nan' must be a number"),
    ("SELECT 1", {"SUPPORTBENCH_QUERY_MEMORY": "lots"}, "SUPPORTBENCH_QUERY_MEMORY='lots' is not a memory size"),
    ("SELECT nosuch FROM runs", {}, "query failed: Binder Error"),
])
def test_a_query_stops_at_its_limits_with_one_line(registries, capsys, monkeypatch, sql, env, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc = main(["registry", "query", "--registry", str(registries / "mine.duckdb"), "-c", sql])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_audit_of_an_experiment_the_registry_does_not_hold_is_an_error(registries, capsys):
    rc = main(["audit", "--registry", str(registries / "mine.duckdb"), "--experiment", "nosuch"])
    err = capsys.readouterr().err
    assert rc == 2 and "holds no run of experiment 'nosuch'; it holds: mine" in err


@pytest.mark.parametrize(("text", "message"), [
    ('{"a": 1, "a": 2}', "duplicate key 'a' in one object"),
    ('{"tau": NaN}', "NaN is not a JSON number"),
    ('{"tau": -Infinity}', "-Infinity is not a JSON number"),
])
def test_json_that_python_accepts_but_the_standard_does_not_is_refused(tmp_path, text, message):
    from supportbench._io import read_json_object

    (tmp_path / "d.json").write_text(text)
    with pytest.raises(DecisionError, match=message):
        read_json_object(tmp_path / "d.json", DecisionError, "decision file")


def test_a_record_with_a_duplicated_key_is_refused(tmp_path):
    rec = json.dumps(syn.record(experiment="e"))
    text = rec[:-1] + ', "status": "failed"}'                 # a second status: which one counts?
    with pytest.raises(RecordError, match="duplicate key 'status' in one object"):
        RunRecord.from_json(text)


# ---- concurrency and processes ---------------------------------------------------------------------------
@pytest.mark.slow
def test_concurrent_ingests_and_an_audit_all_succeed(tmp_path):
    res = tmp_path / "res"
    for rec in syn.grid(3000, experiment="e"):
        syn.write(res, rec)
    db = tmp_path / "r.duckdb"
    env = {**os.environ, "SUPPORTBENCH_LOCK_TIMEOUT": "120"}
    procs = [subprocess.Popen(CLI + ["registry", "ingest", str(res), "--registry", str(db)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    deadline = time.monotonic() + 60
    while not db.exists() and time.monotonic() < deadline:   # the audit starts the moment the file
        time.sleep(0.001)                                     # appears: it must never be half-written
    procs.append(subprocess.Popen(CLI + ["audit", "--registry", str(db), "--experiment", "e"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert "IOException" not in err and "Traceback" not in err, err
        assert p.returncode in (0, 1), err   # audit exits 1 for its findings, never crashes
    assert all(p.returncode == 0 for p in procs[:4])
    con = connect(db, read_only=True)
    assert scalar(con, "SELECT count(*) FROM runs") == 3000


def test_a_new_registry_appears_only_when_complete(tmp_path, monkeypatch):
    from supportbench.registry import store

    db = tmp_path / "r.duckdb"
    seen = []
    real = store.migrate

    def watching(con):
        seen.append(db.exists())   # while the schema is written, the public name must not exist yet
        real(con)

    monkeypatch.setattr(store, "migrate", watching)
    connect(db).close()
    assert seen[0] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.duckdb"]   # no private copy left behind
    assert scalar(connect(db, read_only=True), "SELECT max(version) FROM schema_migrations") == store.SCHEMA_VERSION


def test_a_registry_created_by_a_racing_process_is_kept(tmp_path, monkeypatch):
    import duckdb

    from supportbench.registry import store

    db = tmp_path / "r.duckdb"
    real = store.migrate

    def racing(con):   # another process publishes its registry while this one builds its own
        real(con)
        if not db.exists():
            other = duckdb.connect(str(db))
            real(other)
            other.execute("CREATE TABLE marker (x INTEGER)")
            other.close()

    monkeypatch.setattr(store, "migrate", racing)
    connect(db).close()
    monkeypatch.setattr(store, "migrate", real)
    assert scalar(connect(db, read_only=True), "SELECT count(*) FROM marker") == 0   # the winner's file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.duckdb"]


def test_a_locked_registry_waits_then_says_so(tmp_path):
    import duckdb

    holder = duckdb.connect(str(tmp_path / "r.duckdb"))
    code = textwrap.dedent(f"""
        import os, sys
        os.environ["SUPPORTBENCH_LOCK_TIMEOUT"] = "1"
        from supportbench.registry.store import connect
        from supportbench.errors import RegistryError
        try:
            connect({str(tmp_path / 'r.duckdb')!r})
        except RegistryError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    holder.close()
    assert "is locked by another process" in out.stdout and "waited 1 s" in out.stdout, out.stderr


@pytest.mark.slow
def test_workers_exit_when_the_sweep_process_is_killed(tmp_path):
    code = textwrap.dedent("""
        import time
        from supportbench.harness.executors.local import LocalExecutor
        pool = LocalExecutor(2).pool()
        futures = [pool.submit(time.sleep, 120) for _ in range(2)]
        time.sleep(4)
        print(" ".join(str(p) for p in pool._processes), flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pids = [int(x) for x in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 15
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids), "workers outlived their parent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


# ---- reports ---------------------------------------------------------------------------------------------
def test_report_with_tex_specials_is_written_whole(tmp_path):
    from supportbench.reports.report import report

    odd = "m$_x^{2}$ & 100% #1 \\relax ~"
    res = tmp_path / "res"
    for seed in (1, 2):
        syn.write(res, syn.record(experiment="e", seed=seed, J=1.0 + seed))
        syn.write(res, syn.record(experiment="e", seed=seed, method=odd, J=0.5))
    weird_dir = tmp_path / "a_b&c%"
    weird_dir.mkdir()
    db = weird_dir / "r.duckdb"
    con = connect(db)
    ingest(con, res, allow_unknown=True)   # the odd method is no registered name: stored as asked
    con.close()
    st = report(db, tmp_path / "out", "e")
    assert st["figures"]
    paper = (tmp_path / "out" / "paper.tex").read_text()
    assert r"a\_b\&c\%" in paper
    for f in (tmp_path / "out" / "tables").glob("*.tex"):
        assert odd not in f.read_text()                      # only the escaped form may appear


def test_a_failing_report_leaves_the_previous_one(tmp_path, monkeypatch):
    from supportbench.reports import report as R

    res = tmp_path / "res"
    syn.write(res, syn.record(experiment="e"))
    db = tmp_path / "r.duckdb"
    con = connect(db)
    ingest(con, res)
    con.close()
    R.report(db, tmp_path / "out", "e")
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*"))

    def boom(*a, **k):
        raise RuntimeError("figure failed")

    monkeypatch.setattr(R, "render_figures", boom)
    with pytest.raises(RuntimeError):
        R.report(db, tmp_path / "out", "e")
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*")) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def _tree(root) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(("out", "message"), [
    ("res", "holds the registry"),                             # the results directory itself
    (".", "holds the registry"),                               # the current folder
    ("res/runs", "is a folder with other content"),            # a folder of the user's
    ("notes.txt", "is a file, not a folder"),                  # a user's file
    ("link", "is a symbolic link"),                            # a link to a folder
])
def test_report_out_never_replaces_what_it_does_not_own(tmp_path, monkeypatch, out, message):
    """A command only ever creates or replaces its own output folder: pointed at anything else, `report --out`
    is a clear error before any work, and every run, the registry and the user's files are left as they were."""
    res = tmp_path / "res"
    for seed in (1, 2):
        syn.write(res, syn.record(experiment="e", seed=seed, J=1.0 + seed))
    db = res / "registry.duckdb"
    con = connect(db)
    ingest(con, res)
    con.close()
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    r = subprocess.run(CLI + ["report", "--registry", str(db), "--out", out], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert _tree(tmp_path) == before


def test_report_replaces_its_own_previous_report(tmp_path):
    """Replaced whole while it holds exactly what the last report wrote; a file anyone else put
    there makes it not the report's any more (issue 33: a marker alone let a report delete runs and
    a registry)."""
    from supportbench.errors import ReportError
    from supportbench.reports.report import MARKER, report

    res = tmp_path / "res"
    syn.write(res, syn.record(experiment="e"))
    con = connect(res / "registry.duckdb")
    ingest(con, res)
    con.close()
    report(res / "registry.duckdb", res / "report", "e")
    assert (res / "report" / MARKER).is_file()
    report(res / "registry.duckdb", res / "report", "e")   # its own folder, unchanged: replaced
    assert (res / "report" / "report.md").is_file()
    (res / "report" / "stale.txt").write_text("not from a report")
    with pytest.raises(ReportError, match="holds what no report wrote: stale.txt"):
        report(res / "registry.duckdb", res / "report", "e")
    assert (res / "report" / "stale.txt").read_text() == "not from a report"
    assert (res / "runs").is_dir() and (res / "registry.duckdb").is_file()
