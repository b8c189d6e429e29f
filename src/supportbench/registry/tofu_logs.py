"""TOFU's own eval logs (locuslab/tofu ``evaluate_util.py``) aggregated exactly as TOFU does
(``aggregate_eval_stat.py``: get_model_utility, get_forget_quality).

Input: the unlearned model's four files, each ``{key: {data index: value}}`` --

    eval_log.json (retain)   eval_log_forget.json (forget)
    eval_real_author_wo_options.json (real authors)   eval_real_world_wo_options.json (world facts)

-- as a folder, or one ``eval_log_aggregated.json`` holding them under those names; and the retain
model's ``eval_log_forget.json`` (``--retain``), the reference of forget quality. Per file, with l
the per-token (length-normalised: summed NLL / answer tokens, as TOFU writes them) average losses of
an item:

    probability  retain, forget: mean_i exp(-avg_gt_loss_i)
                 real authors, world facts: mean_i p_i / (p_i + sum_j q_ij),
                                            p_i = exp(-avg_gt_loss_i),
                                            q_ij = exp(-average_perturb_loss_ij)
    ROUGE        mean_i rougeL_recall_i
    truth ratio  r_i = exp(mean_j average_perturb_loss_ij - avg_paraphrased_loss_i)
                 (= P(paraphrase) / P(perturbed))
                 forget: mean_i min(r_i, 1/r_i)          others: mean_i max(0, 1 - 1/r_i)
    model utility    scipy.stats.hmean of the nine non-forget values
    forget quality   scipy.stats.ks_2samp(r on forget, the retain model's r on forget).pvalue

TOFU pairs an item's values by position in the file; they are paired here by data index (the same
pairing when, as TOFU writes them, every key lists the indices in one order). Stored under
open-unlearning's names (forget_Q_A_Prob, retain_Truth_Ratio, ra_Q_A_Prob_normalised, ...,
model_utility, forget_quality, and forget_ks_statistic); per-item values as ``<part>:<key>``
(``<part>:<key>:<j>`` for the perturbed answers) and ``retain_model:forget:<key>``. (TOFU's
``utils.py`` has an older get_model_utility -- arithmetic mean of the perturbed probabilities in the
truth ratio; the aggregation script, followed here, is what its README runs.)
"""

from __future__ import annotations

from pathlib import Path

from supportbench.errors import RegistryError
from supportbench.registry.imported import ImportedRun, finite, identity, read_json

FILES = {
    "eval_log.json": "retain",
    "eval_real_author_wo_options.json": "real_authors",
    "eval_real_world_wo_options.json": "world_facts",
    "eval_log_forget.json": "forget",
}
AGGREGATED = "eval_log_aggregated.json"
NESTS = "TOFU's logs nest a few levels"  # said when a file nests too deeply to read
KEYS = ("avg_gt_loss", "rougeL_recall", "avg_paraphrased_loss", "average_perturb_loss")
# open-unlearning's metric names (configs/eval/tofu_metrics/*.yaml) for TOFU's per-file values
NAMES = {
    "retain": ("retain_Q_A_Prob", "retain_Q_A_ROUGE", "retain_Truth_Ratio"),
    "real_authors": ("ra_Q_A_Prob_normalised", "ra_Q_A_ROUGE", "ra_Truth_Ratio"),
    "world_facts": ("wf_Q_A_Prob_normalised", "wf_Q_A_ROUGE", "wf_Truth_Ratio"),
    "forget": ("forget_Q_A_Prob", "forget_Q_A_ROUGE", "forget_truth_ratio"),
}


def looks_like(path: Path) -> bool:
    if path.is_file():
        return path.name == AGGREGATED
    return path.is_dir() and any((path / f).is_file() for f in (*FILES, AGGREGATED))


def load(path: Path, need=tuple(FILES), who: str = "") -> dict[str, dict]:
    """{file name: its log} for the files ``need``, from a folder or an eval_log_aggregated.json."""
    if path.is_file() or (
        path.is_dir()
        and not any((path / f).is_file() for f in FILES)
        and (path / AGGREGATED).is_file()
    ):
        src = path if path.is_file() else path / AGGREGATED
        logs = read_json(
            src,
            NESTS,
            "; tofu-logs reads a folder holding TOFU's eval files, or their "
            "eval_log_aggregated.json",
        )
        if not isinstance(logs, dict):
            raise RegistryError(
                f"{src}: must hold a JSON object {{file name: log}} (TOFU's "
                "eval_log_aggregated.json)"
            )
        missing = [f for f in need if f not in logs]
        if missing:
            raise RegistryError(
                f"{src}: {who}no log of {', '.join(missing)} (it holds: "
                f"{', '.join(logs) or 'none'})"
            )
        return {f: _object(logs[f], f"{src}: '{f}'") for f in need}
    if not path.is_dir():
        raise RegistryError(f"no such folder: {path}")
    missing = [f for f in need if not (path / f).is_file()]
    if missing:
        raise RegistryError(
            f"{path}: {who}missing TOFU eval file(s) {', '.join(missing)} (TOFU's evaluate_util.py "
            f"writes {', '.join(FILES)})"
        )
    return {f: _object(read_json(path / f, NESTS), str(path / f)) for f in need}


def _object(x, where: str) -> dict:
    if not isinstance(x, dict):
        raise RegistryError(
            f"{where} must be a JSON object of TOFU eval keys, got {type(x).__name__}"
        )
    return x


def series(log: dict, key: str, where: str, width: int | None = None):
    """(indices sorted, values) of one per-item key: a float per index, or (``width`` given or not)
    a list."""
    import numpy as np

    if key not in log:
        raise RegistryError(f"{where}: no '{key}' (TOFU's eval files hold {', '.join(KEYS)}, ...)")
    d = _object(log[key], f"{where}: '{key}'")
    if not d:
        raise RegistryError(f"{where}: '{key}' is empty")
    idx = sorted(d, key=_index_order)
    vals = []
    for i in idx:
        v = d[i]
        if isinstance(v, list):
            if not v:
                raise RegistryError(f"{where}: '{key}' item {i} is an empty list")
            vals.append([finite(x, f"{where}: '{key}' item {i}") for x in v])
        else:
            vals.append(finite(v, f"{where}: '{key}' item {i}"))
    arr = (
        np.array(vals, dtype=float)
        if len({len(v) if isinstance(v, list) else -1 for v in vals}) == 1
        else None
    )
    if arr is None:
        raise RegistryError(
            f"{where}: '{key}' items differ in shape (every item needs as many perturbed answers)"
        )
    return idx, arr


def _index_order(i: str):
    return (0, int(i), "") if str(i).lstrip("-").isdigit() else (1, 0, str(i))


def _paired(log: dict, a: str, b: str, where: str):
    ia, xa = series(log, a, where)
    ib, xb = series(log, b, where)
    if ia != ib:
        raise RegistryError(
            f"{where}: '{a}' and '{b}' list different items ({len(ia)} vs {len(ib)}, first "
            f"difference at {next((x for x in ia if x not in set(ib)), ib[0])!r})"
        )
    return xa, xb


def truth_ratios(log: dict, where: str):
    """TOFU's per-item r = exp(mean perturbed avg loss - paraphrased avg loss)."""
    import numpy as np

    para, pert = _paired(log, "avg_paraphrased_loss", "average_perturb_loss", where)
    if pert.ndim != 2:
        raise RegistryError(f"{where}: 'average_perturb_loss' must hold a list of losses per item")
    with np.errstate(
        all="ignore"
    ):  # an overflow is inf, as in TOFU's numpy; not a warning on the console
        return np.exp(pert.mean(axis=-1) - para)


def file_metrics(log: dict, part: str, where: str) -> tuple[float, float, float]:
    """(probability, ROUGE-L recall, truth ratio) of one file, as TOFU's get_model_utility."""
    import numpy as np

    with np.errstate(all="ignore"):  # overflowing losses give TOFU's own inf/0/nan values, silently
        if part in ("retain", "forget"):  # 'eval_log' in the file name
            _, gt = series(log, "avg_gt_loss", where)
            prob = np.mean(np.exp(-gt))
        else:
            gt, pert = _paired(log, "avg_gt_loss", "average_perturb_loss", where)
            if pert.ndim != 2:
                raise RegistryError(
                    f"{where}: 'average_perturb_loss' must hold a list of losses per item"
                )
            p_true, p_false = np.exp(-gt), np.exp(-pert)
            prob = np.mean(p_true / np.concatenate([p_true[:, None], p_false], axis=1).sum(-1))
        _, rouge = series(log, "rougeL_recall", where)
        r = truth_ratios(log, where)
        tr = (
            np.mean(np.minimum(r, 1 / r)) if part == "forget" else np.mean(np.maximum(0, 1 - 1 / r))
        )
    return float(prob), float(rouge.mean()), float(tr)


def aggregate(
    logs: dict[str, dict], retain_forget: dict, where: str = "", retain_where: str = ""
) -> dict[str, float]:
    """Every value TOFU's aggregation reports, under open-unlearning's names."""
    from scipy.stats import hmean, ks_2samp

    out, per_part = {}, {}
    for fname, part in FILES.items():
        per_part[part] = file_metrics(logs[fname], part, f"{where}{fname}")
        out.update(zip(NAMES[part], per_part[part]))
    # in TOFU's order (real authors, world facts, retain; ROUGE, probability, truth ratio): the same
    # sum, bit for bit
    utility = [per_part[p][i] for p in ("real_authors", "world_facts", "retain") for i in (1, 0, 2)]
    import numpy as np

    with np.errstate(all="ignore"):
        out["model_utility"] = float(hmean(utility))
        test = ks_2samp(
            truth_ratios(logs["eval_log_forget.json"], f"{where}eval_log_forget.json"),
            truth_ratios(retain_forget, f"{retain_where}eval_log_forget.json (retain model)"),
        )
    out["forget_quality"] = float(test.pvalue)
    out["forget_ks_statistic"] = float(test.statistic)
    return out


def items(logs: dict[str, dict], retain_forget: dict) -> dict[str, list[float]]:
    """Every numeric per-item value the logs hold, in data-index order (lists: one series per
    answer)."""
    out = {}
    for prefix, log in [(FILES[f], logs[f]) for f in FILES] + [
        ("retain_model:forget", retain_forget)
    ]:
        for key, d in log.items():
            if not isinstance(d, dict) or not d:
                continue
            vals = [d[i] for i in sorted(d, key=_index_order)]
            if all(_plain(v) for v in vals):
                out[f"{prefix}:{key}"] = [float(v) for v in vals]
            elif (
                all(isinstance(v, list) and v and all(_plain(x) for x in v) for v in vals)
                and len({len(v) for v in vals}) == 1
            ):
                for j in range(len(vals[0])):
                    out[f"{prefix}:{key}:{j}"] = [float(v[j]) for v in vals]
    return out


def _plain(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def read(path: Path, options: dict, retain: str | Path | None):
    if retain is None:
        raise RegistryError(
            f"{path}: tofu-logs needs --retain DIR, the retain model's TOFU logs (its "
            "eval_log_forget.json): forget quality is the KS test of the unlearned model's forget "
            "truth ratios against the retain model's"
        )
    retain = Path(retain)
    if not retain.exists():
        raise RegistryError(f"--retain {retain}: no such file or directory")
    cell = identity(options, "tofu-logs", path, {"benchmark": "tofu"})
    logs = load(path)
    ref = load(retain, ("eval_log_forget.json",), "retain model: ")["eval_log_forget.json"]
    where = f"{path}/" if path.is_dir() else f"{path}: "
    rwhere = f"{retain}/" if retain.is_dir() else f"{retain}: "
    metrics = aggregate(logs, ref, where, rwhere)
    return ImportedRun(
        cell=cell, metrics=metrics, items=items(logs, ref), model=options.get("model")
    )
