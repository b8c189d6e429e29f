import json
import subprocess
import sys

import pytest

from supportbench.registry import synthetic as syn

CLI = [sys.executable, "-m", "supportbench.cli"]


def run(*args):
    return subprocess.run(CLI + list(args), capture_output=True, text=True)


def test_registry_and_audit_cli(tmp_path):
    res, db = tmp_path / "res", tmp_path / "r.duckdb"
    for seed in (1, 2):
        for m in ("wagle", "random"):
            syn.write(res, syn.record(experiment="e", method=m, seed=seed, J=float(seed)))
    out = run("registry", "ingest", str(res), "--registry", str(db))
    assert out.returncode == 0 and "4 new" in out.stdout
    out = run("audit", "--registry", str(db), "--experiment", "e")
    assert out.returncode == 0 and "PASS" in out.stdout
    # without a spec the audit says its grid is a guess from the runs, and how to give the real one
    assert out.stdout.splitlines()[1] == (
        "expected cells: inferred from the runs (per benchmark and split, the cross product of the "
        "levels they show); pass --spec for the experiment's own grid"
    )
    out = run(
        "registry",
        "query",
        "--registry",
        str(db),
        "-c",
        "SELECT count(*) AS n FROM results WHERE J = 2",
    )
    assert out.returncode == 0 and "2" in out.stdout
    out = run("registry", "export", str(tmp_path / "o.csv"), "--registry", str(db))
    assert out.returncode == 0 and (tmp_path / "o.csv").read_text().count("\n") == 5
    # delete one run: the audit fails, with the missing cell in its JSON
    (
        res / "runs" / f"{syn.record(experiment='e', method='wagle', seed=1)['run_key']}.json"
    ).unlink()
    run("registry", "ingest", str(res), "--registry", str(tmp_path / "r2.duckdb"))
    out = run("audit", "--registry", str(tmp_path / "r2.duckdb"), "--json")
    assert out.returncode == 1
    rep = json.loads(out.stdout)
    assert (
        not rep["ok"] and rep["missing"][0]["method"] == "wagle" and rep["missing"][0]["seed"] == 1
    )
    assert rep["grid"].startswith("inferred from the runs")


def test_query_is_read_only(tmp_path):
    db = tmp_path / "r.duckdb"
    syn.write(tmp_path / "res", syn.record(experiment="e"))
    assert run("registry", "ingest", str(tmp_path / "res"), "--registry", str(db)).returncode == 0
    out = run("registry", "query", "--registry", str(db), "-c", "DELETE FROM runs")
    assert out.returncode != 0 and "read-only" in (out.stderr + out.stdout).lower()


def test_reporting_layers_never_import_torch():
    code = (
        "import sys, supportbench.cli, supportbench.registry.audit, supportbench.registry.ingest, "
        "supportbench.experiments.plan; "
        "sys.exit(1 if 'torch' in sys.modules or 'transformers' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_report_refuses_to_mix_experiments(tmp_path):
    from supportbench.errors import RegistryError
    from supportbench.registry import synthetic as syn
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect
    from supportbench.reports.report import report

    for exp in ("first", "second"):
        for rec in syn.grid(22, experiment=exp):
            syn.write(tmp_path / "runs_src", rec)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, tmp_path / "runs_src")
    con.close()
    with pytest.raises(RegistryError, match=r"2 experiments \(first, second\).*--experiment"):
        report(tmp_path / "r.duckdb", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(RegistryError, match="no experiment 'third'"):
        report(tmp_path / "r.duckdb", tmp_path / "out", "third")
    st = report(tmp_path / "r.duckdb", tmp_path / "out", "first")
    assert (tmp_path / "out" / "report.md").exists() and st["tables"]


def test_export_then_import_round_trips_every_metric(tmp_path):
    """Every outcome component leaves as a metric:<name> column and comes back (nothing dropped in
    silence); a column that is neither an outcome, a DIR-R nor a metric: column is refused,
    named."""
    import polars as pl

    from supportbench.errors import RegistryError
    from supportbench.registry import synthetic as syn
    from supportbench.registry.imports import import_table
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect
    from supportbench.registry.tables import export_table

    res = tmp_path / "res"
    for k, method in enumerate(("random", "wagle")):
        syn.write(
            res,
            syn.record(
                experiment="e",
                method=method,
                seed=k,
                J=0.5 + k,
                components={"forget_quality": 0.01 * (k + 1), "model_utility": 0.6 - k / 10},
            ),
        )
    con = connect(tmp_path / "a.duckdb")
    ingest(con, res)
    export_table(con, tmp_path / "a.csv")
    first = pl.read_csv(tmp_path / "a.csv")
    assert {"metric:forget_quality", "metric:model_utility"} <= set(first.columns)
    other = connect(tmp_path / "b.duckdb")
    rep = import_table(other, tmp_path / "a.csv")
    assert rep.new == 2
    export_table(other, tmp_path / "b.csv")
    again = pl.read_csv(tmp_path / "b.csv")
    assert again.columns == first.columns and again.equals(first)
    bad = first.with_columns(pl.lit(1).alias("forget_quality"))
    bad.write_csv(tmp_path / "bad.csv")
    with pytest.raises(
        RegistryError, match=r"unknown column\(s\) \['forget_quality'\].*metric:<name>"
    ):
        import_table(connect(tmp_path / "c.duckdb"), tmp_path / "bad.csv")


@pytest.mark.parametrize("audit_ok", [True, False])
def test_demo_exits_nonzero_when_its_audit_fails(tmp_path, monkeypatch, capsys, audit_ok):
    """The demo's exit status includes its audit (review: a failed audit exited 0); the sweep,
    the extras, ingest, audit and report are stand-ins here, the real ones are tested on their own
    (the real extras trained three theta_0 here: 6 of the suite's 17 minutes)."""
    from types import SimpleNamespace

    from supportbench import cli
    from supportbench.harness import extras, sweep
    from supportbench.registry import audit, ingest
    from supportbench.reports import report

    done = SimpleNamespace(runs=1, ok=1, skipped=0, failed=[], claims=None, decisions={})
    done.__dict__.update(post_hoc=0, calibration_errors={}, corrupt=[])
    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: done)
    monkeypatch.setattr(extras, "run_extras", lambda *a, **k: (None, []))
    monkeypatch.setattr(ingest, "ingest", lambda *a, **k: SimpleNamespace(summary=lambda: ""))
    verdict = SimpleNamespace(
        ok=audit_ok, text=lambda: "audit: " + ("PASS" if audit_ok else "FAIL")
    )
    monkeypatch.setattr(audit, "audit", lambda *a, **k: verdict)
    monkeypatch.setattr(
        report,
        "report",
        lambda *a, **k: {"tables": {}, "figures": {}, "html": tmp_path / "index.html"},
    )
    rc = cli.main(["demo", "--results", str(tmp_path / "demo")])
    assert rc == (0 if audit_ok else 1)
    assert ("the audit FAILED" in capsys.readouterr().err) is not audit_ok
