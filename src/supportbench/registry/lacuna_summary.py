"""LACUNA's evaluation summaries (McGill-NLP/LACUNA, evaluation release), read from one run folder
``<root>/<size>/<regime>/unlearned_models/<Field>/<Method>/`` where upstream writes them:

    Panorama_SUMMARY.json      src/eval.py through open-unlearning's Evaluator ("Panorama"):
                               {metric: value} -- forget_Q_A_Prob, forget_Q_A_ROUGE,
                               extraction_strength, exact_memorization, their _paraphrased forms
                               and the retain_ ones
    Panorama_EVAL.json         the same evaluation per item (open-unlearning's shape; ``ou_eval``)
    lm_eval.json               scripts/lm_eval_utility.py: {task: accuracy or null, "_mean": mean}
                               (ARC, HellaSwag, MMLU) -> metrics lm_eval_<task>, lm_eval_mean
    extraction_leakage.json    scripts/extraction_leakage.py: attempts, total_forget_people,
                               still_leaking_after_unlearn, forgotten_by_unlearn,
                               resurfaced_after_relearn, pct_resurfaced_of_forgotten (kept under
                               these names; its "field" names the field)

At least one must be there. The field and method come from the folder layout
(``unlearned_models/<Field>/ <Method>``) or extraction_leakage.json's field when the options do not
name them; the benchmark is 'lacuna'.
"""

from __future__ import annotations

from pathlib import Path

from supportbench.errors import RegistryError
from supportbench.experiments.metric_names import LACUNA_LEAKAGE
from supportbench.registry import ou_eval
from supportbench.registry.imported import ImportedRun, identity

SUMMARY, EVAL, LM_EVAL, LEAKAGE = (
    "Panorama_SUMMARY.json",
    "Panorama_EVAL.json",
    "lm_eval.json",
    "extraction_leakage.json",
)
LEAKAGE_KEYS = LACUNA_LEAKAGE  # extraction_leakage.json's summary, as relearn.py records them


def folder(path: Path) -> Path:
    return path.parent if path.is_file() else path


def looks_like(path: Path) -> bool:
    if path.is_file():
        return path.name in (SUMMARY, EVAL, LM_EVAL, LEAKAGE)
    return path.is_dir() and any((path / f).is_file() for f in (SUMMARY, EVAL, LM_EVAL, LEAKAGE))


def is_run_folder(path: Path) -> bool:
    """Only LACUNA writes these files or this layout (Panorama files alone open-unlearning could
    have written)."""
    d = folder(path)
    return (
        (d / LM_EVAL).is_file()
        or (d / LEAKAGE).is_file()
        or d.parent.parent.name == "unlearned_models"
    )


def read(path: Path, options: dict):
    d = folder(path)
    present = [f for f in (SUMMARY, EVAL, LM_EVAL, LEAKAGE) if (d / f).is_file()]
    if not present:
        raise RegistryError(
            f"{d}: no LACUNA summary ({', '.join((SUMMARY, EVAL, LM_EVAL, LEAKAGE))})"
        )
    inferred = {"benchmark": "lacuna"}
    if d.parent.parent.name == "unlearned_models":
        inferred.update(field=d.parent.name, method=d.name)
    metrics, items, skipped = {}, {}, []
    if SUMMARY in present or EVAL in present:
        metrics, items, skipped = ou_eval.parse(
            d / EVAL if EVAL in present else None, d / SUMMARY if SUMMARY in present else None
        )
    if LM_EVAL in present:
        for task, v in ou_eval.read_object(d / LM_EVAL).items():
            name = "lm_eval_mean" if task == "_mean" else f"lm_eval_{task}"
            if ou_eval.finite(v):
                metrics[name] = float(v)
            else:
                skipped.append(f"{name} ({v!r})")
    if LEAKAGE in present:
        leak = ou_eval.read_object(d / LEAKAGE)
        for k in LEAKAGE_KEYS:
            if k not in leak:
                raise RegistryError(
                    f"{d / LEAKAGE}: no '{k}' (extraction_leakage.py writes "
                    f"{', '.join(LEAKAGE_KEYS)})"
                )
            if not ou_eval.finite(leak[k]):
                raise RegistryError(
                    f"{d / LEAKAGE}: '{k}' must be a finite number, got {leak[k]!r}"
                )
            metrics[k] = float(leak[k])
        named = leak.get("field")
        if isinstance(named, str) and inferred.setdefault("field", named) != named:
            raise RegistryError(
                f"{d / LEAKAGE}: field '{named}' but the folder is field '{inferred['field']}'; "
                "which run is this?"
            )
    if not metrics:
        raise RegistryError(f"{d}: no metric with a finite value in {', '.join(present)}")
    cell = identity(options, "lacuna-summary", path, inferred)
    return ImportedRun(
        cell=cell, metrics=metrics, items=items, model=options.get("model"), skipped=skipped
    )
