"""Statistics of the paper's tables on Polars frames read from the registry (no torch).

Units: a paired comparison matches runs on (experiment, benchmark, build, field, objective, seed) —
two experiments over the same seeds, or two theta_0 builds, are different units, never paired with
each other (builds are pooled only as replications: ``hierarchical_bootstrap``); ΔJ(A, B) is the
mean of J(A) − J(B) over matched units (positive favours A). Unmatched units are returned, never
dropped silently. Deduplication keeps the first-ingested ok run of each cell (the paper's "n unique
runs").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl
from scipy import stats as sps

from supportbench.experiments.plan import CELL  # a run's cell: experiment, ..., seed, split

UNIT = ("experiment", "benchmark", "build", "field", "objective", "seed")
RESULT_COLUMNS = (
    "run_key",
    *CELL,
    "status",
    "J",
    "G_F",
    "D_coll",
    "triggered",
    "probe_signal",
    "chosen_rho",
    "available_gain",
    "rho0_J",
    "selection",
    "complete",
    "post_hoc",
    "decision_hash",
    "ingest_seq",
)


def load(con, experiment: str | None = None) -> pl.DataFrame:
    """The registry's ``results`` view as a Polars frame (build 0 for a registry written before
    builds existed and opened read-only, whose view lacks the column)."""
    where = "WHERE experiment = $exp" if experiment else ""
    have = {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'results'"
        ).fetchall()
    }
    cols = [c if c in have else f"0::BIGINT AS {c}" for c in RESULT_COLUMNS]
    return con.sql(
        f"SELECT {', '.join(cols)} FROM results {where}",
        params={"exp": experiment} if experiment else None,
    ).pl()


def usable(df: pl.DataFrame) -> pl.DataFrame:
    """ok runs, one per cell (the first ingested)."""
    return (
        df.filter(pl.col("status") == "ok")
        .sort("ingest_seq")
        .unique(subset=list(CELL), keep="first", maintain_order=True)
    )


def pick(
    df: pl.DataFrame, method: str | None = None, variant: str | None = None, **eq
) -> pl.DataFrame:
    if method is not None:
        df = df.filter(pl.col("method") == method)
    if variant is not None:
        df = df.filter(pl.col("variant") == variant)
    for k, v in eq.items():
        df = df.filter(pl.col(k).is_in(v) if isinstance(v, list | tuple | set) else pl.col(k) == v)
    return df


@dataclass(frozen=True)
class Paired:
    frame: pl.DataFrame  # UNIT..., J_a, J_b, diff
    unmatched_a: pl.DataFrame  # units only A has
    unmatched_b: pl.DataFrame

    @property
    def diffs(self) -> np.ndarray:
        return self.frame["diff"].to_numpy()


def paired(a: pl.DataFrame, b: pl.DataFrame, on=UNIT) -> Paired:
    on = list(on)
    aa = a.select([*on, pl.col("J").alias("J_a")])
    bb = b.select([*on, pl.col("J").alias("J_b")])
    j = (
        aa.join(bb, on=on, how="inner")
        .with_columns((pl.col("J_a") - pl.col("J_b")).alias("diff"))
        .sort(on)
    )
    return Paired(j, aa.join(bb, on=on, how="anti"), bb.join(aa, on=on, how="anti"))


def wtl(d: np.ndarray, tol: float = 0.0) -> tuple[int, int, int]:
    """Wins / ties / losses of A over B; a tie is |d| <= tol (exact equality by default)."""
    d = np.asarray(d, dtype=float)
    return int((d > tol).sum()), int((np.abs(d) <= tol).sum()), int((d < -tol).sum())


def loo_range(d: np.ndarray) -> tuple[float, float] | None:
    """Min and max of the mean after deleting one run at a time; undefined (None) for n < 2."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    if n < 2:
        return None
    loo = (d.sum() - d) / (n - 1)
    return float(loo.min()), float(loo.max())


def t_interval(d: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    d = np.asarray(d, dtype=float)
    n = len(d)
    if n < 2:
        return None
    half = sps.t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / math.sqrt(n)
    return float(d.mean() - half), float(d.mean() + half)


def over_builds(per: np.ndarray, within: np.ndarray, n_values: int, level: float = 0.95) -> dict:
    """The interval over B >= 2 independently built theta_0 from the builds' own statistics ``per``
    and each statistic's sampling variance within its build ``within``: centre = mean(per),
    se^2 = max(var(per), mean(within)) / B (three builds that agree by chance must not give an
    interval narrower than one build's noise allows), critical value t at B - 1 degrees of freedom,
    or at the units' n_values - B when the floor decides (docs/benchmarks.md, "Decision log"). A
    build whose sampling variance cannot be estimated (one unit: ``within`` NaN) keeps its
    statistic in the spread and adds nothing to the floor, the mean of the others'."""
    per, within = np.asarray(per, dtype=float), np.asarray(within, dtype=float)
    known = within[np.isfinite(within)]
    between, floor = float(per.var(ddof=1)), float(known.mean()) if len(known) else 0.0
    se = math.sqrt(max(between, floor) / len(per))
    centre = float(per.mean())
    df = len(per) - 1 if between >= floor else max(1, n_values - len(per))
    crit = float(sps.t.ppf(0.5 + level / 2, df))
    return {
        "centre": centre,
        "interval": (centre - crit * se, centre + crit * se),
        "se": se,
        "crit": crit,
    }


def mean_over_builds(values, builds, level: float = 0.95) -> tuple[float, tuple] | None:
    """The mean of ``values`` as the mean of its builds' means, with ``over_builds``' interval
    (each build's within variance s^2 / n over its units; NaN for a build of one unit); None
    below two builds."""
    values, builds = np.asarray(values, dtype=float), np.asarray(builds)
    groups = [values[builds == b] for b in np.unique(builds)]
    if len(groups) < 2:
        return None
    per = np.array([g.mean() for g in groups])
    within = np.array([g.var(ddof=1) / len(g) if len(g) >= 2 else math.nan for g in groups])
    o = over_builds(per, within, sum(len(g) for g in groups), level)
    return o["centre"], o["interval"]


def bootstrap_interval(
    d: np.ndarray, level: float = 0.95, n_boot: int = 10_000, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile interval of the mean, resampling units with replacement (seeded)."""
    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return None
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


@dataclass(frozen=True)
class MeanCI:
    """A mean as a table prints it: the value, its 95% t interval over the units it averages (None
    below two units; the per-method tables' interval too) and their number."""

    value: float
    ci: tuple[float, float] | None
    n: int


def mean_ci(values) -> MeanCI | None:
    """The mean of ``values`` with ``t_interval``'s interval; None for no values."""
    v = np.asarray(values, dtype=float)
    return MeanCI(float(v.mean()), t_interval(v), len(v)) if len(v) else None


def composed_ci(c_static: Paired, dirr_static: Paired) -> MeanCI | None:
    """Eq. 22's composed margin from the method's side, C − full = (C − Static-IV) − (DIR-R −
    Static-IV). Where the two gaps cover the same units it is C − DIR-R unit by unit, and its
    interval is the paired t interval over those units (the two gaps are not independent: each
    unit's Static-IV run is in both). Otherwise -- different evaluation sets, as in the paper, or a
    unit missing from either gap -- it is the difference of the two gaps' means over their own
    units (the components the table prints beside it), with Welch's interval (``sum_ci``)."""
    a, b = c_static.frame, dirr_static.frame
    on = [c for c in UNIT if c in a.columns and c in b.columns]
    both = a.select([*on, "diff"]).join(b.select([*on, "diff"]), on=on, how="inner")
    if both.height and both.height == a.height == b.height:
        return mean_ci((both["diff"] - both["diff_right"]).to_numpy())
    return sum_ci(c_static.diffs, -dirr_static.diffs)


def sum_ci(a, b, level: float = 0.95) -> MeanCI | None:
    """mean(a) + mean(b) for two means over different evaluation sets (Eq. 22's composed margin),
    with Welch's interval: se^2 = s_a^2 / n_a + s_b^2 / n_b at the Welch-Satterthwaite degrees of
    freedom; None when either is empty, no interval when either has fewer than two units; ``n`` is
    the smaller count."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not len(a) or not len(b):
        return None
    value, n = float(a.mean() + b.mean()), min(len(a), len(b))
    if n < 2:
        return MeanCI(value, None, n)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return MeanCI(value, (value, value), n)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(sps.t.ppf(0.5 + level / 2, df)) * se
    return MeanCI(value, (value - half, value + half), n)


@dataclass(frozen=True)
class GapSummary:
    n: int
    mean: float | None
    median: float | None
    wins: int
    ties: int
    losses: int
    loo: tuple[float, float] | None
    t_ci: tuple[float, float] | None
    boot_ci: tuple[float, float] | None

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(
    d: np.ndarray, tol: float = 0.0, seed: int = 0, bootstrap: bool = False
) -> GapSummary:
    """Mean, median, W/T/L, LOO range, t interval; the bootstrap interval only when asked (it costs
    n_boot x n draws)."""
    d = np.asarray(d, dtype=float)
    w, t, l = wtl(d, tol)
    if len(d) == 0:
        return GapSummary(0, None, None, 0, 0, 0, None, None, None)
    return GapSummary(
        len(d),
        float(d.mean()),
        float(np.median(d)),
        w,
        t,
        l,
        loo_range(d),
        t_interval(d),
        bootstrap_interval(d, seed=seed) if bootstrap else None,
    )


def method_means(df: pl.DataFrame, by=("objective",), deduplicate: bool = True) -> pl.DataFrame:
    """Mean J and n (after deduplication) per method x variant x ``by``."""
    return (
        (usable(df) if deduplicate else df)
        .group_by(["method", "variant", *by])
        .agg(pl.col("J").mean().alias("mean_J"), pl.len().alias("n"))
        .sort(["method", "variant", *by])
    )


def ranks(df: pl.DataFrame, by=("objective",)) -> pl.DataFrame:
    """Rank of each static method's mean J within ``by`` (1 = best)."""
    m = method_means(df.filter(pl.col("variant") == "static"), by)
    return m.with_columns(
        pl.col("mean_J").rank("ordinal", descending=True).over(list(by)).alias("rank")
    )


def field_decomposition(p: Paired) -> pl.DataFrame:
    return (
        p.frame.group_by("field")
        .agg(pl.col("diff").mean().alias("mean_gap"), pl.len().alias("n"))
        .sort("field")
    )


def setting_wins(p: Paired, setting=("benchmark", "field", "objective"), seed: int = 0) -> dict:
    """Setting-level mean gaps: how many favour A, and a bootstrap interval over settings."""
    # sorted: group_by's row order varies between processes, and the seeded bootstrap resamples by
    # position
    s = p.frame.group_by(list(setting)).agg(pl.col("diff").mean().alias("gap")).sort(list(setting))
    g = s["gap"].to_numpy()
    return {"wins": int((g > 0).sum()), "n": len(g), "ci": bootstrap_interval(g, seed=seed)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def support_jaccard(supports: pl.DataFrame, across: str = "objective") -> pl.DataFrame:
    """Mean Jaccard overlap of supports between levels of ``across`` (same experiment, benchmark,
    theta_0 build, field, seed, method: supports of two builds are never compared).

    ``supports`` has UNIT columns, method and ``groups`` (list of ids)."""
    levels = sorted(supports[across].unique().to_list())
    keys = [
        k
        for k in ("experiment", "benchmark", "build", "field", "seed", "method", "objective")
        if k != across and k in supports.columns
    ]
    rows = []
    by = {
        tuple(r[k] for k in keys) + (r[across],): set(r["groups"] or [])
        for r in supports.iter_rows(named=True)
    }
    for x in levels:
        for y in levels:
            vals = [
                jaccard(by[k + (x,)], by[k + (y,)])
                for k in {kk[:-1] for kk in by}
                if k + (x,) in by and k + (y,) in by
            ]
            rows.append(
                {"a": x, "b": y, "jaccard": float(np.mean(vals)) if vals else None, "n": len(vals)}
            )
    return pl.DataFrame(rows)


@dataclass(frozen=True)
class DirrMetrics:
    n: int
    delta: float | None  # mean J(DIR-R) - J(Static-IV) over matched units
    median: float | None
    wins: int
    ties: int
    losses: int
    triggered: int
    trigger_rate: float | None  # n^-1 sum 1[s_i > tau]
    available_gain: float | None  # Eq. 20; None when any run lacks a complete candidate set
    captured: float | None  # Eq. 21; None when undefined
    complete: int  # runs with a complete candidate set
    evaluation_selected: int  # runs whose selection read the evaluation outcome
    # the matched units (J_a = DIR-R, J_b = Static-IV, diff) and their per-unit available gains
    # (None where Eq. 20 is undefined): the intervals of the tables' means come from these
    pairs: Paired | None = None
    gains: np.ndarray | None = None


def dirr_metrics(dirr: pl.DataFrame, static: pl.DataFrame, tol: float = 0.0) -> DirrMetrics:
    """DIR-R vs Static-IV on matched units (paper App. B metric definitions)."""
    p = paired(dirr, static)
    d = p.diffs
    w, t, l = wtl(d, tol)
    matched = dirr.join(p.frame.select(list(UNIT)), on=list(UNIT), how="semi")
    n = len(d)
    trig = int(matched["triggered"].fill_null(False).sum()) if n else 0
    complete = int(matched["complete"].fill_null(False).sum()) if n else 0
    avail = captured = gains = None
    if n and complete == n:
        both = matched.join(p.frame, on=list(UNIT)).select("available_gain", "diff")
        gains = both["available_gain"].to_numpy()
        total = float(gains.sum())
        avail = total / n
        captured = float(both["diff"].sum()) / total if total > 0 else None
    evalsel = int((matched["selection"] == "evaluation").sum()) if n else 0
    return DirrMetrics(
        n,
        float(d.mean()) if n else None,
        float(np.median(d)) if n else None,
        w,
        t,
        l,
        trig,
        trig / n if n else None,
        avail,
        captured,
        complete,
        evalsel,
        p,
        gains,
    )


def auroc(score: np.ndarray, label: np.ndarray) -> float | None:
    """P(score of a positive > score of a negative) + ½ P(tie), over every positive-negative
    pair."""
    pos, neg = score[label == 1], score[label == 0]
    if not len(pos) or not len(neg):
        return None
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


def residualize(score, nuisance=None) -> np.ndarray:
    """``score`` minus its least-squares fit on [1, nuisance covariates] (one column per
    covariate)."""
    score = np.asarray(score, dtype=float)
    n = len(score)
    X = np.column_stack(
        [
            np.ones(n),
            *(
                np.asarray(nuisance, dtype=float).T
                if nuisance is not None and np.size(nuisance)
                else []
            ),
        ]
    )
    beta, *_ = np.linalg.lstsq(X, score, rcond=None)
    return score - X @ beta


def localization_quantities(score, injected_backbone, pair=None, nuisance=None) -> dict:
    """How well one signed storage score (> 0: backbone) identifies the injecting interface:

    auroc         AUROC of the score against "injected through the backbone"
    resid_auroc   the same for the score residualized on [1, nuisance covariates] (``residualize``)
    direction     pairs (x/pairs) whose backbone-injected target has the higher score"""
    score = np.asarray(score, dtype=float)
    y = np.asarray(injected_backbone, dtype=float).round().astype(int)
    direction, n_pairs = 0, 0
    if pair is not None:
        pair = np.asarray(pair)
        for p in np.unique(pair):
            idx = np.flatnonzero(pair == p)
            b, l = idx[y[idx] == 1], idx[y[idx] == 0]
            if len(b) == 1 and len(l) == 1:
                n_pairs += 1
                direction += int(score[b[0]] > score[l[0]])
    return {
        "auroc": auroc(score, y),
        "resid_auroc": auroc(residualize(score, nuisance), y),
        "direction": f"{direction}/{n_pairs}",
    }


def locator_quantities(
    scores: dict[str, np.ndarray], injected_backbone, pair=None, nuisance=None
) -> dict[str, dict]:
    """``localization_quantities`` of every locator's scores ({locator name: per-target scores}), in
    name order."""
    return {
        name: localization_quantities(scores[name], injected_backbone, pair, nuisance)
        for name in sorted(scores)
    }


def covariate_aurocs(
    covariates: dict[str, np.ndarray], injected_backbone
) -> dict[str, float | None]:
    """Each covariate's own AUROC for predicting "injected through the backbone" (0.5: it carries no
    label information; far from 0.5 in either direction: regressing it out removes label signal
    along with nuisance). theta_0's diagnostic NLL can be such a covariate: how strongly an
    interface holds its targets differs by interface (docs/benchmarks.md);
    ``experiments.controlled_decision.residualization_covariates`` keeps only those near 0.5."""
    y = np.asarray(injected_backbone, dtype=float).round().astype(int)
    return {name: auroc(np.asarray(v, dtype=float), y) for name, v in sorted(covariates.items())}


def controlled_quantities(
    score, injected_backbone, J_backbone, J_lora, pair=None, nuisance=None
) -> dict:
    """The seven quantities of Table 1, one entry per target:

    storage AUROC        the signed storage score identifying the injecting interface (label:
                         backbone)
    residualized AUROC   the same after regressing the score on [1, nuisance covariates] (least
                         squares); caution: theta_0's diagnostic NLL, one of the recorded
                         covariates, encodes the label (``covariate_aurocs``), so residualizing on
                         it removes label signal too
    within-pair direction  pairs (x/pairs) whose backbone-injected target has the higher score
    LoRA wins            targets (x/n) where J(lora) > J(backbone)
    storage/best agreement  targets where the interface storage points to (score > 0: backbone) is
                         the one with the higher J
    paired difference    mean J(lora) - J(backbone) with a 95% t interval
    correlation          Pearson r of the storage score with J(lora) - J(backbone) (a score pointing
                         to the backbone, i.e. positive, that predicted the better intervention
                         would correlate negatively)"""
    score = np.asarray(score, dtype=float)
    diff = np.asarray(J_lora, dtype=float) - np.asarray(J_backbone, dtype=float)
    n = len(score)
    loc = localization_quantities(score, injected_backbone, pair, nuisance)
    storage_backbone = score > 0
    best_backbone = diff < 0
    agree = int((storage_backbone == best_backbone).sum())
    corr = (
        float(np.corrcoef(score, diff)[0, 1])
        if n > 2 and np.std(score) > 0 and np.std(diff) > 0
        else None
    )
    return {
        **loc,
        "lora_wins": f"{int((diff > 0).sum())}/{n}",
        "agree": f"{agree}/{n}",
        "agree_pct": agree / n,
        "diff": float(diff.mean()),
        "diff_ci": t_interval(diff),
        "corr": corr,
    }
