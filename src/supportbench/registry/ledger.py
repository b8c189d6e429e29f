"""The registry's ingest log: append-only, hash-chained, on the registry's own clock.

Self-reported files (records, decisions) cannot be made unforgeable; what the registry can do is
make a change *after* it accepted something evident. Every row ingest accepts -- a new run, a
replaced run, an imported row, a decision -- appends ``(seq, at, kind, key, content_hash)`` to
``ingest_log``, where ``content_hash`` is the digest of every stored value of that row (the views
``run_digests`` / ``decision_digests``) and ``hash = sha256(prev | seq | at | kind | key |
content_hash)`` chains it to the entry before (``GENESIS`` for the first). ``verify`` recomputes the
chain and checks every stored run and decision against its last entry, so an edit of the registry's
tables (an outcome rewritten in SQL) or of the log (an entry dropped or altered without recomputing
every later hash) is reported. ``head`` is the chain's last hash: written down or published outside
the registry (the report's stamp carries it), it pins everything accepted up to then, because
recomputing the chain after an edit changes it. Threat model: docs/registry.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pyarrow as pa

GENESIS = "0" * 64
_TS = "%Y-%m-%dT%H:%M:%S.%f"


def _link(prev: str, seq: int, at: str, kind: str, key: str, content_hash: str) -> str:
    """sha256(prev|seq|at|kind|key|content_hash), hex: an entry's hash."""
    return _sha256(f"{prev}|{seq}|{at}|{kind}|{key}|{content_hash}".encode()).hexdigest()


_sha256 = hashlib.sha256


def has_log(con) -> bool:
    """False for a registry file written before the ingest log existed (opened read-only, not
    migrated)."""
    return bool(
        con.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'ingest_log'").fetchall()[
            0
        ][0]
    )


def head(con) -> dict:
    """The last entry: ``{"seq": n, "hash": h}`` (``seq`` 0 and ``GENESIS`` for an empty log)."""
    rows = (
        con.sql("SELECT seq, hash FROM ingest_log ORDER BY seq DESC LIMIT 1").fetchall()
        if has_log(con)
        else []
    )
    row = rows[0] if rows else None
    return {"seq": row[0], "hash": row[1]} if row else {"seq": 0, "hash": GENESIS}


STAGED = "ledger_staged"  # an ingest's run digests, taken chunk by chunk (``take_digests``)


@contextmanager
def staging(con) -> Iterator[None]:
    """An empty ``STAGED`` table for the block's ``take_digests`` (a temp table of the caller's
    transaction), dropped when the block ends; a block that fails leaves it to the rollback."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {STAGED} (key VARCHAR, digest VARCHAR)")
    yield
    con.execute(f"DROP TABLE {STAGED}")


def take_digests(con, keys_sql: str) -> None:
    """Note in ``STAGED`` the digest (``run_digests``) of the stored runs whose keys the query
    ``keys_sql`` (one column, ``run_key``) yields, as their rows are now; a key taken again keeps
    its latest digest. An ingest takes each chunk's after storing it, in DuckDB alone (the reader
    thread keeps the interpreter), and ``append(..., staged=True)`` logs them: they are the view's
    at the end as long as every later write of a column the view digests is followed by a take of
    the run's key."""
    keys = f"SELECT DISTINCT run_key FROM ({keys_sql})"
    # no key index (it would cost a third of the taking): a key taken before is deleted first
    con.execute(f"DELETE FROM {STAGED} WHERE key IN ({keys})")
    con.execute(
        f"INSERT INTO {STAGED} SELECT v.run_key, v.digest FROM run_digests v "
        f"JOIN ({keys}) n ON n.run_key = v.run_key"
    )


def append(con, kind: str, keys: list[str], staged: bool = False) -> None:
    """Log the rows ``keys`` of ``kind`` as stored now (run_key for run/replacement/import, hash for
    decision), chained after the last entry, in key order; within the caller's transaction. A key
    named twice is logged twice; a key with no stored row (``staged``: no digest taken) is not
    logged. The digests come from the view (``run_digests`` / ``decision_digests``), or with
    ``staged`` from those the caller took (``take_digests``) after its last write of the rows.

    Set-based, because row-by-row inserts made this most of an ingest's time: the keys go to DuckDB
    as one Arrow table and the entries come back as one (for the view, DuckDB pushes the join's keys
    into the scan of the view's table, a dynamic filter, so only these rows reach the digest). Only
    the chain is a Python loop: each hash needs the one before it."""
    if not keys:
        return
    view, col = ("decision_digests", "hash") if kind == "decision" else ("run_digests", "run_key")
    if staged:
        view, col = STAGED, "key"
    con.register("ledger_keys", pa.table({"k": pa.array(keys, pa.string())}))
    try:
        got = con.sql(
            f"SELECT {col} AS key, digest FROM {view} JOIN ledger_keys ON k = {col} ORDER BY {col}"
        ).to_arrow_table()
    finally:
        con.unregister("ledger_keys")
    last = head(con)
    seq, prev = last["seq"], last["hash"]
    at = datetime.now(UTC).replace(tzinfo=None).strftime(_TS)
    prevs, hashes = [], []
    for key, digest in zip(got["key"].to_pylist(), got["digest"].to_pylist()):
        seq += 1
        prevs.append(prev)
        prev = _link(prev, seq, at, kind, key, digest)
        hashes.append(prev)
    con.register(
        "ledger_rows",
        pa.table(
            {
                "seq": pa.array(range(last["seq"] + 1, seq + 1), pa.int64()),
                "key": got["key"],
                "content_hash": got["digest"],
                "prev": pa.array(prevs, pa.string()),
                "hash": pa.array(hashes, pa.string()),
            }
        ),
    )
    try:  # ``at`` is cast from the very string that was hashed, so verify's strftime gives it back
        con.execute(
            "INSERT INTO ingest_log SELECT seq, $at::TIMESTAMP, $kind, key, content_hash, prev, "
            "hash FROM ledger_rows",
            {"at": at, "kind": kind},
        )
    finally:
        con.unregister("ledger_rows")


# The chain recomputed in DuckDB, set-based (the same test as walking the log in seq order: each
# entry follows the one before it by seq and by hash): the previous entry is the one before in seq
# order (``lag``), and an entry is altered when its stored prev is not that entry's hash or its
# hash is not the link (``_link``: the same text, the same sha256) of that hash and its fields.
# Every column is NOT NULL and seq the key, so the text is the one ``append`` hashed. In seq order,
# a gap before an entry reported first; some 4 times faster than the Python loop it replaced,
# which fetched every entry into the interpreter (half of an audit of 100,000 runs).
_CHAIN_BREAKS = f"""
WITH e AS (
    SELECT seq, key, prev, hash, coalesce(lag(seq) OVER w, 0) + 1 AS expect,
        sha256(concat_ws('|', coalesce(lag(hash) OVER w, $genesis), seq,
            strftime(logged_at, '{_TS}'), kind, key, content_hash)) AS link,
        coalesce(lag(hash) OVER w, $genesis) AS before
    FROM ingest_log WINDOW w AS (ORDER BY seq))
SELECT seq, key, reason FROM (
    SELECT seq, key, 0 AS k,
        'entries ' || expect || '..' || (seq - 1) || ' are missing from the log' AS reason
        FROM e WHERE seq <> expect
    UNION ALL
    SELECT seq, key, 1, 'entry altered: its hash does not follow from the chain'
        FROM e WHERE prev <> before OR link <> hash)
ORDER BY seq, k"""


def verify(con) -> list[dict]:
    """Breaks of the chain, and stored runs and decisions that disagree with their last entry
    (empty: intact)."""
    if not has_log(con):
        return [
            {
                "seq": None,
                "key": None,
                "reason": "the registry predates the ingest log: nothing vouches for its "
                "rows (re-ingest the results directory into a new registry)",
            }
        ]
    out = [
        {"seq": seq, "key": key, "reason": reason}
        for seq, key, reason in con.sql(_CHAIN_BREAKS, params={"genesis": GENESIS}).fetchall()
    ]
    last = (
        "SELECT key, arg_max(content_hash, seq) AS content_hash FROM ingest_log WHERE kind IN "
        "{} GROUP BY key"
    )
    out += [
        {"seq": None, "key": k, "reason": r}
        for k, r in con.sql(
            """
        SELECT v.run_key, CASE WHEN l.key IS NULL """
            """THEN 'run not in the ingest log (added outside ingest)'
                               ELSE """
            f"""'run differs from what ingest accepted (edited in the registry)' END
        FROM run_digests v LEFT JOIN ({last.format("('run', 'replacement', 'import')")}) l """
            """ON l.key = v.run_key
        WHERE l.key IS NULL OR l.content_hash <> v.digest
        UNION ALL
        SELECT v.hash, CASE WHEN l.key IS NULL """
            """THEN 'decision not in the ingest log (added outside ingest)'
                            ELSE """
            f"""'decision differs from what ingest accepted (edited in the registry)' END
        FROM decision_digests v LEFT JOIN ({last.format("('decision',)")}) l ON l.key = v.hash
        WHERE l.key IS NULL OR l.content_hash <> v.digest
        ORDER BY 1"""
        ).fetchall()
    ]
    return out
