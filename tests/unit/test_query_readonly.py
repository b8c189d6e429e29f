"""The query command is read-only in fact: statements that write or touch other files are refused,
read queries still answer, and a query stops at its row and time limits with one line."""

import json
import sys

import pytest

from supportbench.cli import main
from supportbench.errors import DecisionError
from supportbench.experiments.record import RecordError, RunRecord
from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect, scalar

CLI = [sys.executable, "-m", "supportbench.cli"]


# ---- the query command is read-only in fact ------------------------------------------------------
@pytest.fixture()
def registries(tmp_path):
    for name in ("mine", "other"):
        syn.write(tmp_path / name, syn.record(experiment=name))
        con = connect(tmp_path / f"{name}.duckdb")
        ingest(con, tmp_path / name)
        con.close()
    return tmp_path


@pytest.mark.parametrize(
    "sql",
    [
        "COPY runs TO '{d}/leak.csv'",
        "EXPORT DATABASE '{d}/dump'",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_csv('{d}/other.duckdb')",
        "ATTACH '{d}/other.duckdb' AS o (READ_WRITE)",
        "ATTACH '{d}/other.duckdb' AS o (READ_WRITE); DROP TABLE o.runs",
        "SET enable_external_access = true",
        "SELECT 1; SELECT 2",
    ],
)
def test_query_attacks_are_refused(registries, capsys, sql):
    d = registries
    rc = main(["registry", "query", "--registry", str(d / "mine.duckdb"), "-c", sql.format(d=d)])
    assert rc == 2 and "RegistryError" in capsys.readouterr().err
    assert not (d / "leak.csv").exists() and not (d / "dump").exists()
    other = connect(d / "other.duckdb", read_only=True)
    assert scalar(other, "SELECT count(*) FROM runs") == 1
    other.close()


def test_query_still_answers_read_queries(registries, capsys):
    rc = main(
        [
            "registry",
            "query",
            "--registry",
            str(registries / "mine.duckdb"),
            "-c",
            "WITH x AS (SELECT count(*) AS n FROM runs) SELECT n FROM x",
        ]
    )
    assert rc == 0 and "1" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("sql", "env", "message"),
    [
        (
            "SELECT count(*) FROM range(100000000000000)",
            {"SUPPORTBENCH_QUERY_SECONDS": "1"},
            "query stopped at its time limit of 1 s",
        ),
        (
            "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) "
            "SELECT count(*) FROM t",
            {"SUPPORTBENCH_QUERY_SECONDS": "1"},
            "query stopped at its time limit of 1 s",
        ),
        (
            "SELECT list(range) FROM range(200000000)",
            {"SUPPORTBENCH_QUERY_MEMORY": "64MB"},
            "query stopped at its memory limit",
        ),
        (
            "SELECT 1",
            {"SUPPORTBENCH_QUERY_SECONDS": "nan"},
            "SUPPORTBENCH_QUERY_SECONDS='nan' must be a number",
        ),
        (
            "SELECT 1",
            {"SUPPORTBENCH_QUERY_MEMORY": "lots"},
            "SUPPORTBENCH_QUERY_MEMORY='lots' is not a memory size",
        ),
        ("SELECT nosuch FROM runs", {}, "query failed: Binder Error"),
    ],
)
def test_a_query_stops_at_its_limits_with_one_line(
    registries, capsys, monkeypatch, sql, env, message
):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc = main(["registry", "query", "--registry", str(registries / "mine.duckdb"), "-c", sql])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_audit_of_an_experiment_the_registry_does_not_hold_is_an_error(registries, capsys):
    rc = main(["audit", "--registry", str(registries / "mine.duckdb"), "--experiment", "nosuch"])
    err = capsys.readouterr().err
    assert rc == 2 and "holds no run of experiment 'nosuch'; it holds: mine" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a' in one object"),
        ('{"tau": NaN}', "NaN is not a JSON number"),
        ('{"tau": -Infinity}', "-Infinity is not a JSON number"),
    ],
)
def test_json_that_python_accepts_but_the_standard_does_not_is_refused(tmp_path, text, message):
    from supportbench._io import read_json_object

    (tmp_path / "d.json").write_text(text)
    with pytest.raises(DecisionError, match=message):
        read_json_object(tmp_path / "d.json", DecisionError, "decision file")


def test_a_record_with_a_duplicated_key_is_refused(tmp_path):
    rec = json.dumps(syn.record(experiment="e"))
    text = rec[:-1] + ', "status": "failed"}'  # a second status: which one counts?
    with pytest.raises(RecordError, match="duplicate key 'status' in one object"):
        RunRecord.from_json(text)
