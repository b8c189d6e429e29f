"""Verdicts on pre-registered claims (``experiments.claims``): a statistic, its interval over
independently built theta_0, its threshold, its power at the effect of interest -- and one of four
verdicts.

    holds           the interval lies on the claim's side of the threshold (and, where the claim
                    gives ``fails_below``, not wholly below it: an effect surely present but surely
                    negligible does not hold)
    does not hold   it lies on the other side (of ``fails_below`` where the claim gives one)
    inconclusive    it straddles the threshold; or the builds disagree (one build's interval says
                    holds, another's does not hold); or fewer builds than the claims file asks; or
                    the verdict would be "does not hold" while the power at the effect of interest
                    is below the stated minimum -- an underpowered claim never reads "does not
                    hold". (A "holds" is not demoted for low power: its interval already bounds
                    its error; the power is printed beside it.)
    not tested      a precondition failed (a validity gate, no DIR-R trigger in a setting, a missing
                    cell, candidates selected on the evaluation split); the numbers are still
                    reported, not judged

Intervals over two or more builds are t intervals on the builds' own statistics (each computed over
that build's seeds and units): centre +- t_{B-1, 1-alpha/2} * se, the standard interval for a few
independent clusters, centred on the mean of the build statistics (the spread's own centre: a pooled
correlation or interaction is not), with se^2 = max(var(build statistics), mean within-build
sampling variance) / B -- a build's statistic varies at least by its own sampling error, so three
builds that agree by chance do not make the interval narrower than that (at the floor the critical
value is t's at the units' degrees of freedom within builds) (2026-11-26 review: LACUNA's three
build means agreed to 0.003 with within-build intervals 0.16-0.31 wide). The within-build variance
is s^2/n over the build's units for a mean, else the hierarchical bootstrap's variance; a build of
one unit has none and adds nothing to the floor (``stats.over_builds``: Table 1 alike). Within one
build (the per-build tables) a mean's interval is a t interval over its units (the hierarchical
bootstrap covered 54% at two units and 78% at four in the same review); other statistics keep the
percentile interval of a hierarchical bootstrap (``hierarchical_bootstrap``: seeds, then units
within a seed; Saravanan, Berman & Sober 2020). The hierarchical bootstrap over builds was the first
choice; at three builds it covered 76-86% at a nominal 95% in a simulation (issue 32's review), so
the pooled interval is the t interval (docs/benchmarks.md, "Decision log"). Power uses the
interval's own standard error ``se`` and critical value ``crit``: for an effect ``delta`` on the
claim's side, power = Phi(delta / se - crit); the detectable effect is (crit + z_power) * se. A
count of comparisons (``count``) is decided by how many comparisons' intervals lie above 0 (k_pos)
and below 0 (k_neg): it holds when k_pos reaches the required count, does not hold when K - k_neg
cannot; its power is the chance that k_pos reaches the count when every comparison has the effect of
interest (Poisson-binomial over the comparisons' own powers). One function per ``kind``; plain
numpy, scipy and Polars, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from scipy import stats as sps

from supportbench.experiments.claims import Claim, Claims
from supportbench.reports import stats
from supportbench.reports.names import arm_display

HOLDS, FAILS, INCONCLUSIVE, NOT_TESTED = "holds", "does not hold", "inconclusive", "not tested"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_TESTED)


@dataclass
class Verdict:
    """One claim's verdict with the numbers that decided it."""

    claim: Claim
    verdict: str
    why: str  # the rule that decided, or what made it inconclusive/not tested
    statistic: float | None = None
    interval: tuple[float, float] | None = None
    power: float | None = None  # at the claim's effect of interest
    detectable: str | None = None  # the smallest effect the design detects at the stated power
    per_build: list[dict] = field(default_factory=list)  # build, n, statistic, interval, verdict
    detail: list[str] = field(default_factory=list)  # comparators, nulls, per-comparison lines
    total: int | None = None  # a count's number of comparisons
    absent: bool = False  # not tested because the registry lacks the runs the claim needs
    # the claim's comparisons of which an arm has no run at all (``unrun``): an experiment that is
    # not the paper's grid never asked for them, and its report says only how many there are
    unrun: list[str] = field(default_factory=list)
    # why and detail as an experiment report prints them: nothing about the unrun comparisons but
    # their number (None: the same as ``why`` and ``detail``)
    scoped: tuple[str, list[str]] | None = None


# ---- the hierarchical bootstrap ------------------------------------------------------------------
class Nested:
    """Row indices of a table grouped build -> seed -> unit (each unit one or more rows)."""

    def __init__(self, builds, seeds, units):
        tree: dict = {}
        for i, key in enumerate(zip(builds, seeds, units)):
            tree.setdefault(key[0], {}).setdefault(key[1], {}).setdefault(key[2], []).append(i)
        self.tree = [
            [[np.asarray(rows) for rows in by_unit.values()] for by_unit in by_seed.values()]
            for by_seed in tree.values()
        ]
        self.n = len(builds)

    def build_rows(self) -> list[np.ndarray]:
        """Each build's rows (every seed's and unit's)."""
        return [
            np.concatenate([rows for by_unit in by_seed for rows in by_unit])
            for by_seed in self.tree
        ]

    def units(self, b: int) -> int:
        """How many units build ``b`` holds (over its seeds)."""
        return sum(len(by_unit) for by_unit in self.tree[b])

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """One resample: builds with replacement, then seeds within each drawn build, then units
        within each drawn seed; the drawn units' rows."""
        out = []
        for b in rng.integers(0, len(self.tree), len(self.tree)):
            seeds = self.tree[b]
            for s in rng.integers(0, len(seeds), len(seeds)):
                units = seeds[s]
                out += [units[u] for u in rng.integers(0, len(units), len(units))]
        return np.concatenate(out) if out else np.zeros(0, dtype=int)


def hierarchical_bootstrap(
    nested: Nested, stat: Callable[[np.ndarray], float], n_boot: int, seed: int
) -> np.ndarray:
    """``n_boot`` values of ``stat`` (a function of row indices) on hierarchical resamples
    (seeded)."""
    rng = np.random.default_rng(seed)
    out = np.array([stat(nested.draw(rng)) for _ in range(n_boot)], dtype=float)
    return out[np.isfinite(out)]


@dataclass(frozen=True)
class Estimate:
    value: float | None
    interval: tuple[float, float] | None
    se: float | None
    sd: float | None  # the unit-level values' standard deviation (None: not a mean)
    n: int
    crit: float | None = (
        None  # the interval's critical value (t_{B-1} over builds, z within one build)
    )
    builds: int = 1  # the builds the interval is over

    def fmt(self, digits: int = 4) -> str:
        if self.value is None:
            return "n/a"
        ci = (
            f" [{self.interval[0]:+.{digits}f}, {self.interval[1]:+.{digits}f}]"
            if self.interval
            else ""
        )
        return f"{self.value:+.{digits}f}{ci} (n = {self.n})"


def estimate(
    values: np.ndarray, nested: Nested, defaults: dict, stat: Callable | None = None, salt: int = 0
) -> Estimate:
    """The statistic (default: the mean of ``values``), its interval and standard error (module
    docstring): over two or more builds, a t interval centred on the mean of the builds' statistics,
    its standard error floored by their sampling error within a build; within one build, a t
    interval over the units for a mean, else the hierarchical bootstrap's percentile interval."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return Estimate(None, None, None, None, 0)
    mean = stat is None
    stat = stat or (lambda idx: float(values[idx].mean()) if len(idx) else math.nan)
    point = stat(np.arange(len(values)))
    sd = float(values.std(ddof=1)) if len(values) > 1 else None
    level = defaults["level"]
    if len(nested.tree) >= 2:
        kept = [(b, r) for b, r in enumerate(nested.build_rows()) if math.isfinite(stat(r))]
        per = np.array([stat(r) for _, r in kept], dtype=float)
        if len(per) < 2 or not math.isfinite(point):
            return Estimate(point, None, None, sd, len(values), builds=len(per))
        # each build's statistic varies at least by its own sampling error: three builds that
        # agree by chance must not give an interval narrower than one build's noise allows (a
        # build of one unit has none to give: NaN, left out of the floor as Table 1 does)
        within = [
            _within_var(values, r, stat, mean, nested, b, defaults, salt)
            if nested.units(b) >= 2
            else math.nan
            for b, r in kept
        ]
        o = stats.over_builds(per, np.array(within), sum(len(r) for _, r in kept), level)
        return Estimate(o["centre"], o["interval"], o["se"], sd, len(values), o["crit"], len(per))
    if mean:  # a t interval over the units: the bootstrap under-covers at a few units
        if len(values) < 2:
            return Estimate(point, None, None, sd, len(values))
        se = sd / math.sqrt(len(values))
        crit = float(sps.t.ppf(0.5 + level / 2, len(values) - 1))
        return Estimate(point, (point - crit * se, point + crit * se), se, sd, len(values), crit)
    boot = hierarchical_bootstrap(nested, stat, defaults["n_boot"], defaults["seed"] + salt)
    if len(boot) < 2:
        return Estimate(point, None, None, sd, len(values))
    a = (1 - level) / 2
    lo, hi = np.quantile(boot, [a, 1 - a])
    return Estimate(
        point,
        (float(lo), float(hi)),
        float(boot.std(ddof=1)),
        sd,
        len(values),
        z(level),
    )


def _within_var(values, rows, stat, mean: bool, nested: Nested, b: int, defaults, salt) -> float:
    """The sampling variance of one build's statistic: s^2 / n over its units for a mean, else the
    variance of the hierarchical bootstrap within the build (0 when it cannot be estimated)."""
    if mean:
        return float(values[rows].var(ddof=1) / len(rows)) if len(rows) > 1 else 0.0
    one = Nested.__new__(Nested)
    one.tree, one.n = [nested.tree[b]], len(rows)
    boot = hierarchical_bootstrap(
        one, stat, max(200, defaults["n_boot"] // 4), defaults["seed"] + salt
    )
    return float(boot.var(ddof=1)) if len(boot) > 1 else 0.0


def side_verdict(interval, threshold: float, side: str, fails_below: float | None = None) -> str:
    """holds / does not hold / inconclusive from an interval and the claim's threshold and side.
    Where the claim gives ``fails_below`` (an effect below it is negligible), an interval wholly
    below it does not hold even when it also clears the threshold (surely present, surely
    negligible)."""
    if interval is None:
        return INCONCLUSIVE
    lo, hi = interval
    if side == "above":
        if hi < (threshold if fails_below is None else fails_below):
            return FAILS
        return HOLDS if lo > threshold else INCONCLUSIVE
    if hi < threshold:
        return HOLDS
    return FAILS if lo >= threshold else INCONCLUSIVE


def z(level: float) -> float:
    return float(sps.norm.ppf(0.5 + level / 2))


def power_at(delta: float, est: Estimate, level: float) -> float | None:
    """Phi(delta / se - crit): the chance that the interval clears the threshold when the effect on
    the claim's side is ``delta`` (normal approximation at the interval's own critical value)."""
    se = est.se
    if se is None or not math.isfinite(se):
        return None
    if se == 0:
        return 1.0 if delta > 0 else 0.0
    return float(sps.norm.cdf(delta / se - (est.crit or z(level))))


def detectable(est: Estimate, defaults: dict) -> float | None:
    """The smallest effect detected with the stated power: (crit + z_power) * se."""
    if est.se is None:
        return None
    return ((est.crit or z(defaults["level"])) + float(sps.norm.ppf(defaults["power"]))) * est.se


def poisson_binomial_tail(p: list[float], k: int) -> float:
    """P(at least k successes) of independent trials with success probabilities ``p``."""
    dist = np.zeros(len(p) + 1)
    dist[0] = 1.0
    for q in p:
        dist[1:] = dist[1:] * (1 - q) + dist[:-1] * q
        dist[0] *= 1 - q
    return float(dist[k:].sum())


def combine(
    v: str, builds: list[dict], power: float | None, defaults: dict, n_builds: int, why: str
) -> tuple[str, str]:
    """The verdict after the replication and power rules (module docstring), with the reason."""
    if n_builds < defaults["builds"]:
        return INCONCLUSIVE, (
            f"{n_builds} theta_0 build(s); the claims file asks for at least {defaults['builds']} "
            f"(rule alone: {v}; {why})"
        )
    per = {b["verdict"] for b in builds}
    if v != INCONCLUSIVE and {HOLDS, FAILS} <= per:
        return (
            INCONCLUSIVE,
            f"the builds disagree (one holds, another does not; pooled: {v}; {why})",
        )
    if v == FAILS and power is not None and power < defaults["power"]:
        return INCONCLUSIVE, (
            f"underpowered: power {power:.2f} at the effect of interest, below "
            f"{defaults['power']:.2f}, and an underpowered claim never reads 'does not hold' "
            f"(rule alone: {v}; {why})"
        )
    if v == HOLDS and power is not None and power < defaults["power"]:
        return (
            v,
            f"{why}; power at the effect of interest only {power:.2f}: the effect may be "
            "overstated",
        )
    return v, why


# ---- data ----------------------------------------------------------------------------------------
def _arm(df: pl.DataFrame, arm: str) -> pl.DataFrame:
    method, _, variant = arm.partition(":")
    return stats.pick(df, method, variant or "static")


def _paired(df: pl.DataFrame, ours: str, other: str, objective: str) -> pl.DataFrame:
    d = df.filter(pl.col("objective") == objective)
    return stats.paired(_arm(d, ours), _arm(d, other)).frame


def _nested(frame: pl.DataFrame, unit: str | tuple = "field") -> Nested:
    units = (
        frame.select(list(unit) if isinstance(unit, tuple) else [unit]).rows()
        if frame.height
        else []
    )
    seeds = frame["seed"].to_list() if "seed" in frame.columns else [0] * frame.height
    return Nested(frame["build"].to_list(), seeds, units)


def _per_build(
    frame: pl.DataFrame,
    values: str,
    defaults: dict,
    decide: Callable[[Estimate], str],
    unit="field",
) -> list[dict]:
    rows = []
    for b in sorted(frame["build"].unique().to_list()):
        f = frame.filter(pl.col("build") == b)
        e = estimate(f[values].to_numpy(), _nested(f, unit), defaults, salt=1 + int(b))
        rows.append(
            {
                "build": b,
                "n": e.n,
                "statistic": e.value,
                "interval": e.interval,
                "verdict": decide(e),
            }
        )
    return rows


# ---- one function per kind -----------------------------------------------------------------------
def agreement(claim: Claim, defaults: dict, ctx, con=None) -> Verdict:
    """The controlled claim: storage's agreement with the better intervention against a threshold,
    with the best constant rule (exact McNemar), the storage x interface interaction and the score's
    correlation with the paired difference beside it, and the paper's direction stated."""
    from supportbench.reports import tables

    builds = tables.controlled_builds(ctx)
    failed = [
        f"build {b}: {g['gate']} ({g['value']}; rule: {g['rule']})"
        for b in builds
        for g in ctx.built_for(tables.controlled_build, b).get("gates", [])
        if not g["passed"]
    ]
    units = tables.controlled_units(ctx).filter(pl.col("learned"))
    bounded = units["Jb_backbone"].null_count() == 0
    jb, jl = ("Jb_backbone", "Jb_lora") if bounded else ("J_backbone", "J_lora")
    u = units.with_columns((pl.col(jl) - pl.col(jb)).alias("diff")).with_columns(
        ((pl.col("score") > 0) == (pl.col("diff") < 0)).cast(pl.Float64).alias("agree"),
        pl.lit(0).alias("seed"),
    )
    th, side = float(claim["threshold"]), claim["side"]
    est = estimate(u["agree"].to_numpy(), _nested(u), defaults)
    v = side_verdict(est.interval, th, side)
    power = power_at(abs(th - float(claim["effect"])), est, defaults["level"])
    mde = detectable(est, defaults)
    per = _per_build(u, "agree", defaults, lambda e: side_verdict(e.interval, th, side))
    n, agree_n = u.height, int(u["agree"].sum())
    why = (
        f"agreement {agree_n}/{n} = {agree_n / n:.3f} pooled; mean of the builds' agreements "
        f"{est.fmt(3)}; holds {side} {th}"
    )
    verdict, why = combine(v, per, power, defaults, len(builds), why)
    detail = [
        f"J: {'bounded' if bounded else 'summed-NLL (no bounded J recorded)'}; {n} learned targets "
        f"over {len(builds)} builds (each build's targets scored by its own frozen primary "
        "locator)."
    ]
    detail += _constant_rule(u, defaults)
    inter = _interaction(u, defaults)
    detail.append(
        f"storage x interface interaction (mean LoRA - backbone difference on LoRA-stored minus on "
        f"backbone-stored targets; > 0 if storage predicted the better intervention): {inter.fmt()}"
    )
    corr = _correlation(u, defaults)
    detail.append(
        "correlation of the storage score with the LoRA - backbone difference (negative if the "
        f"score predicted the better intervention): {corr.fmt(3)}"
    )
    lora = int((u["diff"] > 0).sum())
    detail.append(
        f"direction: LoRA wins {lora}/{n} (paper: 35/36)"
        + ("; the paper's direction is reversed here" if lora * 2 < n else "")
    )
    if failed:  # a gate decides the verdict; the numbers are still shown, marked as not judged
        verdict = NOT_TESTED
        why = (
            f"the construction's validity gates fail: {'; '.join(failed)}. Reported, not judged: "
            f"{why}; the interval rule alone would read '{v}'"
        )
        per = [{**row, "verdict": f"not judged ({row['verdict']})"} for row in per]
    drop = None if mde is None else f"agreement <= {th - mde:.3f} (a drop of {mde:.3f} below {th})"
    return Verdict(claim, verdict, why, est.value, est.interval, power, drop, per, detail)


def _constant_rule(u: pl.DataFrame, defaults: dict) -> list[str]:
    """Storage against the best constant rule (always the interface that wins more often): exact
    McNemar on the targets where exactly one of the two names the better intervention."""
    lora_better = (u["diff"] > 0).to_numpy()
    const_lora = bool(lora_better.mean() > 0.5)
    const_ok = lora_better == const_lora
    store_ok = u["agree"].to_numpy().astype(bool)
    b, c = int((store_ok & ~const_ok).sum()), int((~store_ok & const_ok).sum())
    p = float(sps.binomtest(b, b + c, 0.5).pvalue) if b + c else 1.0
    alpha = 1 - defaults["level"]
    name = "always LoRA" if const_lora else "always the backbone"
    verdict = (
        "the constant rule beats storage: the better intervention follows the interface, not where "
        "the fact is stored"
        if c > b and p < alpha
        else "storage beats the constant rule"
        if b > c and p < alpha
        else "no detectable difference"
    )
    return [
        f"best constant rule ({name}): right on {int(const_ok.sum())}/{len(u)}, storage on "
        f"{int(store_ok.sum())}/{len(u)}; discordant targets: storage right {b}, constant right "
        f"{c}; exact McNemar p = {p:.3g}: {verdict}."
    ]


def _interaction(u: pl.DataFrame, defaults: dict) -> Estimate:
    diff = u["diff"].to_numpy()
    lora_stored = u["injected_backbone"].to_numpy() < 0.5

    def stat(idx):
        d, ls = diff[idx], lora_stored[idx]
        return float(d[ls].mean() - d[~ls].mean()) if ls.any() and (~ls).any() else math.nan

    return estimate(diff, _nested(u), defaults, stat=stat, salt=101)


def _correlation(u: pl.DataFrame, defaults: dict) -> Estimate:
    score, diff = u["score"].to_numpy(), u["diff"].to_numpy()

    def stat(idx):
        a, b = score[idx], diff[idx]
        return (
            float(np.corrcoef(a, b)[0, 1])
            if len(idx) > 2 and a.std() > 0 and b.std() > 0
            else math.nan
        )

    return estimate(diff, _nested(u), defaults, stat=stat, salt=102)


def count(claim: Claim, defaults: dict, ctx, con=None) -> Verdict:
    """Comparisons (objective x baseline) whose paired mean J(ours) - J(baseline) has an interval
    above 0, against the required count; every comparison's mean and interval beside it."""
    df = ctx.ok(_key(ctx, claim.benchmark))
    names = claim.get("named") or [
        f"{o}:{b}" for o in claim["objectives"] for b in claim["baselines"]
    ]
    required = int(claim["required"])
    comps, missing = [], []
    builds = sorted(df["build"].unique().to_list()) if df.height else []
    ours = _arm(df, claim["ours"]) if df.height else df
    objectives = {n.split(":", 1)[0] for n in names}
    if "selection" in ours.columns:
        ev = ours.filter(
            pl.col("objective").is_in(list(objectives)) & (pl.col("selection") == "evaluation")
        )
        if ev.height:  # review: the count claims judged them as if selected honestly
            return Verdict(
                claim,
                NOT_TESTED,
                f"{ev.height} of {claim['ours']}'s runs selected their candidate on the "
                "evaluation split: they cannot lose to a static continuation there",
            )
    unrun = _unrun(claim, df)
    for k, name in enumerate(names):
        obj, base = name.split(":", 1)
        if name in unrun:
            continue
        fr = _paired(df, claim["ours"], base, obj)
        have = set(fr["build"].unique().to_list()) if fr.height else set()
        if not fr.height or have != set(builds):
            missing.append(
                f"{_gap_label(claim['ours'], name)} "
                f"({'no matched units' if not fr.height else 'builds ' + str(sorted(have))})"
            )
            continue
        e = estimate(fr["diff"].to_numpy(), _nested(fr), defaults, salt=k)
        comps.append((name, fr, e))
    if missing or unrun:
        unmatched = (
            ["comparisons without matched units in every build: " + ", ".join(missing)]
            if missing
            else []
        )
        ran = [
            "the comparisons with matched units in every build (reported, not judged):",
            *(f"  - {_gap_label(claim['ours'], n)}: {e.fmt()}" for n, _, e in comps),
        ]
        return Verdict(
            claim,
            NOT_TESTED,
            "; ".join(
                unmatched
                + ([f"comparisons with no runs of one arm: {', '.join(unrun)}"] if unrun else [])
            ),
            detail=ran if comps else [],
            unrun=unrun,
            scoped=(
                "; ".join((unmatched + [_not_asked(unrun, len(names))]) if unrun else unmatched),
                ran if comps else [],
            ),
        )
    verdict, why, power, mde, per = _count_rule(comps, required, defaults, len(builds))
    pos = sum(1 for _, _, e in comps if (e.value or 0) > 0)
    detail = [f"point estimates positive: {pos}/{len(comps)} (the paper's reading)"]
    detail += [
        f"  - {_gap_label(claim['ours'], n)}: {e.fmt()}"
        for n, _, e in sorted(comps, key=lambda c: -(c[2].value or 0))
    ]
    if claim.get("named"):
        detail += _all_baselines(claim, df, defaults)
    k_pos = sum(1 for _, _, e in comps if e.interval and e.interval[0] > 0)
    k_neg = sum(1 for _, _, e in comps if e.interval and e.interval[1] < 0)
    bounds = (float(k_pos), float(len(comps) - k_neg))
    return Verdict(
        claim, verdict, why, float(k_pos), bounds, power, mde, per, detail, total=len(comps)
    )


def _count_rule(comps, required: int, defaults: dict, n_builds: int):
    K = len(comps)
    k_pos = sum(1 for _, _, e in comps if e.interval and e.interval[0] > 0)
    k_neg = sum(1 for _, _, e in comps if e.interval and e.interval[1] < 0)
    v = HOLDS if k_pos >= required else FAILS if K - k_neg < required else INCONCLUSIVE
    why = (
        f"{k_pos}/{K} comparisons have an interval above 0 and {k_neg} below; at most {K - k_neg} "
        f"can be positive; required {required}/{K}"
    )

    def composite(dz: float) -> float:
        return poisson_binomial_tail(
            [power_at(dz * (e.sd or 0.0), e, defaults["level"]) or 0.0 for _, _, e in comps],
            required,
        )

    power = composite(defaults["effect_dz"])
    grid = [g for g in np.arange(0.05, 5.0001, 0.05) if composite(float(g)) >= defaults["power"]]
    mde = (
        f"every comparison at d_z >= {grid[0]:.2f} (the claims file's effect of interest: "
        f"{defaults['effect_dz']})"
        if grid
        else "no effect up to d_z = 5"
    )
    per = []
    for b in sorted({b for _, fr, _ in comps for b in fr["build"].unique().to_list()}):
        ests = []
        for k, (_, fr, _) in enumerate(comps):
            f = fr.filter(pl.col("build") == b)
            ests.append(
                estimate(f["diff"].to_numpy(), _nested(f), defaults, salt=1000 + k + 31 * int(b))
            )
        kp = sum(1 for e in ests if e.interval and e.interval[0] > 0)
        kn = sum(1 for e in ests if e.interval and e.interval[1] < 0)
        per.append(
            {
                "build": b,
                "n": sum(e.n for e in ests),
                "statistic": float(kp),
                "interval": (kp, K - kn),
                "verdict": HOLDS
                if kp >= required
                else FAILS
                if K - kn < required
                else INCONCLUSIVE,
            }
        )
    verdict, why = combine(v, per, power, defaults, n_builds, why)
    return verdict, why, power, mde, per


def _all_baselines(claim: Claim, df: pl.DataFrame, defaults: dict) -> list[str]:
    """The full set beside the named comparisons: reported, not judged (the paper claims only the
    named)."""
    out, pos, sig = [], 0, 0
    for k, (obj, base) in enumerate(
        (o, b) for o in claim["objectives"] for b in claim["baselines"]
    ):
        fr = _paired(df, claim["ours"], base, obj)
        if fr.height:
            e = estimate(fr["diff"].to_numpy(), _nested(fr), defaults, salt=500 + k)
            pos += (e.value or 0) > 0
            sig += bool(e.interval and e.interval[0] > 0)
            out.append(f"    - {_gap_label(claim['ours'], f'{obj}:{base}')}: {e.fmt()}")
    return [
        f"all baselines (reported, not judged): {pos}/{len(out)} positive point estimates, {sig} "
        "with an interval above 0",
        *out,
    ]


def contrast(claim: Claim, defaults: dict, ctx, con=None) -> Verdict:
    """The objective's effect on the initial support: Jaccard overlap within one objective across
    seeds minus across objectives across seeds, per (build, field)."""
    if con is None:
        return Verdict(claim, NOT_TESTED, "needs the registry's supports")
    exp = ctx.results["experiment"][0] if ctx.results.height else None
    sup = con.execute(
        """SELECT r.build, r.field, r.objective, r.seed, s.groups FROM runs r JOIN supports s
        USING (run_key) JOIN outcomes o USING (run_key) WHERE r.method = $m AND r.benchmark = $b
        AND o.status = 'ok' AND ($exp IS NULL OR r.experiment = $exp) ORDER BY ALL""",
        {"m": claim["method"], "b": claim.benchmark, "exp": exp},
    ).fetchall()
    o1, o2 = claim["objectives"][:2]
    by: dict = {}
    for build, fld, obj, seed, groups in sup:
        by.setdefault((build, fld), {}).setdefault(obj, {})[seed] = set(groups or [])
    rows, same, short = [], [], []
    for (build, fld), objs in sorted(by.items()):
        a, b = objs.get(o1, {}), objs.get(o2, {})
        if len(a) < 2 or len(b) < 2:
            short.append(f"build {build} {fld} ({o1}: {len(a)} seeds, {o2}: {len(b)})")
            continue
        within = [stats.jaccard(x[s], x[t]) for x in (a, b) for s in x for t in x if s < t]
        across = [stats.jaccard(a[s], b[t]) for s in a for t in b if s != t]
        same += [stats.jaccard(a[s], b[s]) for s in a if s in b]
        rows.append(
            {
                "build": build,
                "field": fld,
                "seed": 0,
                "within": float(np.mean(within)),
                "across": float(np.mean(across)),
                "value": float(np.mean(within) - np.mean(across)),
            }
        )
    if short or not rows:
        return Verdict(
            claim,
            NOT_TESTED,
            "needs at least two seeds of each objective per build and field: "
            + (", ".join(short) or "no supports of the method"),
        )
    fr = pl.DataFrame(rows)
    th, side, fb = float(claim["threshold"]), claim["side"], claim.get("fails_below")
    est = estimate(fr["value"].to_numpy(), _nested(fr), defaults)
    v = side_verdict(est.interval, th, side, fb)
    # the effect of interest: the claim's own bound of a negligible contrast where it states one
    # (review: d_z x sd put it below that bound, so no 'does not hold' could ever be powered)
    delta = abs(fb - th) if fb is not None else defaults["effect_dz"] * (est.sd or 0.0)
    power = power_at(delta, est, defaults["level"])
    mde = detectable(est, defaults)
    per = _per_build(fr, "value", defaults, lambda e: side_verdict(e.interval, th, side, fb))
    why = (
        f"within-objective minus across-objective overlap {est.fmt(3)}; holds above {th}, does not "
        f"hold below {fb if fb is not None else th}"
    )
    verdict, why = combine(v, per, power, defaults, fr["build"].n_unique(), why)
    detail = [
        f"mean overlap within one objective across seeds {fr['within'].mean():.3f}, across "
        f"objectives across seeds {fr['across'].mean():.3f}; across objectives at the same seed "
        f"{np.mean(same):.3f} (paper: about 0.143)"
    ]
    contrast = (
        None if mde is None or not est.sd else f"a contrast of {mde:.3f} (d_z {mde / est.sd:.2f})"
    )
    return Verdict(claim, verdict, why, est.value, est.interval, power, contrast, per, detail)


def paired_mean(claim: Claim, defaults: dict, ctx, con=None) -> Verdict:
    """DIR-R against Static-IV per setting (objective): the paired mean difference and its interval,
    the gain on triggered units, and a verdict per setting; the claim holds when every setting
    holds, does not hold when one does not, and is not tested when a setting could not be."""
    df = ctx.ok(_key(ctx, claim.benchmark))
    th, side, fb = float(claim["threshold"]), claim["side"], claim.get("fails_below")
    settings, per_build, detail, powers = [], [], [], []
    unrun = _unrun(claim, df)
    for k, obj in enumerate(claim["settings"]):
        d = df.filter(pl.col("objective") == obj)
        ours = _arm(d, claim["ours"])
        fr = stats.paired(ours, _arm(d, claim["reference"])).frame
        if not fr.height:
            settings.append((obj, NOT_TESTED, "no runs" if obj in unrun else "no paired runs"))
            continue
        gate = ours.join(fr.select(list(stats.UNIT)), on=list(stats.UNIT), how="semi")
        fr = fr.join(
            gate.select([*stats.UNIT, "triggered", "selection"]), on=list(stats.UNIT), how="left"
        )
        evaluation = int((fr["selection"] == "evaluation").sum())
        trig = int(fr["triggered"].fill_null(False).sum())
        if evaluation:
            settings.append(
                (
                    obj,
                    NOT_TESTED,
                    f"{evaluation}/{fr.height} DIR-R runs selected their candidate on the "
                    "evaluation split: DIR-R cannot lose to Static-IV there",
                )
            )
            continue
        if trig == 0:
            settings.append(
                (
                    obj,
                    NOT_TESTED,
                    f"DIR-R never triggered ({fr.height} runs): every run is Static-IV's "
                    "continuation, so there is nothing to compare",
                )
            )
            continue
        # a build where DIR-R never triggered is not tested (its rows are Static-IV's continuation):
        # its zero differences would pull the pooled estimate to 0 and count toward the builds
        quiet = set(
            fr.group_by("build")
            .agg(pl.col("triggered").fill_null(False).any().alias("t"))
            .filter(~pl.col("t"))["build"]
            .to_list()
        )
        tested = fr.filter(~pl.col("build").is_in(sorted(quiet)))
        n_builds = tested["build"].n_unique()  # this setting's tested builds
        e = estimate(tested["diff"].to_numpy(), _nested(tested), defaults, salt=k)
        t = fr.filter(pl.col("triggered").fill_null(False))
        et = estimate(t["diff"].to_numpy(), _nested(t), defaults, salt=50 + k)
        power = power_at(defaults["effect_dz"] * (e.sd or 0.0), e, defaults["level"])
        mde = detectable(e, defaults)
        pb = _per_build(fr, "diff", defaults, lambda x: side_verdict(x.interval, th, side, fb))
        pb = [{**r, "verdict": NOT_TESTED} if r["build"] in quiet else r for r in pb]
        powers.append((obj, power, mde))
        gap = f"{_arm_label(claim['ours'])} − {_arm_label(claim['reference'])}"
        v, why = combine(
            side_verdict(e.interval, th, side, fb),
            pb,
            power,
            defaults,
            n_builds,
            f"{gap}: mean {e.fmt()}",
        )
        settings.append((obj, v, why))
        per_build += [
            {**row, "build": f"{row['build']} ({obj})"} for row in pb
        ]  # one row per build and setting
        detail.append(
            f"{obj}: {gap}: mean {e.fmt()}, trigger rate {trig}/{fr.height}, gain on triggered "
            f"runs {et.fmt()}, power {power:.2f} at d_z {defaults['effect_dz']}, detectable effect "
            f"{'n/a' if mde is None else f'{mde:.4f}'}; verdict: {v}"
        )
    return _settings_verdict(claim, settings, powers, per_build, detail, unrun)


def _settings_verdict(
    claim: Claim, settings: list, powers: list, per_build: list, detail: list, unrun: list
) -> Verdict:
    """A paired-mean claim's verdict from its settings' ``(objective, verdict, why)``: every
    setting must hold; its power is the largest setting's."""
    for obj, v, why in settings:
        if v == NOT_TESTED:
            detail.append(f"{obj}: not tested ({why})")
    verdicts = [v for _, v, _ in settings]
    # every setting must hold: one that does not decides; one that could not be tested leaves the
    # claim untested
    overall = (
        FAILS
        if FAILS in verdicts
        else NOT_TESTED
        if NOT_TESTED in verdicts
        else INCONCLUSIVE
        if INCONCLUSIVE in verdicts
        else HOLDS
    )
    why = "; ".join(f"{obj}: {v}" + (f" ({w})" if v != HOLDS else "") for obj, v, w in settings)
    # the claim can read 'does not hold' through any setting: its power is the largest setting's
    best = max(powers, key=lambda p: p[1] or 0.0, default=None)
    power = None if best is None else best[1]
    mde = (
        None
        if best is None
        else "per setting: "
        + ", ".join(
            f"{o} {'n/a' if m is None else f'{m:.4f}'} (power {p:.2f})" for o, p, m in powers
        )
    )
    asked = [x for x in settings if x[0] not in unrun]
    scoped = (
        "; ".join(
            [f"{obj}: {v}" + (f" ({w})" if v != HOLDS else "") for obj, v, w in asked]
            + [_not_asked(unrun, len(settings))]
        ),
        [line for line in detail if line.split(":", 1)[0] not in unrun],
    )
    return Verdict(
        claim,
        overall,
        why,
        None,
        None,
        power,
        mde,
        per_build,
        detail,
        unrun=unrun,
        scoped=scoped if unrun else None,
    )


KINDS: dict[str, Callable] = {
    "agreement": agreement,
    "count": count,
    "contrast": contrast,
    "paired_mean": paired_mean,
}


def comparisons(claim: Claim) -> list[tuple[str, list[tuple[str, str]]]]:
    """What a claim compares, each comparison as ``(label, [(objective, arm), ...])``: the arms
    (``method:variant``) whose runs under that objective it needs. A count compares its method with
    each baseline under each objective (``npo:random``), a paired mean its method with its
    reference per setting (``npo``), a contrast the method's supports under its objectives; the
    controlled claim compares the construction's two interfaces, which no other experiment runs
    (none listed)."""
    if claim.kind == "count":
        names = claim.get("named") or [
            f"{o}:{b}" for o in claim["objectives"] for b in claim["baselines"]
        ]
        return [(n, [(n.split(":")[0], claim["ours"]), tuple(n.split(":", 1))]) for n in names]
    if claim.kind == "paired_mean":
        return [(o, [(o, claim["ours"]), (o, claim["reference"])]) for o in claim["settings"]]
    if claim.kind == "contrast":
        objs = claim["objectives"]
        return [(" vs ".join(objs), [(o, claim["method"]) for o in objs])]
    return []


def _unrun(claim: Claim, df: pl.DataFrame) -> list[str]:
    """The labels of the claim's comparisons (``comparisons``) of which an arm has no run in
    ``df`` (final ok runs of the claim's benchmark) under its objective."""
    ran = set(df.select("objective", "method", "variant").unique().rows()) if df.height else set()

    def has(objective: str, arm: str) -> bool:
        method, _, variant = arm.partition(":")
        return (objective, method, variant or "static") in ran

    return [label for label, arms in comparisons(claim) if not all(has(*a) for a in arms)]


def _not_asked(unrun: list[str], total: int) -> str:
    """An experiment report's line for what the experiment never ran: the number alone."""
    return f"{len(unrun)} of the claim's {total} comparisons not run by this experiment"


def _gap_label(ours: str, name: str) -> str:
    """A count's comparison as the difference it measures, method − reference: the claim's
    method minus the baseline (``npo:random`` -> ``npo: Intervention Score + DIR-R − Random``)."""
    obj, base = name.split(":", 1)
    return f"{obj}: {_arm_label(ours)} − {_arm_label(base)}"


def _arm_label(arm: str) -> str:
    """An arm (``method[:variant]``) by its display name: ``Intervention Score + DIR-R``."""
    method, _, variant = arm.partition(":")
    return arm_display(method, variant or "static")


def _key(ctx, benchmark: str) -> str:
    """The Context key of a benchmark name (``tables.BENCH``: natural -> natural_tofu, ...)."""
    return next((k for k, v in ctx.bench.items() if v == benchmark), benchmark)


def judge(claims: Claims, ctx, con=None) -> list[Verdict]:
    """Every claim's verdict; a claim whose data the registry lacks is 'not tested', saying what is
    missing."""
    from supportbench.reports.tables import Missing

    out = []
    for c in claims.claims:
        try:
            v = KINDS[c.kind](c, c.settings(claims.defaults), ctx, con)
            if comparisons(c) and not v.unrun:
                v.unrun = _unrun(c, ctx.ok(_key(ctx, c.benchmark)))
            out.append(v)
        except Missing as m:
            out.append(Verdict(c, NOT_TESTED, str(m), absent=True))
    return out
