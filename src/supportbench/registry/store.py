"""The DuckDB results registry: one file, plain-SQL schema with a migration table.

Many workers write run-record files; exactly one process ingests them (``ingest.py``). Nothing here
imports torch or transformers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import duckdb

from supportbench.errors import RegistryError

SCHEMA_VERSION = 1
DEFAULT_PATH = Path("results") / "registry.duckdb"


def _schema_sql() -> str:
    return resources.files("supportbench.registry").joinpath("schema.sql").read_text()


def connect(path: str | Path = DEFAULT_PATH, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (and, when writable, create or migrate) the registry at ``path``."""
    path = Path(path)
    if read_only:
        if not path.exists():
            raise RegistryError(f"no registry at '{path}' (create one with `supportbench registry ingest`)")
        con = duckdb.connect(str(path), read_only=True)
        _check_version(con, path)
        return con
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path))
    migrate(con)
    return con


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
