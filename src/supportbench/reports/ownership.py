"""What ``supportbench report`` may write over, decided before any work (issue 33): a command
writes only what it owns.

``--out`` is replaced whole, so it may only be a new path, an empty folder, or a folder this command
wrote and nobody changed since: its ``MARKER`` file is a manifest of every entry the report wrote
(folders, and files with their sha256), and the folder must hold exactly that. A marker alone proves
nothing: one left in a folder that later received run records, decisions or a registry must not make
them the report's. ``--findings`` may only be a new file or a findings.md a report wrote (it carries
the provenance stamp). Neither may be, or hold, the registry. Staging folders a killed report left
beside ``--out`` are removed on the next start once their process is gone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from supportbench import _io
from supportbench.errors import RegistryError, ReportError
from supportbench.registry.store import WAL, check_path, not_a_file, owner_path
from supportbench.reports.findings import body_hash, read_stamp

MARKER = ".supportbench-report"  # the manifest of a report folder, inside it
MANIFEST_FORMAT = 2
# the whole marker before manifests (format 1): it said nothing about the folder's content, so a
# folder carrying it is never replaced (a hand-edited report.md under it would be lost unseen)
LEGACY_MARKER_TEXT = "written by `supportbench report`; the next report replaces this folder\n"
SHOWN = 3  # entries a refusal names; the rest are counted
MAX_MARKER = 16 << 20  # a marker or findings.md larger than this is no report's: not read


# ---- the report folder's manifest ---------------------------------------------------------------
def listing(folder: Path, within: frozenset[str] | dict | None = None) -> dict[str, str]:
    """Every entry under ``folder`` by path relative to it ('/'-separated; a folder ends with '/')
    and its kind: 'dir', 'file', or 'other' (a link, a socket...: nothing a report writes). Links
    are not followed. With ``within``, only the subfolders it names are entered: a folder no report
    wrote is named, not walked (``--out ~`` must not read a whole home folder). An unreadable
    folder raises ``OSError``."""
    out: dict[str, str] = {}
    stack = [(folder, "")]
    while stack:
        here, prefix = stack.pop()
        with os.scandir(here) as it:
            for e in it:
                rel = prefix + e.name
                if e.is_dir(follow_symlinks=False):
                    out[rel + "/"] = "dir"
                    if within is None or rel + "/" in within:
                        stack.append((Path(e.path), rel + "/"))
                else:
                    out[rel] = "file" if e.is_file(follow_symlinks=False) else "other"
    return dict(sorted(out.items()))


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_marker(folder: Path) -> Path:
    """Record every entry of the finished report ``folder`` in its marker: folders, and files with
    their sha256. Called last, once nothing else will be written into it (the PDF included)."""
    entries = {
        rel: (None if kind == "dir" else _sha256(folder / rel))
        for rel, kind in listing(folder).items()
        if rel != MARKER
    }
    doc = {
        "written_by": "supportbench report",
        "format": MANIFEST_FORMAT,
        "note": "the next report replaces this folder only while it holds exactly these entries",
        "entries": entries,
    }
    return _io.write_text_atomic(folder / MARKER, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _read_manifest(folder: Path) -> dict[str, str | None] | str | None:
    """The marker's entries; the string 'legacy' for a format-1 marker; None when there is no
    marker or it is not one a report wrote."""
    marker = folder / MARKER
    if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > MAX_MARKER:
        return None
    try:
        text = marker.read_text(encoding="utf-8")
        if text == LEGACY_MARKER_TEXT:
            return "legacy"
        doc = _io.loads_json(text)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        return None
    entries = doc.get("entries")
    ok = isinstance(entries, dict) and all(
        (v is None) == k.endswith("/") and (v is None or (isinstance(v, str) and len(v) == 64))
        for k, v in entries.items()
    )
    return entries if ok else None


def _named(paths: list[str]) -> str:
    more = len(paths) - SHOWN
    return ", ".join(paths[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def why_not_ours(folder: Path) -> str | None:
    """None when replacing the existing ``folder`` loses nothing but what a report wrote into it:
    it is empty, or holds exactly its marker's manifest, unchanged. Otherwise why not, naming the
    first few entries that are not the report's. A changed or missing file counts too: the folder
    is no longer as the report left it (a hand-edited report.md is the user's now)."""
    manifest = _read_manifest(folder)
    within = manifest if isinstance(manifest, dict) else frozenset()
    try:
        found = listing(folder, within)
    except OSError as exc:
        return f"part of it cannot be read ({exc.strerror}: {exc.filename})"
    if not found:
        return None
    if manifest is None:
        return f"not a report this command wrote: it holds {_named(list(found))}"
    if manifest == "legacy":
        return (
            "written by a report from before manifests, so whether anyone changed its files "
            "since cannot be told; move or delete it to write a report here"
        )
    extra = [
        rel
        for rel, kind in found.items()
        if rel != MARKER and (rel not in manifest or kind == "other")
    ]
    if extra:
        return f"it holds what no report wrote: {_named(extra)}"
    missing = [rel for rel in manifest if rel not in found]
    try:
        changed = [
            rel
            for rel, h in manifest.items()
            if h is not None and rel in found and _sha256(folder / rel) != h
        ]
    except OSError as exc:
        return f"part of it cannot be read ({exc.strerror}: {exc.filename})"
    parts = ([f"changed since: {_named(changed)}"] if changed else []) + (
        [f"missing: {_named(missing)}"] if missing else []
    )
    return "it is no longer as the report left it, " + "; ".join(parts) if parts else None


# ---- the arguments ------------------------------------------------------------------------------
def _short(path: Path) -> str:
    """``path`` for a one-line error: its start and end when it is too long to read."""
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]}"


def _same(a: Path, b: Path) -> bool:
    """One file under two names: the same resolved path, or the same inode (a hard link, a bind
    mount)."""
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_registry(registry: str | Path) -> Path:
    """The registry's resolved path, if it is an existing file; a one-line error otherwise (checked
    before anything is created: a report of a registry that is not there writes nothing). The
    names the file system cannot hold are the registry's own rule (``store.check_path``)."""
    given = check_path(registry, "--registry")
    not_a_file(given)
    if not given.is_file():
        raise RegistryError(
            f"no registry at '{given}' (create one with `supportbench registry ingest`)"
        )
    return given.resolve()


def _check_path_shape(given: Path, flag: str) -> Path:
    """What --out and --findings share: a name the file system can hold, not a link, not under a
    file, not the root. Returns the resolved path."""
    why = _io.too_long(given)
    if why:
        raise ReportError(f"{flag} '{_short(given)}': {why}; choose a shorter path")
    if given.is_symlink():
        raise ReportError(
            f"{flag} '{given}' is a symbolic link; give the path itself (the report "
            "will not replace a link or what it points to)"
        )
    path = given.resolve()
    parent = _io.file_ancestor(path)
    if parent is not None:
        raise ReportError(
            f"{flag} '{given}' lies under '{parent}', which is {_io.what_is_there(parent)}, "
            "not a folder; "
            "choose a path in a folder"
        )
    if path.parent == path:
        raise ReportError(f"{flag} '{given}' is the file-system root; choose a new path")
    return path


def _check_can_create(given: Path, path: Path, flag: str) -> None:
    """Something can be created where ``path`` will be: tried in its nearest existing ancestor."""
    where = _io.nearest_existing(path.parent)
    why = _io.cannot_write_in(where)
    if why:
        raise ReportError(
            f"{flag} '{given}': nothing can be created in '{where}' ({why}); "
            "choose a path in a folder you can write"
        )


def check_output_folder(out: str | Path, registry: Path | None = None) -> Path:
    """The report's folder, if the command may write it: a new path, an empty folder, or a report
    folder it wrote and nobody changed since (``why_not_ours``). Anything else — a file, a link, a
    path under a file, a folder with other content (a results directory, ``.``, a home folder), the
    registry or a folder holding it, a folder where nothing can be created — is refused before any
    work: a command only ever replaces what it owns."""
    given = Path(out)
    path = _check_path_shape(given, "--out")
    if registry is not None and (_same(path, registry) or registry.is_relative_to(path)):
        what = "is the registry" if _same(path, registry) else f"holds the registry '{registry}'"
        raise ReportError(
            f"--out '{given}' {what}; the report replaces its folder whole: choose a "
            "folder of its own, e.g. RESULTS/report"
        )
    if path.exists() and not path.is_dir():
        raise ReportError(
            f"--out '{given}' is a file, not a folder; the report writes a folder: "
            "choose a new path"
        )
    if path.is_dir():
        why = why_not_ours(path)
        if why:
            raise ReportError(
                f"--out '{given}' is a folder with other content ({why}): nothing "
                "was written; choose an empty or new folder, e.g. RESULTS/report"
            )
    _check_can_create(given, path, "--out")
    return path


def check_findings_path(
    findings: str | Path, registry: Path | None = None, out: Path | None = None
) -> Path:
    """Where ``--findings`` may write: a path that does not exist, in an existing folder where
    something can be created, or a findings.md a report wrote before (it carries the provenance
    stamp). Never the registry, a folder, any other file, or a path inside ``--out`` (which the
    report replaces whole, and which holds findings.md already)."""
    given = Path(findings)
    path = _check_path_shape(given, "--findings")
    if registry is not None and _same(path, registry):
        raise ReportError(
            f"--findings '{given}' is the registry; it may only be a new file or a "
            "findings.md a report wrote"
        )
    if (
        registry is not None
        and path.parent == registry.parent
        and path.name in (registry.name + WAL, owner_path(registry).name)
    ):  # DuckDB's log, the lock owner's note
        raise ReportError(
            f"--findings '{given}' is the registry's own '{path.name[len(registry.name) :]}' "
            "file, which DuckDB and the registry replace or delete: choose another path"
        )
    if out is not None and path.is_relative_to(out):
        raise ReportError(
            f"--findings '{given}' is inside --out '{out}', which the report "
            "replaces whole (findings.md is written there anyway): choose a path "
            "outside it"
        )
    if path.is_dir():
        raise ReportError(
            f"--findings '{given}' is a folder; it names the file to write, e.g. docs/findings.md"
        )
    if path.exists():
        why = _why_not_findings(path)
        if why:
            raise ReportError(
                f"--findings '{given}' is an existing file {why}; it may only be a "
                "new file or a findings.md a report wrote: nothing was written"
            )
        return path
    if not path.parent.is_dir():
        raise ReportError(
            f"--findings '{given}': its folder '{path.parent}' does not exist; create it first"
        )
    _check_can_create(given, path, "--findings")
    return path


def _why_not_findings(path: Path) -> str | None:
    """None when the existing ``path`` is a findings.md a report wrote; otherwise why it is not."""
    if not path.is_file():
        return "that is not a regular file"
    if path.stat().st_size > MAX_MARKER:
        return "too large to be a findings.md"
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, ValueError):
        text = ""
    except OSError as exc:
        return f"that cannot be read ({exc.strerror})"
    stamp = read_stamp(text)
    if not isinstance(stamp, dict):
        return "without the provenance stamp a report writes"
    if "body" not in stamp:
        return (
            "written by a report from before stamps held the text's hash, so whether anyone edited "
            "it since cannot be told (move or delete it)"
        )
    if stamp["body"] != body_hash(text):
        return "edited since the report wrote it (its text no longer matches its stamp's hash)"
    return None


# ---- what a killed report left ------------------------------------------------------------------
def staging_name(out: Path, kind: str, pid: int | None = None) -> Path:
    """The hidden sibling of ``out`` a report stages in ('tmp') or moves the previous one to
    ('old')."""
    return out.parent / f".{out.name}.{kind}-{os.getpid() if pid is None else pid}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process, or no PID: left alone
        return True
    return True


def remove_stale_staging(out: Path) -> list[Path]:
    """Remove the staging folders a report killed before it finished left beside ``out``: only
    folders named exactly ``.<out name>.tmp-<pid>`` or ``.<out name>.old-<pid>`` whose process no
    longer exists. Returns what was removed."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(?:tmp|old)-([1-9][0-9]*)")
    try:
        entries = list(os.scandir(out.parent))
    except OSError:
        return []
    removed = []
    for e in entries:
        m = pattern.fullmatch(e.name)
        pid = int(m[1]) if m else None
        if pid and e.is_dir(follow_symlinks=False) and pid != os.getpid() and not _alive(pid):
            shutil.rmtree(e.path, ignore_errors=True)
            removed.append(Path(e.path))
    return removed
