"""The DuckDB results registry: one file, plain-SQL schema with a migration table.

Many workers write run-record files; exactly one process ingests them (``ingest.py``). A second
process that opens the file while another holds its lock waits (``SUPPORTBENCH_LOCK_TIMEOUT`` seconds,
default 120) and then stops with a clear message; it never dies on DuckDB's raw lock error.
``query_connection`` is the locked-down connection behind ``registry query``: read-only, no access to
other files, configuration locked, one read statement at a time. Nothing here imports torch or
transformers.
"""

from __future__ import annotations

import math
import os
import threading
import time
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import duckdb

from supportbench.errors import RegistryError
from supportbench.experiments.results import DEFAULT_RESULTS

SCHEMA_VERSION = 1
DEFAULT_PATH = DEFAULT_RESULTS.registry


def _schema_sql() -> str:
    return resources.files("supportbench.registry").joinpath("schema.sql").read_text()


def _open(path: Path, read_only: bool, config: dict | None = None,
          timeout: float | None = None) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, waiting while another process holds the file's lock; errors name the file."""
    timeout = float(os.environ.get("SUPPORTBENCH_LOCK_TIMEOUT", 120)) if timeout is None else timeout
    deadline, delay = time.monotonic() + timeout, 0.05
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=config or {})
        except duckdb.IOException as exc:
            msg = str(exc)
            if "lock" in msg.lower():
                if time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                raise RegistryError(f"registry '{path}' is locked by another process (an ingest?); waited "
                                    f"{timeout:.0f} s (SUPPORTBENCH_LOCK_TIMEOUT). Retry when it has "
                                    "finished") from None
            raise RegistryError(f"'{path}' is not a DuckDB registry file: {msg.splitlines()[0]}") from None
        except duckdb.Error as exc:
            raise RegistryError(f"'{path}' cannot be opened as a DuckDB registry: {str(exc).splitlines()[0]}") from None


def connect(path: str | Path = DEFAULT_PATH, *, read_only: bool = False,
            timeout: float | None = None) -> duckdb.DuckDBPyConnection:
    """Open (and, when writable, create or migrate) the registry at ``path``."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise RegistryError(f"registry path '{path}' is a directory, not a DuckDB file")
    if read_only:
        if not path.exists():
            raise RegistryError(f"no registry at '{path}' (create one with `supportbench registry ingest`)")
        con = _open(path, True, timeout=timeout)
        _check_version(con, path)
        return con
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _create(path)
    con = _open(path, False, timeout=timeout)
    migrate(con)
    return con


def _create(path: Path) -> None:
    """Create the registry whole, then publish it: built and migrated under a private name, closed
    (checkpointed, no WAL left), then hard-linked to ``path``. Another process that opens ``path``
    meanwhile sees either no file or a complete registry, never DuckDB's half-written header. When two
    processes race to create it, the first link wins and the other's copy is dropped."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.creating")
    try:
        con = _open(tmp, False)
        try:
            migrate(con)
        finally:
            con.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:   # a file system without hard links: a rename, not atomic against a racing creator
            if not path.exists():
                os.replace(tmp, path)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)


READ_STATEMENTS = ("SELECT",)


def query_connection(path: str | Path) -> duckdb.DuckDBPyConnection:
    """A connection for user SQL: read-only, no file or network access beyond this registry
    (``enable_external_access = false``), and ``lock_configuration`` so the query cannot undo either."""
    path = Path(path)
    if not path.is_file():
        raise RegistryError(f"no registry at '{path}' (create one with `supportbench registry ingest`)")
    con = _open(path, True, config={"enable_external_access": False})
    _check_version(con, path)
    memory = os.environ.get("SUPPORTBENCH_QUERY_MEMORY", "2GB")
    try:
        con.execute(f"SET memory_limit = '{memory}'")   # an unbounded recursive CTE stops at it
    except duckdb.Error:
        raise RegistryError(f"SUPPORTBENCH_QUERY_MEMORY={memory!r} is not a memory size (e.g. 2GB, 500MB)") from None
    con.execute("SET lock_configuration = true")
    return con


def query_seconds() -> float:
    """The time limit of one user query: ``SUPPORTBENCH_QUERY_SECONDS`` (default 30)."""
    raw = os.environ.get("SUPPORTBENCH_QUERY_SECONDS", "30")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise RegistryError(f"SUPPORTBENCH_QUERY_SECONDS={raw!r} must be a number of seconds > 0")
    return value


def run_query(con: duckdb.DuckDBPyConnection, sql: str, *, seconds: float | None = None,
              max_rows: int = 10_000) -> str:
    """Run one read statement (SELECT, WITH ... SELECT, VALUES, a table function) and render its first
    ``max_rows`` rows; refuse anything else: several statements, COPY, EXPORT, ATTACH, SET, PRAGMA, writes. A
    query still running after ``seconds`` (``query_seconds()``) is interrupted: a one-line error, not a hang."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise RegistryError(f"cannot parse the query: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise RegistryError(f"one statement at a time, got {len(statements)}")
    kind = statements[0].type.name
    if kind not in READ_STATEMENTS:
        raise RegistryError(f"the query connection is read-only: only read queries (SELECT ...) are allowed, "
                            f"got a statement of type {kind}")
    limit = query_seconds() if seconds is None else seconds
    timer = threading.Timer(limit, con.interrupt)
    timer.start()
    try:
        return str(con.sql(sql).limit(max_rows))
    except duckdb.InterruptException:
        raise RegistryError(f"query stopped at its time limit of {limit:g} s (SUPPORTBENCH_QUERY_SECONDS)") from None
    except duckdb.OutOfMemoryException:
        raise RegistryError("query stopped at its memory limit (SUPPORTBENCH_QUERY_MEMORY)") from None
    except duckdb.Error as exc:
        raise RegistryError(f"query failed: {str(exc).splitlines()[0]}") from None
    finally:
        timer.cancel()


def migrate(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("BEGIN")
    try:
        con.execute(_schema_sql())
        # columns added within schema version 1 (older files gain them, empty)
        con.execute("ALTER TABLE provenance ADD COLUMN IF NOT EXISTS fingerprint VARCHAR")
        have = con.execute("SELECT max(version) FROM schema_migrations").fetchall()[0][0]
        if have is None:
            con.execute("INSERT INTO schema_migrations VALUES (?, ?)", [SCHEMA_VERSION, datetime.now(UTC)])
        elif have > SCHEMA_VERSION:
            raise RegistryError(f"registry schema version {have} is newer than this supportbench ({SCHEMA_VERSION})")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _check_version(con, path) -> None:
    try:
        have = con.execute("SELECT max(version) FROM schema_migrations").fetchall()[0][0]
    except duckdb.CatalogException:
        raise RegistryError(f"'{path}' is not a supportbench registry (no schema_migrations table)") from None
    if have != SCHEMA_VERSION:
        raise RegistryError(f"registry '{path}' has schema version {have}; this supportbench reads {SCHEMA_VERSION}")


def one(con, sql: str, params=None):
    """The first row of a query or None. (DuckDB keeps a half-fetched result open; fetch it all.)"""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None


def scalar(con, sql: str, params=None):
    row = one(con, sql, params)
    return row[0] if row else None
