"""The DuckDB results registry: one file, plain-SQL schema with a migration table.

Many workers write run-record files; exactly one process ingests them (``ingest.py``). A second
process that opens the file while another holds its lock waits (``SUPPORTBENCH_LOCK_TIMEOUT``
seconds, default 120) and then stops with a message naming the holder; it never dies on DuckDB's raw
lock error. Who holds the lock: a process that opens the registry for writing, or for one statement
of a query session, leaves an owner note ``<registry>.owner`` (JSON: pid, host, command line, mode,
since; written atomically, removed when it closes; a note whose pid is dead is ignored), and
DuckDB's own lock error names the holding pid, whose command line is read from ``/proc`` when no
note describes it. ``query_connection`` is the locked-down connection behind ``registry query``:
read-only, no access to other files, configuration locked, one read statement at a time. Nothing
here imports torch or transformers.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
import shlex
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from supportbench._signals import Noted, interruptible, noting_interrupts
from supportbench.errors import RegistryError
from supportbench.experiments import metric_names
from supportbench.experiments.results import DEFAULT_RESULTS

SCHEMA_VERSION = 1
T = TypeVar("T")
DEFAULT_PATH = DEFAULT_RESULTS.registry


def _schema_sql() -> str:
    """schema.sql with the metric vocabulary's rows filled in (``experiments.metric_names``)."""
    text = resources.files("supportbench.registry").joinpath("schema.sql").read_text()
    return text.replace("{METRIC_NAMES}", metric_names.sql_values())


_DECIMAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def strict_float(text: str) -> float | None:
    """A finite decimal number written as one (``1``, ``-0.5``, ``2e3``), or None: no underscores
    (Python's ``float`` takes ``1_000``), no hex, no inf or nan, no surrounding blanks."""
    if not isinstance(text, str) or not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


LOCK_TIMEOUT = "SUPPORTBENCH_LOCK_TIMEOUT"
MAX_WAIT = (
    7 * 24 * 3600.0
)  # a week: any longer wait or query limit is a typo (a timer cannot hold 1e308 s)


def lock_timeout() -> float:
    """How long to wait for another process's lock: ``SUPPORTBENCH_LOCK_TIMEOUT`` seconds (120)."""
    raw = os.environ.get(LOCK_TIMEOUT)
    if raw is None:
        return 120.0
    value = strict_float(raw)
    if value is None or not 0 <= value <= MAX_WAIT:
        raise RegistryError(
            f"{LOCK_TIMEOUT}={raw!r} is not allowed: it is the seconds to wait for "
            f"another process's lock, a decimal number in 0..{MAX_WAIT:.0f} (default 120)"
        )
    return value


# ---- the lock owner's note ----------------------------------------------------------------------
def owner_path(path: str | Path) -> Path:
    """The owner note of a registry file: ``<registry>.owner``."""
    path = Path(path)
    return path.with_name(path.name + ".owner")


def _write_owner(path: Path, mode: str) -> None:
    """Say who holds the registry (best effort: a folder the process cannot write gets no note)."""
    from supportbench._io import write_json_atomic

    note = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "mode": mode,
        "command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with contextlib.suppress(OSError):
        write_json_atomic(owner_path(path), note)


def release_owner(path: str | Path) -> None:
    """Remove the owner note when it is this process's (another may have written its own since)."""
    note = owner_path(path)
    try:
        mine = json.loads(note.read_text(encoding="utf-8"))
        if mine.get("pid") == os.getpid() and mine.get("host") == socket.gethostname():
            note.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def _alive(pid) -> bool:
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by another user
        return True
    return True


def _proc_command(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return shlex.join(a.decode(errors="replace") for a in raw.split(b"\0") if a) or None


def _one_line(text, limit: int = 300) -> str:
    """A command line as one line of a message: blanks and control characters collapsed, cut."""
    text = " ".join(re.sub(r"[\x00-\x1f\x7f]", " ", str(text)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def lock_holder(path: str | Path, duckdb_message: str = "") -> str:
    """Who holds the registry's lock, in words: its owner note, else the pid DuckDB names (with its
    command line from /proc), else 'another process'. A note is believed when its pid is the one
    DuckDB names, or (DuckDB naming none) when that pid is alive; one from another host is shown."""
    m = re.search(r"PID (\d+)", duckdb_message)
    pid = int(m.group(1)) if m else None
    try:
        note = json.loads(owner_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        note = None
    if isinstance(note, dict):
        here = note.get("host") == socket.gethostname()
        pid_holds = note.get("pid") == pid if pid is not None else _alive(note.get("pid"))
        if pid_holds or not here:
            mode = note.get("mode")
            what = {"write": "writing", "query": "running a query"}.get(mode, str(mode))
            where = "" if here else f" on host {note.get('host')}"
            return (
                f"pid {note.get('pid')}{where} ({what} since {note.get('since')}): "
                f"{_one_line(note.get('command'))}"
            )
    if pid is not None:
        cmd = _proc_command(pid)
        return f"pid {pid}" + (f": {_one_line(cmd)}" if cmd else " (it left no owner note)")
    return "another process (it left no owner note)"


def _open(
    path: Path, read_only: bool, config: dict | None = None, timeout: float | None = None
) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, waiting while another process holds the file's lock; errors name the file
    and the lock's holder."""
    timeout = lock_timeout() if timeout is None else timeout
    deadline, delay = time.monotonic() + timeout, 0.05
    while True:
        try:
            return _connect(path, read_only, config or {})
        except duckdb.IOException as exc:
            msg = str(exc)
            if "lock" in msg.lower():
                if time.monotonic() < deadline:
                    time.sleep(min(delay, max(deadline - time.monotonic(), 0.01)))
                    delay = min(delay * 2, 1.0)
                    continue
                raise RegistryError(
                    f"registry '{path}' is locked by another process, "
                    f"{lock_holder(path, msg)}; waited {timeout:g} s "
                    f"({LOCK_TIMEOUT}). Retry when it has finished"
                ) from None
            if (
                not read_only
                and path.exists()
                and not os.access(path, os.W_OK)
                or "read-only" in msg.lower()
            ):
                raise RegistryError(
                    f"registry '{path}' cannot be written ({msg.splitlines()[0]}): a read-only "
                    "file or file system; reading it needs no write access (registry query, "
                    "report)"
                ) from None
            raise RegistryError(
                f"'{path}' is not a DuckDB registry file: {msg.splitlines()[0]}"
            ) from None
        except duckdb.Error as exc:
            msg = str(exc).splitlines()[0]
            if "Unique file handle conflict" in msg or "different configuration" in msg:
                raise RegistryError(
                    f"registry '{path}' is already open in this process ({msg}): close that "
                    "connection first (store.close); a process opens a registry once at a time"
                ) from None
            raise RegistryError(f"'{path}' cannot be opened as a DuckDB registry: {msg}") from None


# Rows per row group of a registry opened for writing (DuckDB's default: 122,880). DuckDB compresses
# one row group per task when it commits, and scans one per thread: an ingest of up to 122,880 runs
# wrote each table as one row group, committed on one core. About a quarter of that lets a
# 100,000-record ingest commit in about half the time on two cores (bench/registry.py) for ~6 %
# more file; not stored in the file, so each writing connection asks for it.
ROW_GROUP = 32_768


def as_duckdb_sees(path: Path) -> Path:
    """``path`` with its folder resolved, as the registry hands it to DuckDB (``_connect``)."""
    return path.parent.resolve() / path.name


def _connect(path: Path, read_only: bool, config: dict) -> duckdb.DuckDBPyConnection:
    """The registry at ``path`` as the connection's default database: read-only as it is, for
    writing attached with ``ROW_GROUP`` rows per row group. DuckDB is given the path with its
    folder resolved: it reads a relative name that starts with a word and a colon (``md:``,
    ``sqlite:``, ``duckdb:``) as a database type or service, and collapses '..' as text where the
    file system follows a symbolic link first."""
    path = as_duckdb_sees(path)
    if read_only:
        return duckdb.connect(str(path), read_only=True, config=config)
    con = duckdb.connect(config=config)
    try:
        quoted = str(path).replace("'", "''")
        con.execute(f"ATTACH '{quoted}' AS registry (ROW_GROUP_SIZE {ROW_GROUP})")
        con.execute("USE registry")
    except BaseException:
        con.close()
        raise
    return con


def _own(con: duckdb.DuckDBPyConnection, path: Path, mode: str) -> duckdb.DuckDBPyConnection:
    """Leave the owner note while ``con`` is open: removed by ``close``, or when ``con`` is
    collected (or the process exits)."""
    _write_owner(path, mode)
    weakref.finalize(con, release_owner, path)
    return con


def close(con: duckdb.DuckDBPyConnection, path: str | Path) -> None:
    """Close a connection ``connect`` or ``query_connection`` opened; its owner note goes."""
    release_owner(path)
    con.close()


WAL = ".wal"  # the write-ahead log DuckDB keeps beside a registry while it is open


@contextlib.contextmanager
def transaction(con):
    """One DuckDB transaction around the block: committed when it ends, rolled back on any error
    or interrupt (then raised again), so a failed ingest or import leaves the registry as it was.
    A commit DuckDB refuses (a full disk, a log it cannot write) is a ``RegistryError`` naming the
    registry: DuckDB has rolled the transaction back, nothing of it is stored. The block's own
    COMMIT or ROLLBACK ends it early (what it committed stays); its error is still the one
    raised. A Ctrl-C at any moment of it (the block, the rollback, the commit) is raised as
    ``KeyboardInterrupt``, whatever DuckDB made of it (``_signals.noting_interrupts``)."""
    with noting_interrupts() as noted:
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
        except BaseException as exc:
            _roll_back(con, noted, exc)
            raise
        try:
            con.execute("COMMIT")
        except BaseException as exc:
            _roll_back(con, noted, exc)  # rolled back already, unless DuckDB left it open
            if not isinstance(exc, duckdb.Error):
                raise
            raise RegistryError(
                f"registry '{_database_path(con)}' did not store the change, nothing of it is "
                f"kept: {str(exc).splitlines()[0]}"
            ) from None


def _roll_back(con, noted: Noted, exc: BaseException) -> None:
    """Roll back after ``exc`` ended the block or its commit, and raise KeyboardInterrupt if a
    Ctrl-C came during the transaction; else the caller raises ``exc``. The error raised is never
    the rollback's own: one DuckDB refuses (the transaction ended already), or one a second Ctrl-C
    interrupts."""
    with contextlib.suppress(duckdb.Error, RuntimeError):
        con.execute("ROLLBACK")
    if noted.hit and not isinstance(exc, KeyboardInterrupt):
        raise KeyboardInterrupt from exc


def _database_path(con) -> str:
    """The file of ``con``'s default database, for a message."""
    with contextlib.suppress(duckdb.Error):
        rows = con.execute(
            "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchall()
        if rows and rows[0][0]:
            return rows[0][0]
    return "(this connection's registry)"


def check_path(
    path: str | Path,
    what: str = "registry path",
    *,
    writing: bool = False,
    duckdb_file: bool = True,
) -> Path:
    """``path`` as a Path, or a ``RegistryError`` naming it when the file system could not use it: a
    name too long for it, a place under a file or under a link to no folder, a relative path when
    the working folder is gone, a folder that cannot be resolved (a loop of links: for any path, as
    every caller would fail on it later), or (``writing``) a nearest existing folder nothing can be
    made in; for a file DuckDB opens (``duckdb_file``), a backslash in the resolved path, which
    DuckDB reads as a folder separator. Asked before the path is looked up at all (a too long name
    fails even ``exists``)."""
    from supportbench import _io

    path = Path(path)
    if not path.is_absolute():
        try:
            os.getcwd()
        except OSError as exc:  # the working folder was deleted: a relative path names nothing
            raise RegistryError(
                f"{what} '{path}': a relative path, and the working folder is gone "
                f"({exc.strerror}); name it by an absolute path"
            ) from None
    why = _io.too_long(path)
    if why:
        raise RegistryError(f"{what} '{path}': {why}")
    if path.name and _io.too_long(path.with_name(path.name + WAL)):  # DuckDB's log beside it
        raise RegistryError(
            f"{what} '{path}': the name is too long for DuckDB's '{WAL}' file "
            f"beside it (at most {_io.NAME_MAX - len(WAL)} bytes)"
        )
    above = _io.file_ancestor(path)
    if above is not None:
        raise RegistryError(
            f"{what} '{path}' lies under '{above}', which is {_io.what_is_there(above)}"
        )
    try:
        full = str(as_duckdb_sees(path))
    except (OSError, RuntimeError) as exc:  # a loop of links
        raise RegistryError(f"{what} '{path}': its folder cannot be resolved ({exc})") from None
    if duckdb_file and "\\" in full:
        raise RegistryError(
            f"{what} '{path}': DuckDB reads the backslash in '{full}' as a folder separator "
            f"(it would open '{full.replace(chr(92), '/')}'); name it without a backslash"
        )
    if writing and not path.exists():
        why = _io.cannot_write_in(_io.nearest_existing(path))
        if why:
            raise RegistryError(
                f"{what} '{path}': '{_io.nearest_existing(path)}' is not writable ({why})"
            )
    return path


def not_a_file(path: Path) -> None:
    """A ``RegistryError`` when something that is not a regular file is at the registry's path."""
    if path.exists() and not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file (a device, FIFO or socket)"
        raise RegistryError(f"registry path '{path}' is {kind}, not a DuckDB file")


def connect(
    path: str | Path = DEFAULT_PATH, *, read_only: bool = False, timeout: float | None = None
) -> duckdb.DuckDBPyConnection:
    """Open (and, when writable, create or migrate) the registry at ``path``."""
    path = check_path(path, writing=not read_only)
    not_a_file(path)
    if read_only:
        if not path.exists():
            raise RegistryError(
                f"no registry at '{path}' (create one with `supportbench registry ingest`)"
            )
        con = _open(path, True, timeout=timeout)
        _check_version(con, path)
        return con
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _create(path)
    _folder_takes_the_log(path)  # also after _create: a dangling link's folder may not exist
    con = _open(path, False, timeout=timeout)
    _own(con, path, "write")
    try:
        migrate(con)
    except BaseException:
        close(con, path)
        raise
    return con


def _folder_takes_the_log(path: Path) -> None:
    """A ``RegistryError`` when nothing can be created in the registry's folder (its target's, for
    a symbolic link): DuckDB writes its log (``<registry>.wal``) there on the first change, and
    fails only then, at the commit."""
    from supportbench import _io

    try:
        folder = path.resolve().parent  # a link's target's: DuckDB writes the log beside the file
    except (OSError, RuntimeError) as exc:  # a link to itself, a loop of links
        raise RegistryError(f"registry '{path}': it cannot be resolved ({exc})") from None
    why = _io.cannot_write_in(folder)
    if why:
        raise RegistryError(
            f"registry '{path}' cannot be written: its folder '{folder}' takes no new file "
            f"({why}), and DuckDB writes its log '{path.name}{WAL}' there; reading it needs no "
            "write access (registry query, report)"
        )


def write_session(path: str | Path, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
    """``work(con)`` on the registry at ``path``, opened for writing and closed after. A registry
    that does not exist yet is built under a private name and published only when ``work`` succeeds
    (as ``_create`` publishes), and folders made for it are removed when it fails: a refused ingest
    or import leaves no file behind. When another process publishes the registry meanwhile, the
    work is done again in that one."""
    path = check_path(path, writing=True)
    not_a_file(path)
    if path.exists():
        con = connect(path)
        try:
            return work(con)
        finally:
            close(con, path)
    made = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    ok = False
    try:
        result = _create(path, work)
        ok = True
    finally:
        for d in made if not ok else ():
            with contextlib.suppress(OSError):
                d.rmdir()
    if result is _RACED:
        return write_session(path, work)
    return result


_RACED = object()  # ``_create``: another process published the registry first


def _create(path: Path, work: Callable | None = None):
    """Create the registry whole, then publish it: built and migrated under a private name, closed
    (checkpointed, no WAL left), then hard-linked to ``path``. Another process that opens ``path``
    meanwhile sees either no file or a complete registry, never DuckDB's half-written header. When
    two processes race to create it, the first link wins and the other's copy is dropped."""
    # a short private name: the registry's own may already be near the file system's limit
    tmp = path.with_name(f".supportbench-{os.getpid()}-{threading.get_ident()}.creating")
    _remove_dead_creations(path.parent)
    result = None
    try:
        con = _open(tmp, False)
        try:
            migrate(con)
            if work is not None:
                result = work(con)
        finally:
            con.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            return _RACED if work is not None else None
        except OSError:  # no hard links here: a rename, not atomic against a racing creator
            if path.exists():
                return _RACED if work is not None else None
            os.replace(tmp, path)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + WAL)):
            leftover.unlink(missing_ok=True)
    return result


_CREATING = re.compile(r"\.supportbench-(\d+)-\d+\.creating(\.wal)?")


def _remove_dead_creations(folder: Path) -> None:
    """Remove the private copies (and their logs) that a creator killed with -9 left in ``folder``:
    those whose process is gone. A live creator's copy is left alone."""
    try:
        names = [e.name for e in os.scandir(folder) if _CREATING.fullmatch(e.name)]
    except OSError:
        return
    for name in names:
        pid = int(_CREATING.fullmatch(name).group(1))
        try:
            os.kill(pid, 0)
            continue  # alive (or not ours to signal): not a leftover
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        with contextlib.suppress(OSError):
            (folder / name).unlink()


READ_STATEMENTS = ("SELECT",)
QUERY_FORMATS = ("table", "csv", "json")
MAX_ROWS = 10_000


def query_connection(path: str | Path) -> duckdb.DuckDBPyConnection:
    """A connection for user SQL: read-only, no file or network access beyond this registry
    (``enable_external_access = false``), and ``lock_configuration`` so the query cannot undo
    either. It leaves an owner note (mode 'query') while open: ``close(con, path)`` when the
    statement is done (the prompt opens one per statement, so an idle prompt holds no lock)."""
    path = check_path(path)
    not_a_file(path)
    if not path.is_file():
        raise RegistryError(
            f"no registry at '{path}' (create one with `supportbench registry ingest`)"
        )
    memory = os.environ.get("SUPPORTBENCH_QUERY_MEMORY", "2GB")
    con = _open(path, True, config={"enable_external_access": False})
    try:
        _check_version(con, path)
        try:
            con.execute(f"SET memory_limit = '{memory}'")  # an unbounded recursive CTE stops at it
        except duckdb.Error:
            raise RegistryError(
                f"SUPPORTBENCH_QUERY_MEMORY={memory!r} is not a memory size (e.g. 2GB, 500MB)"
            ) from None
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return _own(con, path, "query")


def query_seconds() -> float:
    """The time limit of one user query: ``SUPPORTBENCH_QUERY_SECONDS`` (default 30)."""
    raw = os.environ.get("SUPPORTBENCH_QUERY_SECONDS", "30")
    value = strict_float(raw)
    if value is None or not 0 < value <= MAX_WAIT:
        raise RegistryError(
            f"SUPPORTBENCH_QUERY_SECONDS={raw!r} must be a number of seconds in "
            f"(0, {MAX_WAIT:.0f}] (default 30)"
        )
    return value


@dataclass
class QueryResult:
    """A read query's first ``max_rows`` rows (``rows``, an Arrow table), and whether it had more
    (``cut``)."""

    rows: Any
    cut: bool
    max_rows: int


def run_query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    *,
    seconds: float | None = None,
    max_rows: int = MAX_ROWS,
) -> QueryResult:
    """Run one read statement (SELECT, WITH ... SELECT, VALUES, a table function) and keep its
    first ``max_rows`` rows; refuse anything else: several statements, COPY, EXPORT, ATTACH, SET,
    PRAGMA, writes. A query still running after ``seconds`` (``query_seconds()``) is interrupted:
    a one-line error, not a hang."""
    if not sql.strip():
        raise RegistryError("the query is empty; give one read statement (SELECT ...)")
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise RegistryError(f"cannot parse the query: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise RegistryError(f"one statement at a time, got {len(statements)}")
    kind = statements[0].type.name
    if kind not in READ_STATEMENTS:
        raise RegistryError(
            f"the query connection is read-only: only read queries (SELECT ...) are allowed, "
            f"got a statement of type {kind}"
        )
    limit = query_seconds() if seconds is None else seconds
    try:
        table = interruptible(
            lambda: con.sql(sql).limit(max_rows + 1).to_arrow_table(),
            con.interrupt,
            limit,
            name="supportbench-query",
        )
    except TimeoutError:
        raise RegistryError(
            f"query stopped at its time limit of {limit:g} s (SUPPORTBENCH_QUERY_SECONDS)"
        ) from None
    except duckdb.OutOfMemoryException:
        raise RegistryError(
            "query stopped at its memory limit (SUPPORTBENCH_QUERY_MEMORY)"
        ) from None
    except duckdb.Error as exc:
        raise RegistryError(f"query failed: {str(exc).splitlines()[0]}") from None
    return QueryResult(table.slice(0, max_rows), table.num_rows > max_rows, max_rows)


def render(result: QueryResult, fmt: str = "table") -> str:
    """A query's rows as text: ``table`` (DuckDB's box, every row kept, a line saying when
    ``max_rows`` cut the result), ``csv`` (a header row, then the rows; NULL is empty, NaN nan;
    lists and structs as JSON) or ``json`` (a list of objects; NaN and infinities as null, as JSON
    has no such numbers). csv and json carry rows only: the caller says on stderr when the limit
    cut them (``cut_note``)."""
    if fmt not in QUERY_FORMATS:
        raise RegistryError(
            f"--format {fmt!r} is not a query format; allowed: {', '.join(QUERY_FORMATS)}"
        )
    t = result.rows
    if fmt == "table":
        buf = io.StringIO()
        mem = duckdb.connect()
        try:
            with contextlib.redirect_stdout(buf):
                mem.from_arrow(t).show(max_rows=t.num_rows + 1, max_width=1_000_000)
        finally:
            mem.close()
        text = buf.getvalue().rstrip("\n")
        return text + ("\n" + cut_note(result) if result.cut else "")
    if fmt == "json":
        records = [{k: _plain(v) for k, v in row.items()} for row in t.to_pylist()]
        return json.dumps(records, ensure_ascii=False, allow_nan=False)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(t.column_names)
    for row in t.to_pylist():  # numbers as Python writes them (nan, inf), nested values as JSON
        w.writerow(
            [
                json.dumps(_plain(v), ensure_ascii=False) if isinstance(v, list | dict) else v
                for v in row.values()
            ]
        )
    return buf.getvalue().rstrip("\n")


def cut_note(result: QueryResult) -> str:
    return (
        f"(the first {result.max_rows:,} rows are shown: the query returned more; narrow it "
        "with WHERE or LIMIT)"
    )


def _plain(v):
    """A query value as JSON can carry it: finite numbers, text, lists, objects, null."""
    import datetime as dt
    import decimal
    import uuid

    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, decimal.Decimal):
        return _plain(float(v))
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        if v and all(isinstance(p, tuple) and len(p) == 2 for p in v):  # a MAP: (key, value)s
            return {str(k): _plain(x) for k, x in v}
        return [_plain(x) for x in v]
    return v


def migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Create the schema's tables that are missing, and record the schema version."""
    with transaction(con):
        # columns added within schema version 1 (older files gain them, empty), before the schema's
        # views, which read them; a new file's tables come from the schema itself
        for column in ("fingerprint", "cpu_mode"):
            con.execute(
                f"ALTER TABLE IF EXISTS provenance ADD COLUMN IF NOT EXISTS {column} VARCHAR"
            )
        con.execute(_schema_sql())
        have = con.execute("SELECT max(version) FROM schema_migrations").fetchall()[0][0]
        if have is None:
            con.execute(
                "INSERT INTO schema_migrations VALUES (?, ?)", [SCHEMA_VERSION, datetime.now(UTC)]
            )
        elif have > SCHEMA_VERSION:
            raise RegistryError(
                f"registry schema version {have} is newer than this supportbench ({SCHEMA_VERSION})"
            )


def _check_version(con, path) -> None:
    try:
        have = con.execute("SELECT max(version) FROM schema_migrations").fetchall()[0][0]
    except duckdb.CatalogException:
        raise RegistryError(
            f"'{path}' is not a supportbench registry (no schema_migrations table)"
        ) from None
    if have != SCHEMA_VERSION:
        raise RegistryError(
            f"registry '{path}' has schema version {have}; this supportbench reads {SCHEMA_VERSION}"
        )


def check_experiment(con, experiment: str, label: str = "--experiment") -> None:
    """``RegistryError`` unless the registry holds runs of ``experiment``; the message lists those
    it holds (``registry export --experiment`` and the Python API's frames say the same)."""
    present = [
        r[0] for r in con.execute("SELECT DISTINCT experiment FROM runs ORDER BY 1").fetchall()
    ]
    if experiment not in present:
        raise RegistryError(
            f"{label} {experiment!r}: no such experiment in the registry; it "
            f"holds: {', '.join(present) or 'none (the registry is empty)'}"
        )


def one(con, sql: str, params=None):
    """The first row of a query or None. (DuckDB keeps a half-fetched result open; fetch it all.)"""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None


def scalar(con, sql: str, params=None):
    row = one(con, sql, params)
    return row[0] if row else None


def has_steps(con) -> bool:
    """Whether the ``metrics`` view has the ``step`` column (a registry opened read-only whose view
    predates curves has none, and holds terminal rows only)."""
    return "step" in {r[0] for r in con.execute("DESCRIBE metrics").fetchall()}


def terminal_metrics(con, alias: str = "m") -> str:
    """The SQL condition that keeps the terminal model's rows of the ``metrics`` view (``step``
    NULL: a curve's points have their step); TRUE where the view predates curves."""
    return f"{alias}.step IS NULL" if has_steps(con) else "TRUE"
