"""Data sets as ``datasets`` saves them (``Dataset.save_to_disk``, ``DatasetDict.save_to_disk``),
read without ``datasets``: the folder's ``state.json`` names its Arrow files (Arrow IPC streams),
read by pyarrow in that order. A ``DatasetDict`` folder (``dataset_dict.json`` and a folder per
split) is read when it holds one split, or a ``train`` split (the hub's TOFU and LACUNA configs
have only ``train``). The TOFU and LACUNA readers take such a folder wherever they take a file
(docs/benchmarks.md, TOFU's and LACUNA's "Files"). Part of every run's code fingerprint.
No torch here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from supportbench.errors import DataFormatError


def is_saved(path: Path) -> bool:
    """True for a folder ``datasets`` saved: a Dataset's (``state.json``) or a DatasetDict's."""
    path = Path(path)
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def _dataset_folder(path: Path) -> Path:
    if (path / "state.json").is_file():
        return path
    try:
        splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataFormatError(f"{path}/dataset_dict.json: no datasets split list ({exc})") from None
    if not isinstance(splits, list) or not splits:
        raise DataFormatError(f"{path}/dataset_dict.json: 'splits' must be a non-empty list")
    if len(splits) > 1 and "train" not in splits:
        raise DataFormatError(
            f"{path} holds the splits {', '.join(map(str, splits))}: save one split (or 'train')"
        )
    split = "train" if "train" in splits else splits[0]
    return path / str(split)


def saved_files(path: Path) -> list[Path]:
    """The Arrow files of a saved data set, in the order ``state.json`` lists them."""
    folder = _dataset_folder(Path(path))
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        names = [f["filename"] for f in state["_data_files"]]
        if not all(isinstance(n, str) and n for n in names):
            raise TypeError(f"file names must be strings, got {names!r}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataFormatError(f"{folder}/state.json: no '_data_files' list ({exc})") from None
    files = [folder / n for n in names]
    missing = [f.name for f in files if not f.is_file()]
    if missing or not files:
        raise DataFormatError(f"{folder}: state.json lists missing Arrow file(s) {missing or '[]'}")
    return files


def read_table(path: Path):
    """The saved data set as one pyarrow Table."""
    import pyarrow as pa

    tables = []
    for f in saved_files(path):
        try:
            with pa.OSFile(str(f)) as src:
                tables.append(pa.ipc.open_stream(src).read_all())
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataFormatError(f"{f}: not an Arrow stream as datasets writes ({exc})") from None
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid as exc:
        raise DataFormatError(f"{path}: its Arrow files disagree on columns ({exc})") from None


def read_saved(path: Path) -> list[dict]:
    """The saved data set's rows, as dicts."""
    return read_table(path).to_pylist()


def content_bytes(path: Path) -> bytes:
    """What a file reader would hash: a file's bytes, or a saved folder's Arrow files' bytes."""
    path = Path(path)
    if not path.is_dir():
        return path.read_bytes()
    h = hashlib.sha256()
    for f in saved_files(path):
        h.update(f.read_bytes())
    return h.digest()
