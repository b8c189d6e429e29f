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


def test_a_ctrl_c_that_duckdb_takes_during_a_query_says_interrupted(
    registries, capsys, monkeypatch, tmp_path
):
    """A Ctrl-C during a query (outside any transaction): DuckDB takes the KeyboardInterrupt and
    raises RuntimeError('Query interrupted'), which the CLI reported as an internal error. It is the
    interrupt: exit 130, 'interrupted', and the handler put back. The same error with no Ctrl-C
    stays an internal error (exit 1)."""
    import signal
    import tempfile

    from supportbench.registry import store

    def interrupted(con, sql, **kw):  # as DuckDB answers a Ctrl-C during the query
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            raise RuntimeError("Query interrupted") from None

    def failing(con, sql, **kw):
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the internal error's traceback file
    argv = ["registry", "query", "--registry", str(registries / "mine.duckdb"), "-c", "SELECT 1"]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        monkeypatch.setattr(store, "run_query", interrupted)
        assert main(argv) == 130
        assert capsys.readouterr().err.strip() == "interrupted"
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        monkeypatch.setattr(store, "run_query", failing)
        assert main(argv) == 1
        assert "internal error: RuntimeError: Query interrupted" in capsys.readouterr().err
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_stops_a_long_query_at_once_and_frees_the_connection(registries):
    """DuckDB notices a Ctrl-C in a long aggregate only when the query ends (here: never, within
    the limit). The query runs on a worker the Ctrl-C interrupts: KeyboardInterrupt within
    seconds, no worker left, and the connection answers the next query."""
    import signal
    import threading
    import time

    from supportbench.registry.store import close, query_connection, run_query

    db = registries / "mine.duckdb"
    con = query_connection(db)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c = threading.Timer(
        0.5, signal.pthread_kill, [threading.main_thread().ident, signal.SIGINT]
    )
    try:
        t0 = time.monotonic()
        ctrl_c.start()
        with pytest.raises(KeyboardInterrupt):
            run_query(
                con, "SELECT count(*) FROM range(100000000000) t(x) WHERE x % 7 = 3", seconds=20
            )
        assert time.monotonic() - t0 < 10
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, previous)
    assert not [t for t in threading.enumerate() if t.name == "supportbench-query"]
    assert run_query(con, "SELECT 42 AS x").rows.to_pylist() == [{"x": 42}]
    close(con, db)


def test_the_prompt_stays_after_a_ctrl_c(registries, capsys, monkeypatch):
    """At the prompt a Ctrl-C while typing drops the statement, and one during a query stops the
    query: the prompt goes on (Ctrl-D ends it, exit 0), as psql's does."""
    import builtins

    from supportbench.registry import store

    lines = iter(["SELECT 'dropped'", "KI", "SELECT 'stopped';", "SELECT 'answered' AS a;"])

    def typed(prompt=""):
        line = next(lines, None)
        if line is None:
            raise EOFError
        if line == "KI":
            raise KeyboardInterrupt
        return line

    real = store.run_query
    asked = []

    def run_query(con, sql, **kw):
        asked.append(sql.strip())
        if "stopped" in sql:
            raise KeyboardInterrupt  # what run_query raises once it has stopped the query
        return real(con, sql, **kw)

    monkeypatch.setattr(builtins, "input", typed)
    monkeypatch.setattr(store, "run_query", run_query)
    assert main(["registry", "query", "--registry", str(registries / "mine.duckdb")]) == 0
    out = capsys.readouterr().out
    assert asked == ["SELECT 'stopped';", "SELECT 'answered' AS a;"]
    assert "query stopped (Ctrl-C)" in out and "answered" in out and "dropped" not in out


def test_an_interrupt_sent_before_the_query_starts_is_sent_again(registries):
    """DuckDB clears the interrupt flag when a query starts: a time limit reached before it starts
    would be lost and the query run to its end. The interrupt is repeated until the query stops."""
    import time

    from supportbench.errors import RegistryError
    from supportbench.registry.store import close, query_connection, run_query

    db = registries / "mine.duckdb"
    con = query_connection(db)
    t0 = time.monotonic()
    with pytest.raises(RegistryError, match="time limit of 0.0001 s"):
        run_query(con, "SELECT count(*) FROM range(20000000000) t(x) WHERE x % 7 = 3", seconds=1e-4)
    assert time.monotonic() - t0 < 5  # the whole query takes minutes
    assert run_query(con, "SELECT 1 AS one").rows.to_pylist() == [{"one": 1}]
    close(con, db)


def test_a_ctrl_c_the_prompt_dealt_with_is_not_taken_for_a_later_error(
    registries, capsys, monkeypatch, tmp_path
):
    """After a Ctrl-C at the prompt (the statement dropped, the prompt going on), a later
    unexpected error is reported as what it is (internal error, exit 1), not as 'interrupted'."""
    import builtins
    import signal
    import tempfile

    from supportbench.registry import store

    lines = iter(["SELECT 1", "CTRL-C", "SELECT 'boom';"])

    def typed(prompt=""):
        line = next(lines)
        if line == "CTRL-C":
            signal.raise_signal(signal.SIGINT)  # a real one: noted, then KeyboardInterrupt
        return line

    def broken(con, sql, **kw):
        raise ValueError("boom")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the internal error's traceback file
    monkeypatch.setattr(builtins, "input", typed)
    monkeypatch.setattr(store, "run_query", broken)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main(["registry", "query", "--registry", str(registries / "mine.duckdb")]) == 1
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "internal error: ValueError: boom" in capsys.readouterr().err


def test_a_ctrl_c_while_a_query_is_stopped_at_its_limit_is_the_interrupt():
    """A query reaches its time limit and is being stopped when a Ctrl-C comes: the stop still
    waits for the query to end (no worker left inside DuckDB), and the Ctrl-C, not the limit, is
    what is raised (exit 130 in the CLI, not the limit's refusal)."""
    import signal
    import threading

    from supportbench._signals import interruptible

    stopped = threading.Event()

    class Connection:  # its first interrupt meets a Ctrl-C; the next one stops the query
        calls = 0

        def interrupt(self):
            self.calls += 1
            if self.calls == 1:
                signal.raise_signal(signal.SIGINT)
            stopped.set()

    def query():
        assert stopped.wait(30), "never interrupted"
        raise RuntimeError("interrupted query")

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as got:
            interruptible(query, Connection().interrupt, 0.05, name="supportbench-query")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert isinstance(got.value.__cause__, TimeoutError)
    assert not [t for t in threading.enumerate() if t.name == "supportbench-query"]


def test_ctrl_cs_during_a_stop_raise_nothing_until_the_worker_has_ended():
    """Ctrl-Cs while a query is being stopped are noted, not raised where they land (where a
    raised one could leave the stop with the worker still inside DuckDB): each signal returns, the
    stop waits for the query to end, the interrupt is raised once after it, a noting block around
    the call sees it, and the handler the call found is back afterwards."""
    import signal
    import threading

    from supportbench._signals import interruptible, noting_interrupts

    stopped = threading.Event()

    class Connection:  # three interrupts, each meeting a Ctrl-C; the third stops the query
        calls = returned = 0

        def interrupt(self):
            self.calls += 1
            if self.calls <= 3:
                signal.raise_signal(signal.SIGINT)
                self.returned += 1  # reached only when the Ctrl-C raised nothing here
            if self.calls >= 3:
                stopped.set()

    def query():
        assert stopped.wait(30), "never interrupted"
        raise RuntimeError("interrupted query")

    con = Connection()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with noting_interrupts() as noted:
            with pytest.raises(KeyboardInterrupt) as got:
                interruptible(query, con.interrupt, 0.05, name="supportbench-query")
            back = signal.getsignal(signal.SIGINT)  # the noting block's handler, not the quiet one
    finally:
        signal.signal(signal.SIGINT, previous)
    assert con.returned == 3
    assert noted.hit
    assert getattr(back, "_supportbench_noting", False)
    assert isinstance(got.value.__cause__, TimeoutError)
    assert not [t for t in threading.enumerate() if t.name == "supportbench-query"]


@pytest.mark.parametrize(
    ("ctrl_c_at_wait", "ctrl_c_at_exit", "waits"),
    [
        ((2, 4), False, 8),  # 6 steps and the 2 Ctrl-Cs between them
        ((), True, 6),  # 6 steps, then nothing more to wait (12 if the wait began again from zero)
    ],
    ids=["raised-inside-the-wait", "raised-as-the-stop-ends"],
)
def test_a_never_begun_worker_is_given_up_after_one_wait_counted_over_the_whole_stop(
    monkeypatch, ctrl_c_at_wait, ctrl_c_at_exit, waits
):
    """A Ctrl-C before the worker's thread runs leaves nothing to stop: the stop gives it up after
    ``_NEVER_BEGAN`` seconds of waiting counted over the whole stop, not again from zero after a
    Ctrl-C raised inside it (under a caller's own handler, or as the stop's quiet handler is taken
    away), and says that a Ctrl-C came. Each wait is a 50 ms step counted without sleeping."""
    import contextlib
    import threading

    from supportbench import _signals

    monkeypatch.setattr(_signals, "_NEVER_BEGAN", 0.275)  # 6 steps of 50 ms
    exits = []

    @contextlib.contextmanager
    def quiet():  # _quiet, but a Ctrl-C raised as its first block ends, where one asked
        yield _signals.Noted()
        exits.append(1)
        if ctrl_c_at_exit and len(exits) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(_signals, "_quiet", quiet)

    class Done(threading.Event):
        calls = 0

        def wait(self, timeout=None):
            self.calls += 1
            if self.calls in ctrl_c_at_wait:
                raise KeyboardInterrupt
            return False

    def interrupt():
        raise AssertionError("a worker that never began was interrupted")

    done = Done()
    worker = threading.Thread(target=lambda: None)  # never started
    assert _signals._stop(interrupt, worker, threading.Event(), done) is True
    assert done.calls == waits
