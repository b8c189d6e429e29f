"""TOFU reader: the real locuslab/TOFU files from a local directory.

JSON Lines per config (``<config>.json``) or the older ``<config>_dataset.json`` files (optionally
under ``default/``), or a folder ``<config>/`` that ``datasets``' ``save_to_disk`` wrote
(``benchmarks/saved.py``); each config's fields are validated, errors name file and line (row).
forgetXX pairs with retain(100-XX) and the two must not share a question.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

from supportbench.benchmarks import saved
from supportbench.errors import DataFormatError, UnknownNameError

FIELDS = ("forget01", "forget05", "forget10")
QA_PER_AUTHOR = 20
FICTITIOUS_PERTURBED = (
    "forget01_perturbed",
    "forget05_perturbed",
    "forget10_perturbed",
    "retain_perturbed",
)
PROTECTED = ("real_authors_perturbed", "world_facts_perturbed")


class TofuFormatError(DataFormatError):
    pass


# ---- reading -------------------------------------------------------------------------------------
def config_path(data_dir: Path, config: str) -> Path:
    candidates = [
        data_dir / f"{config}.json",
        data_dir / f"{config}_dataset.json",
        data_dir / "default" / f"{config}_dataset.json",
        data_dir / "default" / f"{config}.json",
        data_dir / config,  # datasets' save_to_disk folder
    ]
    for c in candidates:
        if c.is_file() or (c.is_dir() and saved.is_saved(c)):
            return c
    raise TofuFormatError(
        f"TOFU config '{config}' not found in {data_dir}: looked for "
        + ", ".join(str(c.relative_to(data_dir)) for c in candidates)
    )


def _validate(row, fname: str, line: int, config: str) -> dict:
    where = f"{fname} row {line}" if fname.endswith("/") else f"{fname} line {line}"
    if not isinstance(row, dict):
        raise TofuFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in ("question", "answer"):
        if key not in row:
            raise TofuFormatError(
                f"{where}: row has no '{key}' (config '{config}' needs question and answer)"
            )
        if not isinstance(row[key], str):
            raise TofuFormatError(
                f"{where}: '{key}' must be a string, got {type(row[key]).__name__}"
            )
    if config.endswith("_perturbed"):
        pa = row.get("perturbed_answer")
        if not isinstance(pa, list) or not pa or not all(isinstance(x, str) for x in pa):
            raise TofuFormatError(
                f"{where}: 'perturbed_answer' must be a list of strings, got "
                f"{type(pa).__name__ if not isinstance(pa, list) else 'list with non-strings'}"
            )
        if config in FICTITIOUS_PERTURBED:
            for key in ("paraphrased_answer", "paraphrased_question"):
                if key == "paraphrased_question" and key not in row:
                    row = {**row, key: row["question"]}  # some upstream revisions omit it
                    continue
                if not isinstance(row.get(key), str):
                    raise TofuFormatError(
                        f"{where}: '{key}' must be a string, got {type(row.get(key)).__name__}"
                    )
    return row


def read_config(data_dir: str | Path, config: str) -> list[dict]:
    """Rows of one TOFU config, validated; JSON Lines, or a JSON array in older exports."""
    path = config_path(Path(data_dir), config)
    rows = []
    if path.is_dir():
        try:
            items = saved.read_saved(path)
        except DataFormatError as exc:
            raise TofuFormatError(str(exc)) from None
        rows = [_validate(r, f"{path.name}/", i, config) for i, r in enumerate(items, 1)]
        if not rows:
            raise TofuFormatError(f"{path.name}/: no rows")
        return rows
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TofuFormatError(
                f"{path.name} line {exc.lineno}: invalid JSON ({exc.msg})"
            ) from None
        for i, r in enumerate(items, 1):
            rows.append(_validate(r, path.name, i, config))
        return rows
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TofuFormatError(f"{path.name} line {i}: invalid JSON ({exc.msg})") from None
        rows.append(_validate(r, path.name, i, config))
    if not rows:
        raise TofuFormatError(f"{path.name}: no rows")
    return rows


def read_pair(data_dir: str | Path, field: str) -> tuple[list[dict], list[dict]]:
    """forgetXX and its retain(100-XX), checked to be disjoint."""
    if field not in FIELDS:
        raise UnknownNameError("TOFU field", field, FIELDS)
    retain_name = f"retain{100 - int(field[-2:])}"
    forget, retain = read_config(data_dir, field), read_config(data_dir, retain_name)
    seen = {r["question"] for r in retain}
    for i, r in enumerate(forget, 1):
        if r["question"] in seen:
            raise TofuFormatError(
                f"{field} and {retain_name} overlap: {config_path(Path(data_dir), field).name} "
                f"line {i} ({r['question']!r}) is also in {retain_name}"
            )
    return forget, retain


def _hash_files(data_dir: Path, names) -> str:
    h = hashlib.sha256()
    for n in sorted(names):
        h.update(n.encode())
        h.update(saved.content_bytes(config_path(data_dir, n)))
    return h.hexdigest()[:16]


# ---- authors -------------------------------------------------------------------------------------
_NAME_RUN = re.compile(r"(?:[A-Z][\w'\-\.]*(?:\s+|$)){2,}")
_NOT_NAMES = {
    "The",
    "What",
    "Who",
    "Which",
    "How",
    "When",
    "Where",
    "Why",
    "Can",
    "Does",
    "Did",
    "Is",
    "Was",
    "Are",
    "In",
    "His",
    "Her",
    "Their",
    "Has",
    "Have",
    "Could",
    "Would",
    "Do",
    "Q",
    "A",
}


def _name_runs(text: str) -> list[str]:
    """Runs of two or more capitalised words (hyphens, apostrophes, initials allowed), sentence
    openers dropped."""
    out = []
    for m in _NAME_RUN.finditer(text.replace("'s ", " ").replace("?", " ")):
        words = [w.rstrip(".") for w in m.group(0).split()]
        while words and words[0] in _NOT_NAMES:
            words = words[1:]
        if len(words) >= 2:
            out.append(" ".join(words))
    return out


def author_names(rows: list[dict], per_author: int = QA_PER_AUTHOR) -> list[str | None]:
    """The fictitious author of each row, by position: TOFU's files hold ``per_author`` consecutive
    rows per author. The author's name is the capitalised run that occurs in most of that author's
    questions and answers (ties: the longer, then the first seen); None for a block that names
    nobody."""
    names: list[str | None] = []
    for a in range(0, len(rows), per_author):
        block = rows[a : a + per_author]
        counts: Counter = Counter()
        for r in block:
            seen = set(_name_runs(r["question"])) | set(_name_runs(r["answer"]))
            counts.update(seen)
        best = max(counts.items(), key=lambda kv: (kv[1], len(kv[0])), default=None)
        names += [best[0] if best and best[1] >= 2 else None] * len(block)
    return names


def subject_in(question: str, name: str | None) -> str | None:
    """The part of ``name`` a question mentions: the full name, else its longest word of 3+ letters
    that the question contains (e.g. a surname); None when the question does not name the author."""
    if not name:
        return None
    if name in question:
        return name
    parts = sorted(
        (w for w in name.split() if len(w) >= 3 and re.search(rf"\b{re.escape(w)}\b", question)),
        key=len,
        reverse=True,
    )
    return parts[0] if parts else None
