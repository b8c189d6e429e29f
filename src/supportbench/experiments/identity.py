"""Identities by content: of a local model (its files, not where they are) and of source code.

``model_identity(path)`` = ``local:<sha256 of config.json, every weight file and the tokenizer's
files, 16
hex>``: moving or renaming the folder keeps its runs' keys; changing a weight changes them.
``content_identity(path)`` does the same for a data folder, mask or adapter a run names by path
(``spec.PATH_OPTIONS``). Hashing gigabytes of weights takes seconds to minutes, so each file's
digest is cached (in the user's cache, ``model-ids.json``) under its absolute path, size and
modification time, and recomputed when any of them changes.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
from pathlib import Path

from supportbench._io import write_text_atomic
from supportbench.errors import SpecError
from supportbench.experiments.paths import cache_root

PACKAGE = Path(__file__).resolve().parents[1]  # src/supportbench


@functools.cache
def source_hash(*paths: str | Path) -> str:
    """sha256 (16 hex digits) of what every ``.py`` file under ``paths`` (files or folders, relative
    to the package or absolute) does, by name relative to the package: the same tree hashes the same
    in every process.

    A file counts by its syntax tree without docstrings (``code_digest``): comments, docstrings,
    line breaks and layout do not change a hash, so rewrapping code or its documentation keeps every
    record's fingerprint and every cached theta_0's key; any change to what the code does changes
    them."""
    files = []
    for p in map(Path, paths):
        p = p if p.is_absolute() else PACKAGE / p
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    h = hashlib.sha256()
    for f in files:
        name = f.relative_to(PACKAGE) if f.is_relative_to(PACKAGE) else f.name
        h.update(f"{name}\0".encode())
        h.update(code_digest(f) if f.is_file() else b"<missing>")
    return h.hexdigest()[:16]


def code_digest(path: Path) -> bytes:
    """The sha256 of a Python file's syntax tree with every docstring removed (a file that does not
    parse counts by its bytes). ``ast.dump`` without positions is the tree alone; its text is
    Python's own and may change between Python minor versions, which then rebuild cached theta_0s
    once (never reuse a wrong one)."""
    source = Path(path).read_bytes()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return hashlib.sha256(source).digest()
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
        ):
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = node.body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).digest()


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# what else changes a run's numbers: how text becomes tokens (and back), the chat template,
# generation defaults
TEXT_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)
_memo: dict[tuple, str] = {}


def identity_files(model_dir: Path) -> list[Path]:
    """The files that make the model what it is: its config, its weights, its tokenizer, chat
    template and generation config (not a README or a training log)."""
    files = [model_dir / "config.json"] if (model_dir / "config.json").is_file() else []
    files += sorted(p for p in model_dir.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    files += [model_dir / n for n in TEXT_FILES if (model_dir / n).is_file()]
    return files


def _digest(path: Path, index: dict) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _memo:
        return _memo[key]
    stored = index.get(key[0])
    if stored and stored["size"] == st.st_size and stored["mtime_ns"] == st.st_mtime_ns:
        digest = stored["sha256"]
    else:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
        digest = h.hexdigest()
        index[key[0]] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
        index["_changed"] = True
    _memo[key] = digest
    return digest


def _hash_files(files: list[tuple[str, Path]]) -> str:
    """sha256 (16 hex) over (name, content digest) pairs; digests come from the cached index when
    current."""
    index_path = cache_root() / "model-ids.json"
    try:
        index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    except (OSError, ValueError):
        index = {}  # a damaged index is only a cache: rebuild it
    h = hashlib.sha256()
    for name, f in files:
        h.update(f"{name}\0{_digest(f, index)}\n".encode())
    if index.pop("_changed", False):
        with contextlib.suppress(OSError):  # a read-only cache only costs the next process a rehash
            write_text_atomic(index_path, json.dumps(index, indent=1, sort_keys=True))
    return h.hexdigest()[:16]


def model_identity(model: str | Path) -> str:
    path = Path(model).expanduser()
    if not path.is_dir():
        raise SpecError(
            f"model directory '{model}' does not exist (a local model is a folder with config.json "
            "and weight files)"
        )
    files = identity_files(path)
    if not files:
        raise SpecError(
            f"model directory '{model}' has no config.json and no weight files "
            f"({', '.join(WEIGHT_SUFFIXES)})"
        )
    return f"local:{_hash_files([(f.name, f) for f in files])}"


def content_identity(path: str | Path, option: str = "path") -> str:
    """``content:<16 hex>`` of a file, or of every file under a folder (by relative name; hidden
    files and ``__pycache__`` left out): a data folder, mask or adapter named by path is identified
    by what it holds, so moving it keeps its runs' keys and editing it changes them."""
    p = Path(path).expanduser()
    if p.is_file():
        return f"content:{_hash_files([(p.name, p)])}"
    if not p.is_dir():
        raise SpecError(f"{option} '{path}' does not exist")
    files = sorted(
        f
        for f in p.rglob("*")
        if f.is_file()
        and not any(
            part.startswith(".") or part == "__pycache__" for part in f.relative_to(p).parts
        )
    )
    return f"content:{_hash_files([(f.relative_to(p).as_posix(), f) for f in files])}"


def clear_memo() -> None:
    """Forget in-process digests (tests that rewrite a file within one mtime tick)."""
    _memo.clear()


__all__ = [
    "clear_memo",
    "code_digest",
    "content_identity",
    "identity_files",
    "model_identity",
    "source_hash",
]
