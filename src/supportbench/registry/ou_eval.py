"""open-unlearning's evaluation files (locuslab/open-unlearning ``src/evals/base.py``:
Evaluator.evaluate).

    <NAME>_EVAL.json      {metric: {"agg_value": number or null, "value_by_index":
                          {index: {field: value}}}} -- every metric run, pre-computed ones
                          included (forget_Q_A_PARA_Prob, ...)
    <NAME>_SUMMARY.json   {metric: agg_value} of the suite's configured metrics

NAME is the evaluator's (TOFU, MUSE, LMEval; LACUNA's Panorama); a folder's evaluators are merged.
Metric names are kept as they are (forget_quality, model_utility, forget_Q_A_Prob,
forget_truth_ratio, ...); each finite ``agg_value`` is a metric of the run, and the summary's values
must agree with the EVAL file's where both have a metric; ``--retain`` (the retain model's
TOFU_EVAL.json) gives forget quality as open-unlearning's ks_test does when the file has none (its
eval ran without retain_logs_path). ``value_by_index`` entries (probability: prob, avg_loss; ROUGE:
rouge1_recall, rougeL_f1, rougeL_recall; truth ratio, ES, EM: score) become per-item series
``<metric>:<field>`` (``<metric>:<field>:<j>`` for the lists of perturbed answers), in data-index
order (a MIA metric's forget/holdout scores as ``<metric>:<part>:score``); when the indices are not
0..n-1, ``<metric>:index`` holds them. Text fields (generations) are left out, and so are
LMEval_EVAL.json's lm-eval samples (its SUMMARY's values are read). A metric whose agg_value is null
(forget_quality without retain logs) or not finite is named in ``skipped``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from supportbench.errors import RegistryError
from supportbench.registry.imported import ImportedRun, identity, read_json

PATTERN = re.compile(r"^(?P<name>.+)_(?P<kind>EVAL|SUMMARY)\.json$")


def files(path: Path) -> dict[str, dict[str, Path]]:
    """{evaluator NAME: {"EVAL"/"SUMMARY": path}} that PATH (a file or a folder) holds."""
    cands = [path] if path.is_file() else sorted(path.iterdir()) if path.is_dir() else []
    out: dict[str, dict[str, Path]] = {}
    for p in cands:
        m = PATTERN.match(p.name)
        if m and p.is_file():
            out.setdefault(m["name"], {})[m["kind"]] = p
    return out


def looks_like(path: Path) -> bool:
    return bool(files(path))


def read_object(path: Path) -> dict:
    """A JSON file holding one object (open-unlearning's and LACUNA's summaries), or a one-line
    error."""
    x = read_json(path, "a summary nests a few levels")
    if not isinstance(x, dict):
        raise RegistryError(f"{path}: must hold a JSON object, got {type(x).__name__}")
    return x


def finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _order(i: str):
    return (0, int(i), "") if str(i).lstrip("-").isdigit() else (1, 0, str(i))


def parse(eval_file: Path | None, summary_file: Path | None) -> tuple[dict, dict, list[str]]:
    """(metrics, per-item series, skipped metric notes) of one evaluator's files."""
    metrics, items, skipped = {}, {}, []
    if eval_file is not None:
        logs = read_object(eval_file)
        for name, res in logs.items():
            if not isinstance(
                res, dict
            ):  # LMEval_EVAL.json keeps lm-eval's samples per task: no value of ours
                skipped.append(f"{name} ({type(res).__name__} in {eval_file.name}, no agg_value)")
                continue
            v = res.get("agg_value")
            if finite(v):
                metrics[name] = float(v)
            elif "agg_value" in res:
                skipped.append(f"{name} (agg_value {v!r})")
            by_index = res.get("value_by_index")
            if by_index is not None:
                if not isinstance(by_index, dict):
                    raise RegistryError(
                        f"{eval_file}: '{name}.value_by_index' must be an object of index -> values"
                    )
                items.update(_series(name, by_index))
            for part, sub in res.items():  # a MIA metric's forget / holdout scores
                if isinstance(sub, dict) and isinstance(sub.get("value_by_index"), dict):
                    items.update(_series(f"{name}:{part}", sub["value_by_index"]))
    if summary_file is not None:
        for name, v in read_object(summary_file).items():
            if not finite(v):
                skipped.append(f"{name} (summary value {v!r})")
                continue
            if name in metrics and not math.isclose(
                metrics[name], float(v), rel_tol=1e-12, abs_tol=0.0
            ):
                raise RegistryError(
                    f"{summary_file}: '{name}' is {v!r} but {eval_file.name} says "
                    f"{metrics[name]!r}; the two files come from different evaluations"
                )
            metrics[name] = float(v)
    return metrics, items, sorted(set(skipped) - {s for s in skipped if s.split(" ")[0] in metrics})


def _series(metric: str, by_index: dict) -> dict[str, list[float]]:
    idx = sorted(by_index, key=_order)
    entries = [by_index[i] for i in idx]
    fields = dict.fromkeys(f for e in entries if isinstance(e, dict) for f in e)
    out = {}
    for f in fields:
        vals = [e.get(f) if isinstance(e, dict) else None for e in entries]
        if all(v is None or _plain(v) for v in vals) and any(v is not None for v in vals):
            out[f"{metric}:{f}"] = [float(v) if v is not None else math.nan for v in vals]
        elif (
            all(isinstance(v, list) for v in vals)
            and vals
            and len({len(v) for v in vals}) == 1
            and all(x is None or _plain(x) for v in vals for x in v)
        ):
            for j in range(len(vals[0])):
                out[f"{metric}:{f}:{j}"] = [
                    float(v[j]) if v[j] is not None else math.nan for v in vals
                ]
    contiguous = [str(i) for i in idx] == [str(k) for k in range(len(idx))]
    if out and not contiguous and all(str(i).lstrip("-").isdigit() for i in idx):
        out[f"{metric}:index"] = [float(i) for i in idx]
    return out


def _plain(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


BENCHMARKS = {
    "TOFU": "tofu",
    "MUSE": "muse",
    "Panorama": "lacuna",
}  # evaluator NAME -> default benchmark


def forget_quality(eval_file: Path, retain: Path) -> float:
    """open-unlearning's ks_test (src/evals/metrics/privacy.py): scipy.stats.ks_2samp of the model's
    forget_truth_ratio scores against the retain model's (its TOFU_EVAL.json), the p-value."""
    from scipy.stats import ks_2samp

    ref_file = retain
    if retain.is_dir():
        found = files(retain)
        ref_file = (found.get("TOFU") or {}).get("EVAL") or next(
            (p["EVAL"] for p in found.values() if "EVAL" in p), None
        )
        if ref_file is None:
            raise RegistryError(f"--retain {retain}: no <NAME>_EVAL.json of the retain model")

    def scores(f: Path, who: str):
        res = read_object(f).get("forget_truth_ratio")
        by_index = res.get("value_by_index") if isinstance(res, dict) else None
        if not isinstance(by_index, dict) or not by_index:
            raise RegistryError(
                f"{f}: no forget_truth_ratio.value_by_index ({who}); forget quality is the KS test "
                "of the two models' forget truth ratios"
            )
        vals = [e.get("score") if isinstance(e, dict) else None for e in by_index.values()]
        if not all(finite(v) for v in vals):
            raise RegistryError(f"{f}: forget_truth_ratio scores must be finite numbers ({who})")
        return vals

    return float(
        ks_2samp(scores(eval_file, "the model"), scores(ref_file, "the retain model")).pvalue
    )


def read(path: Path, options: dict, retain: str | Path | None = None):
    """One imported run from open-unlearning's files at PATH: every evaluator's there (TOFU, MUSE,
    LMEval, ...), merged; one metric name from two evaluators is refused. With ``retain`` (the
    retain model's TOFU_EVAL.json or its folder), forget quality is computed as open-unlearning
    does; a stored one must agree."""
    found = files(path)
    if not found:
        raise RegistryError(f"{path}: no open-unlearning <NAME>_EVAL.json or <NAME>_SUMMARY.json")
    metrics, items, skipped, origin = {}, {}, [], {}
    for name, pair in sorted(found.items()):
        m, it, sk = parse(pair.get("EVAL"), pair.get("SUMMARY"))
        for k in m:
            if k in origin:
                raise RegistryError(
                    f"{path}: metric '{k}' is in both {origin[k]}'s and {name}'s files; import "
                    "one evaluator's files at a time"
                )
            origin[k] = name
        metrics.update(m)
        items.update(it)
        skipped += sk
    if retain is not None:
        retain = Path(retain)
        if not retain.exists():
            raise RegistryError(f"--retain {retain}: no such file or directory")
        own = next(
            (p["EVAL"] for n, p in sorted(found.items()) if "EVAL" in p and n == "TOFU"), None
        ) or next((p["EVAL"] for p in found.values() if "EVAL" in p), None)
        if own is None:
            raise RegistryError(
                f"{path}: --retain needs the model's <NAME>_EVAL.json (its per-item truth ratios)"
            )
        fq = forget_quality(own, retain)
        if "forget_quality" in metrics and not math.isclose(
            metrics["forget_quality"], fq, rel_tol=1e-9
        ):
            raise RegistryError(
                f"{path}: stored forget_quality {metrics['forget_quality']!r} differs from the KS "
                f"test against --retain {retain} ({fq!r}): another retain model?"
            )
        metrics["forget_quality"] = fq
        skipped = [x for x in skipped if not x.startswith("forget_quality ")]
    benches = {BENCHMARKS[n] for n in found if n in BENCHMARKS} or (
        {next(iter(found)).lower()} if len(found) == 1 else set()
    )
    cell = identity(
        options, "ou-eval", path, {"benchmark": benches.pop()} if len(benches) == 1 else {}
    )
    if not metrics:
        raise RegistryError(
            f"{path}: no metric with a finite value"
            + (f" (skipped: {', '.join(skipped)})" if skipped else "")
        )
    return ImportedRun(
        cell=cell, metrics=metrics, items=items, model=options.get("model"), skipped=skipped
    )
