"""Processes under concurrency: concurrent ingests and an audit all succeed, a new registry appears
only when complete, a locked registry waits then says so, and sweep workers exit when the sweep is
killed. These tests start and kill processes: they run on one pytest-xdist worker
(``xdist_group``)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from supportbench.registry import synthetic as syn
from supportbench.registry.store import connect, scalar

CLI = [sys.executable, "-m", "supportbench.cli"]

pytestmark = pytest.mark.xdist_group("processes")


# ---- concurrency and processes -------------------------------------------------------------------
@pytest.mark.slow
def test_concurrent_ingests_and_an_audit_all_succeed(tmp_path):
    res = tmp_path / "res"
    for rec in syn.grid(3000, experiment="e"):
        syn.write(res, rec)
    db = tmp_path / "r.duckdb"
    env = {**os.environ, "SUPPORTBENCH_LOCK_TIMEOUT": "120"}
    procs = [
        subprocess.Popen(
            CLI + ["registry", "ingest", str(res), "--registry", str(db)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    deadline = time.monotonic() + 60
    while not db.exists() and time.monotonic() < deadline:  # the audit starts the moment the file
        time.sleep(0.001)  # appears: it must never be half-written
    procs.append(
        subprocess.Popen(
            CLI + ["audit", "--registry", str(db), "--experiment", "e"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert "IOException" not in err and "Traceback" not in err, err
        assert p.returncode in (0, 1), err  # audit exits 1 for its findings, never crashes
    assert all(p.returncode == 0 for p in procs[:4])
    con = connect(db, read_only=True)
    assert scalar(con, "SELECT count(*) FROM runs") == 3000


def test_a_new_registry_appears_only_when_complete(tmp_path, monkeypatch):
    from supportbench.registry import store

    db = tmp_path / "r.duckdb"
    seen = []
    real = store.migrate

    def watching(con):
        seen.append(db.exists())  # while the schema is written, the public name must not exist yet
        real(con)

    monkeypatch.setattr(store, "migrate", watching)
    connect(db).close()
    assert seen[0] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.duckdb"]  # no private copy left behind
    assert (
        scalar(connect(db, read_only=True), "SELECT max(version) FROM schema_migrations")
        == store.SCHEMA_VERSION
    )


def test_a_registry_created_by_a_racing_process_is_kept(tmp_path, monkeypatch):
    import duckdb

    from supportbench.registry import store

    db = tmp_path / "r.duckdb"
    real = store.migrate

    def racing(con):  # another process publishes its registry while this one builds its own
        real(con)
        if not db.exists():
            other = duckdb.connect(str(db))
            real(other)
            other.execute("CREATE TABLE marker (x INTEGER)")
            other.close()

    monkeypatch.setattr(store, "migrate", racing)
    connect(db).close()
    monkeypatch.setattr(store, "migrate", real)
    assert (
        scalar(connect(db, read_only=True), "SELECT count(*) FROM marker") == 0
    )  # the winner's file
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
            connect({str(tmp_path / "r.duckdb")!r})
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
