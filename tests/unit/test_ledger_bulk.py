"""The ingest log written in bulk (``registry.ledger.append``, issue 39) holds exactly the entries
the row-by-row version wrote: the same seq, key, content hash, prev and chain hash, for every kind
an ingest or import logs. The reference below is that version, written out; each call's clock
reading is taken from the stored entries."""

from __future__ import annotations

import hashlib
import json

import pytest

from supportbench.experiments.decisions import freeze_decision
from supportbench.experiments.results import ResultsDir
from supportbench.registry import ledger
from supportbench.registry import synthetic as syn
from supportbench.registry.imports import import_table
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect

N, RETRIED, ADDED = 3000, 40, 500
ENTRY = (
    "SELECT seq, strftime(logged_at, '%Y-%m-%dT%H:%M:%S.%f'), "
    "kind, key, content_hash, prev, hash FROM ingest_log"
)


def row_by_row(con, kind: str, keys: list[str], seq: int, prev: str, at: str) -> list[tuple]:
    """The append before issue 39: the keys one insert each, every key's digest from the whole view,
    in key order, each entry chained to the one before by
    sha256(prev|seq|at|kind|key|content_hash)."""
    if not keys:
        return []
    view, col = ("decision_digests", "hash") if kind == "decision" else ("run_digests", "run_key")
    con.execute("CREATE OR REPLACE TEMP TABLE reference_keys (k VARCHAR)")
    con.executemany("INSERT INTO reference_keys VALUES (?)", [(k,) for k in keys])
    out = []
    for key, digest in con.execute(
        f"SELECT {col}, digest FROM {view} JOIN reference_keys ON k = {col} ORDER BY {col}"
    ).fetchall():
        seq += 1
        h = hashlib.sha256("|".join((prev, str(seq), at, kind, key, digest)).encode()).hexdigest()
        out.append((seq, at, kind, key, digest, prev, h))
        prev = h
    return out


def logged_as_before(con, calls: list[tuple[str, list[str]]], after: int) -> None:
    """The entries after ``after`` are what ``row_by_row`` gives for the same appends (the registry
    as it is now is what those appends saw: they are the last writes of their transaction)."""
    stored = con.execute(f"{ENTRY} WHERE seq > ? ORDER BY seq", [after]).fetchall()
    at = {row[0]: row[1] for row in stored}
    seq, prev = (
        after,
        con.execute(
            "SELECT coalesce(max(hash), ?) FROM ingest_log WHERE seq = ?", [ledger.GENESIS, after]
        ).fetchall()[0][0],
    )
    expected = []
    for kind, keys in calls:
        entries = row_by_row(con, kind, keys, seq, prev, at.get(seq + 1, "no entry stored"))
        if entries:
            seq, prev = entries[-1][0], entries[-1][-1]
        expected += entries
    assert stored == expected


def put(res, rec: dict) -> None:
    """Where the results directory keeps the record, without the runner's fsync (thousands of
    files)."""
    path = ResultsDir(res).record(rec["run_key"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))


@pytest.fixture
def appends(monkeypatch):
    """Every (kind, keys) the code under test hands to ``ledger.append``, passed on unchanged (with
    ``staged``: the digests an ingest took as it stored each chunk)."""
    calls, real = [], ledger.append
    monkeypatch.setattr(
        ledger,
        "append",
        lambda con, kind, keys, **kw: (
            calls.append((kind, list(keys))),
            real(con, kind, keys, **kw),
        )[1],
    )
    return calls


def test_ingest_and_import_log_what_the_row_by_row_append_logged(tmp_path, appends):
    res, con = tmp_path / "res", connect(tmp_path / "r.duckdb")
    for tau in (0.02, 0.03):
        freeze_decision(
            res / "decisions",
            tau=tau,
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
    grid = syn.grid(N + ADDED)
    for r in grid[:N]:
        put(res, r)
    for seed in range(RETRIED):
        put(res, syn.record(experiment="retried", seed=seed, status="failed"))
    rep = ingest(con, res)
    assert (rep.decisions_new, rep.new) == (2, N + RETRIED)
    assert [kind for kind, keys in appends if keys] == ["decision", "run"]
    logged_as_before(con, appends, 0)

    # the retries replace the failed runs (logged as
    # replacements), and new runs join the unchanged ones
    after, appends[:] = ledger.head(con)["seq"], []
    for seed in range(RETRIED):
        put(res, syn.record(experiment="retried", seed=seed, J=float(seed)))
    for r in grid[N:]:
        put(res, r)
    rep = ingest(con, res)
    assert (rep.replaced, rep.new, rep.unchanged) == (RETRIED, ADDED + RETRIED, N)
    assert [kind for kind, keys in appends if keys] == ["replacement", "run"]
    logged_as_before(con, appends, after)

    after, appends[:] = ledger.head(con)["seq"], []
    (tmp_path / "t.csv").write_text(
        "experiment,benchmark,field,objective,method,variant,seed,split,J,status\n"
        + "".join(f"p,lacuna,Email_Address,npo,wagle,static,{s},final,1.5,ok\n" for s in range(3))
    )
    assert import_table(con, tmp_path / "t.csv").new == 3
    assert [kind for kind, keys in appends if keys] == ["import"]
    logged_as_before(con, appends, after)
    assert ledger.head(con)["seq"] == 2 + N + RETRIED + RETRIED + ADDED + 3
    assert ledger.verify(con) == []


def test_a_key_named_twice_is_logged_twice_and_an_unknown_key_not_at_all(tmp_path):
    res, con = tmp_path / "res", connect(tmp_path / "r.duckdb")
    for r in syn.grid(5):
        put(res, r)
    ingest(con, res)
    after = ledger.head(con)["seq"]
    keys = [
        k
        for (k,) in con.execute("SELECT run_key FROM runs ORDER BY run_key DESC LIMIT 2").fetchall()
    ]
    calls = [("run", [keys[0], "not-a-stored-key", keys[1], keys[0]])]
    con.execute("BEGIN")
    ledger.append(con, *calls[0])
    con.execute("COMMIT")
    logged_as_before(con, calls, after)
    assert ledger.head(con)["seq"] == after + 3


def test_keys_handed_over_in_any_order_are_logged_in_key_order(tmp_path):
    """The row-by-row append logged in key order whatever order the keys came in or the rows are
    stored in: a shuffled list of keys whose rows were stored upper half first (a join keeps one
    of its inputs' orders) gives the same entries."""
    import random

    res, con = tmp_path / "res", connect(tmp_path / "r.duckdb")
    grid = sorted(syn.grid(2000), key=lambda r: r["run_key"])
    for half in (grid[1000:], grid[:1000]):  # stored out of key order: two ingests
        for r in half:
            put(res, r)
        ingest(con, res)
    after = ledger.head(con)["seq"]
    keys = [k for (k,) in con.execute("SELECT run_key FROM runs").fetchall()]
    random.Random(0).shuffle(keys)
    con.execute("BEGIN")
    ledger.append(con, "run", keys)
    con.execute("COMMIT")
    logged_as_before(con, [("run", keys)], after)
    assert ledger.head(con)["seq"] == after + 2000


def test_an_ingest_in_many_chunks_logs_what_the_row_by_row_append_logged(tmp_path, appends):
    """An ingest takes each chunk's digests as it stores the chunk (``ledger.take_digests``),
    while the next is read: in chunks of 16 records, with runs that a later chunk of the same
    ingest replaces (a failed run retried, one of them retried twice, after its first retry failed
    too) and DIR-R runs, the log holds what the row-by-row append logs from the registry as the
    ingest left it; a digest a replaced run's first chunk took is not the one logged."""
    res, con = tmp_path / "res", connect(tmp_path / "r.duckdb")
    for r in syn.grid(300):
        put(res, r)
    for seed in range(6):
        # every candidate (``_derive`` then sets available_gain after the digest is taken) or two
        cands = dict.fromkeys(syn.ACTIONS, 0.1 * seed) if seed % 2 else {"0.0": 0.1, "0.05": 0.2}
        put(res, syn.record(experiment="dirr", variant="dirr", seed=seed, candidates=cands))
    for seed in range(5):  # failed first (sorted early: 'runs/<key>.json'), retried in later files
        failed = syn.record(experiment="retried", seed=seed, status="failed")
        put(res, failed)
        retry = syn.record(experiment="retried", seed=seed, J=float(seed) + 0.5)
        if seed == 0:  # retried twice: a second failure, then the good run
            again = {**failed, "error": "failed again"}
            (res / "runs" / f"zy-{failed['run_key']}.json").write_text(json.dumps(again))
        (res / "runs" / f"zz-{retry['run_key']}.json").write_text(json.dumps(retry))
    rep = ingest(con, res, chunk=16)
    # a replaced run is stored anew: counted new as well
    assert (rep.new, rep.replaced, rep.conflicts) == (300 + 6 + 5 + 6, 6, [])
    assert [kind for kind, keys in appends if keys] == ["replacement", "run"]
    logged_as_before(con, appends, 0)
    assert ledger.verify(con) == []
    retried = con.execute(
        "SELECT count(*) FROM ingest_log l JOIN outcomes o ON o.run_key = l.key "
        "WHERE l.kind = 'replacement' AND o.status = 'ok'"
    ).fetchall()[0][0]
    assert retried == 6  # the twice-retried run is logged twice, both times as finally stored
    gains = "SELECT count(*) FROM gate_events WHERE available_gain IS NOT NULL"
    assert con.execute(gains).fetchall()[0][0] == 3  # derived after the chunks were digested


def walked(con) -> list[dict]:
    """The chain check before the audit's speed-up (issue 39): the log fetched and walked in seq
    order, each entry's stored prev and hash against the hash of the entry before it."""
    out, prev, expect = [], ledger.GENESIS, 1
    for seq, at, kind, key, content_hash, stored_prev, h in con.execute(
        f"{ENTRY} ORDER BY seq"
    ).fetchall():
        if seq != expect:
            out.append(
                {
                    "seq": seq,
                    "key": key,
                    "reason": f"entries {expect}..{seq - 1} are missing from the log",
                }
            )
        link = hashlib.sha256(
            "|".join((prev, str(seq), at, kind, key, content_hash)).encode()
        ).hexdigest()
        if stored_prev != prev or link != h:
            out.append(
                {
                    "seq": seq,
                    "key": key,
                    "reason": "entry altered: its hash does not follow from the chain",
                }
            )
        prev, expect = h, seq + 1
    return out


TAMPERINGS = {
    "none": [],
    "an entry dropped": ["DELETE FROM ingest_log WHERE seq = 7"],
    "the first and a run of entries dropped": [
        "DELETE FROM ingest_log WHERE seq = 1 OR seq BETWEEN 20 AND 24"
    ],
    "the last entry dropped": [
        "DELETE FROM ingest_log WHERE seq = (SELECT max(seq) FROM ingest_log)"
    ],
    "a content hash rewritten": ["UPDATE ingest_log SET content_hash = md5('x') WHERE seq = 11"],
    "a hash rewritten": ["UPDATE ingest_log SET hash = md5('x') || md5('y') WHERE seq = 12"],
    "a prev rewritten": [f"UPDATE ingest_log SET prev = '{ledger.GENESIS}' WHERE seq = 13"],
    "a clock rewritten": [
        "UPDATE ingest_log SET logged_at = logged_at + INTERVAL 1 MICROSECOND WHERE seq = 14"
    ],
    "a key and a kind rewritten": [
        "UPDATE ingest_log SET key = 'k' WHERE seq = 15",
        "UPDATE ingest_log SET kind = 'import' WHERE seq = 16",
    ],
    "entries renumbered": ["UPDATE ingest_log SET seq = seq + 1000 WHERE seq > 30"],
    "a dropped entry's hash carried on (the next prev rewritten to skip it)": [
        "UPDATE ingest_log SET prev = (SELECT prev FROM ingest_log WHERE seq = 9) WHERE seq = 10",
        "DELETE FROM ingest_log WHERE seq = 9",
    ],
    "everything": ["DELETE FROM ingest_log"],
}


@pytest.mark.parametrize("forge", TAMPERINGS, ids=list(TAMPERINGS))
def test_verify_reports_the_chain_breaks_the_walk_in_seq_order_reported(tmp_path, forge):
    """``verify``'s chain check, set-based in DuckDB, reports exactly what the walk above reports,
    in the same order, for an intact log and for each way of editing it (the run and decision
    checks that follow are unchanged SQL)."""
    res, con = tmp_path / "res", connect(tmp_path / "r.duckdb")
    for r in syn.grid(40):
        put(res, r)
    ingest(con, res)
    for sql in TAMPERINGS[forge]:
        con.execute(sql)
    chain = [r for r in ledger.verify(con) if r["seq"] is not None]
    assert chain == walked(con)
    assert bool(chain) == (forge not in ("none", "everything", "the last entry dropped"))
