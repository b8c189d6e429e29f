"""Atomic file writes (temp file in the same directory + fsync + rename): a crash never leaves a
half-written record behind."""

from __future__ import annotations

import json
import os
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
    return write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True, default=_default))


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, set | tuple):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
