"""LACUNA reader (McGill-NLP/LACUNA's artifact layout, read-only: nothing is ever written into it).

Data: ``<Field>_<split>.parquet`` with columns ``ID`` (string), ``question`` (string), ``answer``
(string), ``field`` (string, the display name) and ``group_id`` (integer); fields Email_Address,
Phone_Number, Birth_City, Drivers_License; splits forget, retain, forget_paraphrased,
retain_paraphrased, full; plus ``relearn_train.parquet`` when present. Each file may instead be a
folder ``<Field>_<split>/`` that ``datasets``' ``save_to_disk`` wrote (``benchmarks/saved.py``),
read with the same column checks. Text formats:
``unlearning.formats`` (LACUNA's instruction format for training and J, open-unlearning's for the
behavioural metrics; docs/upstream-formats.md).

``resolve_layout`` accepts the data folder itself (``.../data-masked/data/``) or the artifact root
(``<root>/<size>/<regime>/`` + ``<root>/<size>/data-<regime>/data/``).

Masks: ``mask.pt`` = {parameter name: 1-D int32 tensor of the parameter's numel}; bit g set = group
g's gradient may change that scalar. Loaded with ``weights_only=True, mmap=True``; groups are
decoded per tensor with bit operations (``bits_set``), never as one boolean tensor per group for the
whole model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from supportbench.benchmarks import saved
from supportbench.errors import DataFormatError, UnknownNameError

FIELDS = ("Email_Address", "Phone_Number", "Birth_City", "Drivers_License")
DISPLAY = {
    "Email_Address": "Email Address",
    "Phone_Number": "Phone Number",
    "Birth_City": "Birth City",
    "Drivers_License": "Driver's License",
}
SPLITS = ("forget", "retain", "forget_paraphrased", "retain_paraphrased", "full")
# upstream's cross-field retain pairing (the retain set of field F is another field's retain people)
RETAIN_PAIR = {
    "Email_Address": "Birth_City",
    "Birth_City": "Email_Address",
    "Phone_Number": "Birth_City",
    "Drivers_License": "Email_Address",
}
COLUMNS = ("ID", "question", "answer", "field", "group_id")
INSTRUCT_DIRS = ("intruction_tuned", "instruction_tuned")  # upstream's spelling first
MAX_GROUPS = 32


class LacunaFormatError(DataFormatError):
    pass


def check_field(field: str) -> str:
    if field not in FIELDS:
        raise UnknownNameError("LACUNA field", field, FIELDS)
    return field


@dataclass(frozen=True)
class Layout:
    data_dir: Path  # the folder holding <Field>_<split>.parquet
    model_dir: Path | None  # <root>/<size>/<regime>/ (model.safetensors, mask.pt), when present
    instruct_dir: Path | None  # the instruction-tuned model folder (theta_0), when present

    @property
    def mask_path(self) -> Path | None:
        p = self.model_dir / "mask.pt" if self.model_dir else None
        return p if p is not None and p.is_file() else None


def _is_data_dir(p: Path) -> bool:
    return p.is_dir() and (
        any(p.glob("*_forget.parquet")) or any(saved.is_saved(d) for d in p.glob("*_forget"))
    )


def resolve_layout(path: str | Path, size: str | None = None, regime: str = "masked") -> Layout:
    """The data folder and the model folders behind ``path`` (either layout); a clear error
    otherwise."""
    path = Path(path)
    if not path.is_dir():
        raise LacunaFormatError(f"LACUNA directory '{path}' does not exist")
    if _is_data_dir(path):
        # <root>/<size>/data-<regime>/data -> the model folder is <root>/<size>/<regime>/
        model_dir = None
        if path.name == "data" and path.parent.name.startswith("data-"):
            cand = path.parent.parent / path.parent.name[len("data-") :]
            model_dir = cand if cand.is_dir() else None
        return Layout(path, model_dir, _instruct(model_dir))
    if _is_data_dir(path / f"data-{regime}" / "data"):  # <root>/<size>: one model size's folder
        model_dir = path / regime
        model_dir = model_dir if model_dir.is_dir() else None
        return Layout(path / f"data-{regime}" / "data", model_dir, _instruct(model_dir))
    sizes = (
        [size]
        if size
        else sorted(p.name for p in path.iterdir() if (p / f"data-{regime}" / "data").is_dir())
    )
    if len(sizes) > 1:
        raise LacunaFormatError(
            f"'{path}' holds several model sizes ({', '.join(sizes)}): set benchmark.lacuna_size"
        )
    if sizes:
        data = path / sizes[0] / f"data-{regime}" / "data"
        if _is_data_dir(data):
            model_dir = path / sizes[0] / regime
            model_dir = model_dir if model_dir.is_dir() else None
            return Layout(data, model_dir, _instruct(model_dir))
    raise LacunaFormatError(
        f"'{path}' is neither a LACUNA data folder (with <Field>_forget.parquet files), nor a "
        f"model size's folder (<size>/data-{regime}/data/), nor an artifact root "
        f"(<root>/<size>/{regime}/ and <root>/<size>/data-{regime}/data/)"
    )


def _instruct(model_dir: Path | None) -> Path | None:
    if model_dir is None:
        return None
    for name in INSTRUCT_DIRS:
        if (model_dir / name / "config.json").is_file():
            return model_dir / name
    return None


def split_path(data_dir: Path, field: str, split: str) -> Path:
    check_field(field)
    if split not in SPLITS:
        raise LacunaFormatError(f"unknown LACUNA split {split!r}; allowed: {', '.join(SPLITS)}")
    return data_file(Path(data_dir), f"{field}_{split}")


def data_file(data_dir: Path, stem: str) -> Path:
    """``<stem>.parquet``, or the folder ``<stem>/`` that datasets' save_to_disk wrote."""
    folder = Path(data_dir) / stem
    return folder if saved.is_saved(folder) else Path(data_dir) / f"{stem}.parquet"


def read_rows(path: str | Path) -> list[dict]:
    """Rows of one LACUNA parquet file, columns and types checked (errors name the file and
    column)."""
    import polars as pl

    path = Path(path)
    if path.is_dir() and saved.is_saved(path):
        try:
            df = pl.from_arrow(saved.read_table(path))
        except DataFormatError as exc:
            raise LacunaFormatError(str(exc)) from None
        return _checked(df, path)
    if not path.is_file():
        raise LacunaFormatError(f"LACUNA file '{path}' does not exist")
    try:
        df = pl.read_parquet(path)
    except Exception as exc:  # polars raises several types for a damaged file
        raise LacunaFormatError(
            f"{path.name}: not a readable parquet file ({str(exc).splitlines()[0]})"
        ) from None
    return _checked(df, path)


def _checked(df, path: Path) -> list[dict]:
    """The rows of a LACUNA frame whose columns and types are as upstream writes them."""
    import polars as pl

    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise LacunaFormatError(
            f"{path.name}: missing column(s) {missing}; required: {', '.join(COLUMNS)}"
        )
    for c in ("ID", "question", "answer", "field"):
        if df.schema[c] != pl.String:
            raise LacunaFormatError(
                f"{path.name}: column '{c}' must be a string column, got {df.schema[c]}"
            )
    if not df.schema["group_id"].is_integer():
        raise LacunaFormatError(
            f"{path.name}: column 'group_id' must be an integer column, got {df.schema['group_id']}"
        )
    nulls = [c for c in COLUMNS if df[c].null_count()]
    if nulls:
        raise LacunaFormatError(
            f"{path.name}: column '{nulls[0]}' has {df[nulls[0]].null_count()} empty value(s)"
        )
    bad = df.filter((pl.col("group_id") < 0) | (pl.col("group_id") >= MAX_GROUPS))
    if bad.height:
        raise LacunaFormatError(
            f"{path.name}: group_id {bad['group_id'][0]} outside 0..{MAX_GROUPS - 1} "
            "(mask.pt has 32 bits)"
        )
    return df.select(COLUMNS).to_dicts()


def read_split(data_dir: str | Path, field: str, split: str) -> list[dict]:
    """The rows of ``<Field>_<split>.parquet``: at least one, each naming ``field`` in its ``field``
    column."""
    path = split_path(Path(data_dir), field, split)
    rows = read_rows(path)
    if not rows:
        raise LacunaFormatError(f"{path.name}: no rows (the {split} split of {field} is empty)")
    other = next((r["field"] for r in rows if _field_key(r["field"]) != field), None)
    if other is not None:
        raise LacunaFormatError(
            f"{path.name}: a row's field column says {other!r}, which is not {field!r} (the "
            "file's field; upstream writes its display name, e.g. \"Driver's License\")"
        )
    return rows


def _field_key(display: str) -> str:
    """``"Driver's License"`` -> ``"Drivers_License"``: the file-name form of a field column's
    display name."""
    return display.replace("'", "").replace(" ", "_")


def read_relearn(data_dir: str | Path) -> list[dict] | None:
    p = data_file(Path(data_dir), "relearn_train")
    return read_rows(p) if p.exists() else None


# ---- masks ---------------------------------------------------------------------------------------
def load_mask(path: str | Path, parameters: dict | None = None) -> dict:
    """``mask.pt`` as {name: int32 tensor}; with ``parameters`` ({name: tensor}) every entry is
    checked to name a parameter of the model and to have its numel."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise LacunaFormatError(f"mask file '{path}' does not exist")
    # memory-mapped when the file is in torch's zip format; a legacy (pre-1.6) file is read whole
    try:
        import zipfile

        mmap = zipfile.is_zipfile(path)
        mask = torch.load(path, weights_only=True, mmap=mmap, map_location="cpu")
    except Exception as exc:
        raise LacunaFormatError(
            f"{path}: not a loadable mask.pt ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None
    if not isinstance(mask, dict):
        raise LacunaFormatError(
            f"{path}: must hold {{parameter name: int32 tensor}}, got {type(mask).__name__}"
        )
    for name, t in mask.items():
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 1:
            got = (
                f"{getattr(t, 'dtype', type(t).__name__)} of shape {tuple(getattr(t, 'shape', ()))}"
            )
            raise LacunaFormatError(f"{path}: entry '{name}' must be a 1-D int32 tensor, got {got}")
        if parameters is not None:
            if name not in parameters:
                raise LacunaFormatError(f"{path}: names parameter '{name}', which the model lacks")
            if t.numel() != parameters[name].numel():
                raise LacunaFormatError(
                    f"{path}: '{name}' has {t.numel()} entries but the parameter has "
                    f"{parameters[name].numel()} scalars"
                )
    # upstream writes an entry for every parameter (zeros where no group may change)
    if parameters is not None:
        lacking = [n for n in parameters if n not in mask]
        if lacking:
            more = f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""
            raise LacunaFormatError(
                f"{path}: no entry for parameter(s) {', '.join(lacking[:3])}{more}; a LACUNA "
                "mask.pt has one int32 entry per parameter of the model"
            )
    return mask


def group_bits(groups) -> int:
    out = 0
    for g in groups:
        if not 0 <= int(g) < MAX_GROUPS:
            raise LacunaFormatError(f"group id {g} outside 0..{MAX_GROUPS - 1}")
        out |= 1 << int(g)
    return out


def bits_set(mask_tensor, bits: int):
    """Per scalar: does any of ``bits`` allow a change here? (one tensor at a time)."""
    import torch

    as_int32 = bits - (1 << 32) if bits >= 1 << 31 else bits  # the sign bit of an int32
    return (mask_tensor & torch.tensor(as_int32, dtype=torch.int32)) != 0


def check_groups_have_bits(mask: dict, groups, source: str = "mask.pt") -> None:
    """Every group in ``groups`` owns at least one scalar somewhere in ``mask``."""
    remaining = set(int(g) for g in groups)
    for t in mask.values():
        for g in list(remaining):
            if bool(bits_set(t, 1 << g).any()):
                remaining.discard(g)
        if not remaining:
            return
    if remaining:
        raise LacunaFormatError(
            f"{source}: forget group(s) {sorted(remaining)} have no mask bits set; the "
            "forget split's group_ids must be groups of the mask"
        )


# ---- weights, read lazily ------------------------------------------------------------------------
def scored(name: str) -> bool:
    """Parameters localization precision scores: not a norm, not the embeddings, not the output
    head."""
    return "norm" not in name and "embed" not in name and "lm_head" not in name


def tensor_reader(model_dir: Path, what: str = "model"):
    """``name -> flattened tensor``, read lazily (memory-mapped, one tensor at a time) from a model
    folder's safetensors files (sharded or not); ``.names`` lists every tensor. Nothing is
    written."""
    import torch
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise LacunaFormatError(f"no safetensors weights in '{model_dir}' ({what})")
    where = {}
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            where.update(
                dict.fromkeys(h.keys(), f)  # noqa: SIM118  (a safetensors handle, not a dict)
            )

    def read(name: str) -> torch.Tensor:
        if name not in where:
            raise LacunaFormatError(f"{what} in '{model_dir}' has no tensor '{name}'")
        with safe_open(str(where[name]), framework="pt") as h:
            return h.get_tensor(name).reshape(-1)

    read.names = sorted(where)
    return read
