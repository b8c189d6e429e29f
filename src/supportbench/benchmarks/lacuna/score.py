"""Localization precision of upstream's unlearned models, as they lie on disk
(``supportbench lacuna precision``).

Upstream's layout (``scripts/precision_metrics.py``; ``shared/reference/lacuna.md``)::

    <root>/<size>/<regime>/intruction_tuned/            theta_0
    <root>/<size>/<regime>/mask.pt                      the ground truth: bit g = group g may change
                                                        the scalar
    <root>/<size>/<regime>/unlearned_models/<Field>/<Method>/*.safetensors

Each method folder is scored like a run (``Lacuna.precision``): |W_unlearned - W_theta0| per scored
parameter (not a norm, the embeddings or the output head), theta_0 cast to the unlearned model's
dtype, against the forget groups' bits (upstream's hard-coded {0, 2, 4}) and all groups' bits; AUROC
and precision@{0.1, 1, 5, 10} %, exact up to ``max_exact`` scalars, else the stated histogram bound
(``precision.py``). Streaming and read-only: one tensor of each model in memory at a time; nothing
is written into the artifacts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from supportbench.benchmarks.lacuna import precision as prec
from supportbench.benchmarks.lacuna.generator import FORGET_GROUPS, N_GROUPS
from supportbench.benchmarks.lacuna.reader import (
    FIELDS,
    LacunaFormatError,
    _instruct,
    check_field,
    group_bits,
    load_mask,
    scored,
    tensor_reader,
)

UNLEARNED = "unlearned_models"


@dataclass(frozen=True)
class Scored:
    field: str
    method: str
    path: Path
    metrics: dict  # precision_forget_* and precision_all_* (``Precision.to_dict``)


def regime_dir(path: str | Path, size: str | None = None, regime: str = "masked") -> Path:
    """The ``<root>/<size>/<regime>`` folder behind ``path`` (that folder, a size folder or the
    artifact root)."""
    path = Path(path)
    if not path.is_dir():
        raise LacunaFormatError(f"LACUNA artifacts '{path}' do not exist")
    candidates = [path, path / regime]
    sizes = (
        [size]
        if size
        else sorted(p.name for p in path.iterdir() if (p / regime / UNLEARNED).is_dir())
    )
    if (
        len(sizes) > 1
        and not (path / UNLEARNED).is_dir()
        and not (path / regime / UNLEARNED).is_dir()
    ):
        raise LacunaFormatError(
            f"'{path}' holds several model sizes ({', '.join(sizes)}): pass --size"
        )
    candidates += [path / s / regime for s in sizes]
    for c in candidates:
        if (c / UNLEARNED).is_dir():
            return c
    raise LacunaFormatError(
        f"no '{UNLEARNED}/' under '{path}' (looked for <root>/<size>/{regime}/{UNLEARNED}/"
        "<Field>/<Method>/, upstream's layout)"
    )


def method_folders(base: Path, fields=None, methods=None) -> list[tuple[str, str, Path]]:
    """(field, method, folder) of every unlearned model under ``base/unlearned_models``,
    filtered."""
    for f in fields or ():
        check_field(f)
    out = []
    for fdir in sorted(p for p in (base / UNLEARNED).iterdir() if p.is_dir()):
        if fdir.name not in FIELDS or (fields and fdir.name not in fields):
            continue
        for mdir in sorted(p for p in fdir.iterdir() if p.is_dir()):
            if (not methods or mdir.name in methods) and any(mdir.glob("*.safetensors")):
                out.append((fdir.name, mdir.name, mdir))
    if not out:
        want = f" for fields {list(fields)}" if fields else ""
        want += f" and methods {list(methods)}" if methods else ""
        raise LacunaFormatError(
            f"no unlearned model (a folder with *.safetensors) under '{base / UNLEARNED}'{want}"
        )
    return out


def score(
    path: str | Path,
    *,
    size: str | None = None,
    regime: str = "masked",
    fields=None,
    methods=None,
    max_exact: int = 1 << 24,
    forget_groups=FORGET_GROUPS,
) -> list[Scored]:
    base = regime_dir(path, size, regime)
    theta0_dir = _instruct(base)
    if theta0_dir is None:
        raise LacunaFormatError(
            f"no instruction-tuned model (theta_0) in '{base}' (intruction_tuned/ or "
            "instruction_tuned/ with config.json)"
        )
    before = tensor_reader(theta0_dir, "theta_0")
    mask = load_mask(base / "mask.pt")
    missing = [n for n in mask if n not in before.names and scored(n)]
    if missing:
        raise LacunaFormatError(
            f"{base / 'mask.pt'} names '{missing[0]}', which theta_0 ({theta0_dir}) lacks"
        )
    truths = {
        "precision_forget": group_bits(forget_groups),
        "precision_all": group_bits(range(N_GROUPS)),
    }
    out = []
    for field, method, folder in method_folders(base, fields, methods):
        after = tensor_reader(folder, f"unlearned model {field}/{method}")
        names = [n for n in mask if scored(n) and n in before.names]
        lacking = [n for n in names if n not in after.names]
        if lacking:
            raise LacunaFormatError(
                f"unlearned model '{folder}' lacks tensor '{lacking[0]}' (of {len(lacking)})"
            )

        def sources(names=names, after=after):
            for name in names:
                w = after(name)
                # theta_0 as the run saw it: cast to the unlearned model's dtype
                b = before(name).to(w.dtype)
                m = mask[name]
                if m.numel() != w.numel():
                    raise LacunaFormatError(
                        f"mask entry '{name}' has {m.numel()} entries, the tensor {w.numel()}"
                    )
                yield (
                    name,
                    w.numel(),
                    (lambda s, e, w=w, b=b, m=m: ((w[s:e].float() - b[s:e].float()).abs(), m[s:e])),
                )

        res = prec.localization_precision(sources, truths, max_exact=max_exact)
        metrics = {}
        for t, r in res.items():
            metrics.update(r.to_dict(t))
        out.append(Scored(field, method, folder, metrics))
    return out


def table(rows: list[Scored], which: str = "precision_forget") -> str:
    """One line per method folder: AUROC and precision@{0.1, 1, 5, 10} %, with the bound when not
    exact."""
    head = f"{'field':<16} {'method':<24} {'AUROC':>8} " + " ".join(
        f"{'p@' + f'{k:g}' + '%':>8}" for k in prec.KS
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        m = r.metrics

        def f(x):
            return "     n/a" if x is None else f"{x:8.4f}"

        bound = (
            ""
            if m[f"{which}_mode_exact"]
            else f"  (histogram: AUROC +- {m[f'{which}_auroc_bound']:.1e})"
        )
        lines.append(
            f"{r.field:<16} {r.method:<24} {f(m[f'{which}_auroc'])} "
            + " ".join(f(m[f"{which}_precision_at_{k:g}"]) for k in prec.KS)
            + bound
        )
    return "\n".join(lines)
