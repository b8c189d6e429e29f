"""Atomic file writes (temp file in the same directory + fsync + rename): a crash never leaves a
half-written record behind; JSON object reads whose errors name the file; the checks a command makes
on a path before any work (a name too long, a path under a file, a folder it cannot write in)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path


def write_text_atomic(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, obj) -> Path:
    # allow_nan=False: never write what loads_json (and any strict JSON reader) refuses
    return write_text_atomic(
        path, json.dumps(obj, indent=1, sort_keys=True, default=_default, allow_nan=False)
    )


class StrictJSONError(json.JSONDecodeError):
    """Valid to Python's lenient ``json`` but refused here: a key twice in one object (``json``
    would keep the last silently) or NaN / Infinity (not JSON)."""


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    seen: dict = {}
    for k, v in pairs:
        if k in seen:
            raise StrictJSONError(f"duplicate key {k!r} in one object (which value counts?)", "", 0)
        seen[k] = v
    return seen


def _no_constant(name: str):
    raise StrictJSONError(f"{name} is not a JSON number", "", 0)


# what a name may not hold: control characters, and the invisible ones that change how it prints:
# bidi overrides and marks (U+202A-U+202E, U+2066-U+2069, U+200E/F), zero-width ones, line and
# paragraph separators, the BOM
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")

MAX_DEPTH = 100  # nesting levels a file a user hands in may have (a record has fewer than ten)

_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_TOML_TOKENS = re.compile(
    r'"""[\s\S]*?"""'
    r"|'''[\s\S]*?'''"
    r'|"(?:[^"\\\n]|\\.)*"'
    r"|'[^'\n]*'|#[^\n]*|[\[\]{}]"
)


def nesting_depth(text: str, toml: bool = False, limit: int = MAX_DEPTH) -> int:
    """How deeply ``text``'s brackets nest outside strings (and TOML comments), counted only as
    far as ``limit + 1``: a cheap scan made before a recursive parser (``json``, ``tomllib``) could
    run out of stack. A text with no more than ``limit`` brackets in all cannot nest deeper, and is
    not scanned. In TOML a dotted key (``a.b.c = 1``, a table per part) nests too: each part is a
    level."""
    deepest = 0
    if toml and text.count(".") > limit:  # most dots in one key (strings, comments taken out)
        bare = _TOML_TOKENS.sub(lambda m: m.group() if m.group() in "[]{}" else " s ", text)
        deepest = max(seg.count(".") + 1 for seg in re.split(r"[=,{}\[\]\n]", bare))
    if deepest > limit or text.count("[") + text.count("{") <= limit:
        return deepest
    depth = 0
    for m in (_TOML_TOKENS if toml else _JSON_TOKENS).finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif c in "]}":
            depth -= 1
    return deepest


def loads_json(text: str, *, nonfinite: bool = False):
    """``json.loads`` that refuses what the standard leaves open: a key twice in one object (which
    value counts?) and, unless ``nonfinite`` (run records: a diverged run keeps its NaN/Infinity
    outcome), the non-standard NaN / Infinity; and arrays or objects nested more than ``MAX_DEPTH``
    levels (no file of ours nests so; a parser would run out of stack). Every file a user can hand
    in is parsed through it."""
    if nesting_depth(text) > MAX_DEPTH:
        raise StrictJSONError(
            f"nested more than {MAX_DEPTH} levels deep (arrays or objects within "
            "each other); not a file supportbench reads",
            "",
            0,
        )
    try:
        if nonfinite:
            return json.loads(text, object_pairs_hook=_no_duplicates)
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:
        raise StrictJSONError(
            f"nested too deeply to parse (more than {MAX_DEPTH} levels)", "", 0
        ) from None
    # not a JSONDecodeError: a number Python will not convert (> 4300 digits)
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        raise StrictJSONError(f"a value it cannot read: {exc}", "", 0) from None


def read_json_object(path: str | Path, error: type[Exception], what: str) -> dict:
    """A JSON object from ``path``; ``error(message naming the file)`` when it is missing, a
    directory, not UTF-8, not valid JSON (e.g. truncated) or not an object. ``FileNotFoundError``
    passes through when the caller wants to treat a missing file itself (``error`` is then only
    raised for the other cases)."""
    path = Path(path)
    try:
        obj = loads_json(path.read_text(encoding="utf-8"))
    except IsADirectoryError:
        raise error(f"{what} path '{path}' is a directory") from None
    except UnicodeDecodeError:
        raise error(f"{what} '{path}' is not UTF-8 text") from None
    except StrictJSONError as exc:
        raise error(f"{what} '{path}' is not valid: {exc.msg}") from None
    except json.JSONDecodeError as exc:
        raise error(
            f"{what} '{path}' is not valid JSON ({exc.msg} at line {exc.lineno}; truncated?)"
        ) from None
    if not isinstance(obj, dict):
        raise error(f"{what} '{path}' must hold a JSON object, got {type(obj).__name__}")
    return obj


def file_or_shipped(name: str | Path, shipped: dict[str, Path], what: str, error) -> Path:
    """``name`` itself when it is a file or a pipe (``<(...)``; a device or socket is neither),
    else the shipped file it names (``NAME`` or ``NAME.toml``, with no folder: ``shipped`` maps
    stems to paths): a folder of that name in the current directory (a results folder, say) does
    not hide the shipped file. ``error(message)`` names ``what`` was asked for and what is
    shipped."""
    path = Path(name)
    if path.is_file() or path.is_fifo():
        return path
    stem = path.name[:-5] if path.name.endswith(".toml") else path.name
    if stem in shipped and path.parent == Path("."):
        return shipped[stem]
    raise error(
        f"no {what} '{name}': not a file, and not a shipped {what} "
        f"(shipped: {', '.join(shipped) or 'none'})"
    )


NAME_MAX = 255  # bytes in one path component, on every file system supportbench writes to
PATH_MAX = 4096  # bytes in a whole path, its terminating NUL included (Linux)


def too_long(path: str | Path) -> str | None:
    """What in ``path`` is too long for the file system (a component over ``NAME_MAX`` bytes, or
    the whole absolute path over ``PATH_MAX - 1``), as words for an error; None when nothing is.
    Checked before anything else: the file system refuses even to look such a name up
    (``exists()`` raises)."""
    part = next((part for part in Path(path).parts if len(os.fsencode(part)) > NAME_MAX), None)
    if part is not None:
        return f"the name '{part[:40]}...' is longer than {NAME_MAX} bytes"
    if len(os.fsencode(os.path.abspath(path))) >= PATH_MAX:
        return f"the path is longer than {PATH_MAX - 1} bytes"
    return None


def file_ancestor(path: str | Path) -> Path | None:
    """The nearest existing ancestor of ``path`` when it is not a folder (``path`` lies under a
    file, and nothing can be created there), else None."""
    for parent in Path(path).parents:
        if parent.exists() or parent.is_symlink():
            return None if parent.is_dir() else parent
    return None


def what_is_there(path: str | Path) -> str:
    """What stands at ``path`` (an ancestor ``file_ancestor`` found: not a folder), for a message:
    'a link to no folder' (a link whose target is gone), 'a file', or 'a special file' (a pipe, a
    socket, a device)."""
    p = Path(path)
    if p.is_symlink() and not p.exists():
        return "a link to no folder"
    return "a file" if p.is_file() else "a special file"


def nearest_existing(path: str | Path) -> Path:
    """``path`` itself when it exists, else its nearest existing ancestor."""
    p = Path(path)
    return next(q for q in (p, *p.parents) if q.exists())


def cannot_write_in(folder: str | Path) -> str | None:
    """Why nothing can be created in the existing ``folder`` (the OS's reason), else None. Tried,
    not read off the permission bits: ``os.access`` says yes to root in a folder that is immutable,
    on a read-only mount or in /proc, where creating anything still fails."""
    try:
        probe = tempfile.mkdtemp(dir=folder, prefix=".supportbench-probe-")
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    os.rmdir(probe)
    return None


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, set | tuple):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
