"""Crash safety and concurrency of ingest, with real processes."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect, scalar

pytestmark = pytest.mark.slow

INGEST = textwrap.dedent("""
    import sys
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect
    ingest(connect(sys.argv[1]), sys.argv[2], chunk=int(sys.argv[3]))
""")


def consistent_counts(db):
    con = connect(db)
    counts = [scalar(con, f"SELECT count(*) FROM {t}") for t in ("runs", "outcomes", "provenance")]
    con.close()
    return counts


@pytest.fixture(scope="module")
def grid30k(tmp_path_factory):
    """30,000 record files, shared by the tests that stop an ingest midway (never changed)."""
    res = tmp_path_factory.mktemp("grid30k") / "res"
    recs = syn.grid(30_000)
    for r in recs:
        syn.write(res, r)
    return res, recs


def test_kill9_mid_ingest_leaves_db_consistent_and_rerun_completes(tmp_path, grid30k):
    (res, recs), db = grid30k, tmp_path / "r.duckdb"
    connect(db).close()  # schema exists before the crash
    killed = False
    for delay in (0.8, 1.5, 2.5):  # kill while the transaction is open
        p = subprocess.Popen([sys.executable, "-c", INGEST, str(db), str(res), "5000"])
        time.sleep(delay)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
            killed = True
            break
        # finished before the kill: start over with an empty database
        db.unlink()
        connect(db).close()
    assert killed, "ingest finished before it could be killed; increase the record count"
    runs, outcomes, prov = consistent_counts(db)
    assert runs == outcomes == prov and runs in (0, len(recs))
    rep = ingest(connect(db), res)
    assert rep.new + rep.unchanged == len(recs) and not rep.conflicts
    assert consistent_counts(db) == [len(recs)] * 3


@pytest.mark.parametrize("after", [0.2, 0.5, 0.8, 1.1, 1.4])
def test_ctrl_c_mid_ingest_says_interrupted_and_creates_nothing(tmp_path, grid30k, after):
    """Ctrl-C (SIGINT to the terminal's process group) while an ingest reads and DuckDB stores:
    exit 130 and 'interrupted', whichever call it lands in (a DuckDB query takes the
    KeyboardInterrupt and raises its own error, which was reported as an internal error), and no
    registry file (or, when the Ctrl-C came after it was published, a whole one)."""
    (res, recs), db = grid30k, tmp_path / "r.duckdb"
    p = subprocess.Popen(
        [sys.executable, "-m", "supportbench.cli", "registry", "ingest", str(res)]
        + ["--registry", str(db)],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60  # the registry is built under a private name until it is done
    while not list(tmp_path.glob(".supportbench-*")) and time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()
        time.sleep(0.02)
    time.sleep(after)
    if p.poll() is not None:  # a fast machine: nothing left to interrupt
        assert p.wait() == 0 and consistent_counts(db) == [len(recs)] * 3
        pytest.skip(f"the ingest of {len(recs)} records ended within {after} s")
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert (p.returncode, err.strip()) == (130, "interrupted"), err[-2000:]
    assert not list(tmp_path.glob(".supportbench-*"))
    if db.exists():  # the Ctrl-C came after the registry was published: it is whole
        assert consistent_counts(db) == [len(recs)] * 3


def test_ctrl_c_during_a_registry_query_says_interrupted(tmp_path, monkeypatch):
    """Ctrl-C while `registry query` runs a long query (outside any transaction): DuckDB noticed it
    only when the query ended (with one thread it raised 'Query interrupted', reported as an
    internal error); exit 130 and 'interrupted' at once."""
    db = tmp_path / "r.duckdb"
    connect(db).close()
    monkeypatch.setenv("SUPPORTBENCH_QUERY_SECONDS", "300")  # the Ctrl-C stops it, not the limit
    sql = "SELECT count(*) FROM range(100000000000) t(x) WHERE x % 7 = 3"
    p = subprocess.Popen(
        [sys.executable, "-m", "supportbench.cli", "registry", "query", "--registry", str(db)]
        + ["-c", sql],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    owner = db.with_name(db.name + ".owner")  # written when the query's connection is open
    try:
        deadline = time.monotonic() + 60
        while not owner.exists() and time.monotonic() < deadline:
            assert p.poll() is None, p.communicate()
            time.sleep(0.02)
        time.sleep(0.5)  # the query runs
        assert p.poll() is None, p.communicate()
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:  # a query the Ctrl-C did not stop would hold both cores until its limit
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert (p.returncode, err.strip(), out) == (130, "interrupted", ""), err[-2000:]


WRITER = textwrap.dedent("""
    import sys
    from supportbench.registry import synthetic as syn
    w, n, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    for i in range(n):
        syn.write(out, syn.record(experiment=f"w{w}", seed=i, J=float(i)))
""")


def test_concurrent_writers_while_ingesting_lose_nothing(tmp_path):
    res, db = tmp_path / "res", tmp_path / "r.duckdb"
    (res / "runs").mkdir(parents=True)  # ingest refuses a folder that does not exist
    n = 400
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(w), str(n), str(res)]) for w in range(4)
    ]
    con = connect(db)
    rounds = 0
    while any(w.poll() is None for w in writers):
        rep = ingest(con, res)
        assert not rep.conflicts
        rounds += 1
    assert all(w.wait() == 0 for w in writers)
    rep = ingest(con, res)
    assert not rep.conflicts and rounds >= 1
    assert scalar(con, "SELECT count(*) FROM runs") == 4 * n
    assert scalar(con, "SELECT count(DISTINCT experiment) FROM runs") == 4
