"""Every table of the paper, by LaTeX label: a query on the registry + a Jinja template -> booktabs
.tex.

Each table's builder returns its template context or raises ``Missing(reason)``; ``render_all``
writes ``<out>/<label with ':' -> '-'>.tex`` for every label, with an explicit "missing" note when
the data are not in the registry. Formatting and names are in ``reports/latex.py``, statistics in
``reports/stats.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
from jinja2 import Environment

from supportbench.catalog import BASELINES, MODERN
from supportbench.experiments.controlled_decision import (
    COVARIATE_BAND,
    RECALL_THRESHOLD,
    construction_gates,
    residualization_covariates,
)
from supportbench.experiments.record import ControlledDecision
from supportbench.reports import stats
from supportbench.reports.latex import FIELD_NAMES, OBJECTIVE_NAMES, environment, template_text, tex
from supportbench.reports.stats import controlled_quantities, covariate_aurocs, locator_quantities

DIRR_METHOD = "intervention_score"
BENCH = {"natural": "natural_tofu", "lacuna": "lacuna", "controlled": "controlled"}


class Missing(Exception):
    """The registry lacks the data a table needs; the reason is printed in the table."""


# ---- context -------------------------------------------------------------------------------------
@dataclass
class Context:
    results: pl.DataFrame
    decisions: pl.DataFrame = field(default_factory=pl.DataFrame)
    components: pl.DataFrame = field(default_factory=pl.DataFrame)  # run_key, name, value
    bench: dict = field(default_factory=lambda: dict(BENCH))
    tol: float = 0.0
    theta0: dict = field(default_factory=dict)  # benchmark -> its runs' theta_0 content hashes
    run_decisions: pl.DataFrame = field(
        default_factory=pl.DataFrame
    )  # run_key, decision (controlled runs)
    reference: str | None = (
        None  # --reference: the arm the per-method tables compare with (overview.py)
    )
    _ok: dict = field(default_factory=dict, repr=False)
    _built: dict = field(default_factory=dict, repr=False)

    def built(self, builder: Callable[[Context], dict]) -> dict:
        """A builder's result, computed once (tables that share a computation reuse it)."""
        return self.built_for(builder)

    def built_for(self, builder: Callable[..., dict], *args) -> dict:
        """``builder(self, *args)``, computed once per ``args``; ``Missing`` is remembered and
        raised again."""
        key = (builder, *args)
        if key not in self._built:
            try:
                self._built[key] = builder(self, *args)
            except Missing as m:
                self._built[key] = m
        res = self._built[key]
        if isinstance(res, Missing):
            raise res
        return res

    @classmethod
    def from_registry(cls, con, experiment: str | None = None, **kw) -> Context:
        results = stats.load(con, experiment)
        decisions = con.sql(
            "SELECT hash, tau, benchmark, objective, baselines, frozen_at, content FROM decisions"
        ).pl()
        comps = con.sql(
            "SELECT c.run_key, c.name, c.value FROM components c JOIN runs r USING (run_key) "
            "WHERE r.benchmark = 'controlled'"
        ).pl()
        theta0: dict[str, list[str]] = {}
        for b, h in con.execute(
            "SELECT DISTINCT r.benchmark, p.model_hash FROM runs r JOIN provenance p "
            "USING (run_key) WHERE p.model_hash IS NOT NULL AND ($exp IS NULL OR "
            "r.experiment = $exp) ORDER BY 1, 2",
            {"exp": experiment},
        ).fetchall():
            theta0.setdefault(b, []).append(h)
        run_dec = con.sql(
            """SELECT run_key, json_extract_string(hyperparameters, """
            """'$."benchmark.decision"')
            AS decision FROM runs WHERE benchmark = 'controlled'"""
        ).pl()
        return cls(results, decisions, comps, theta0=theta0, run_decisions=run_dec, **kw)

    def final(self, benchmark: str) -> pl.DataFrame:
        """The final-split ok runs of one benchmark; ``Missing`` when there are none."""
        return _require(
            self.ok(benchmark), f"no final-split runs of benchmark '{self.bench[benchmark]}'"
        )

    def ok(self, benchmark: str, split: str = "final") -> pl.DataFrame:
        """Deduplicated ok runs of one benchmark and split (memoised: every table reads them)."""
        key = (benchmark, split)
        if key not in self._ok:
            self._ok[key] = stats.usable(
                self.results.filter(
                    (pl.col("benchmark") == self.bench[benchmark]) & (pl.col("split") == split)
                )
            )
        return self._ok[key]


def _baselines_present(df: pl.DataFrame) -> list[str]:
    present = set(df.filter(pl.col("variant") == "static")["method"].unique().to_list()) - {
        DIRR_METHOD
    }
    return [m for m in BASELINES if m in present] + sorted(present - set(BASELINES))


def _require(df: pl.DataFrame, what: str) -> pl.DataFrame:
    if df.is_empty():
        raise Missing(what)
    return df


def per_objective(df: pl.DataFrame, objectives=("npo", "simnpo")):
    """(objective, its rows) for the paper's NPO/SimNPO panels, in that order."""
    return ((obj, df.filter(pl.col("objective") == obj)) for obj in objectives)


# ---- table builders ------------------------------------------------------------------------------
# Every gap is method - reference (positive: the row's method is better than the reference), the
# reference named in the table's caption (``TableDef.reference``); the paper prints the opposite
# sign, reference - baseline. Every mean is a ``stats.MeanCI``: the value with its t interval over
# the units it averages, as in the per-method tables.
def _j(df: pl.DataFrame) -> stats.MeanCI | None:
    """Mean J of ``df``'s runs with its interval."""
    return stats.mean_ci(df["J"].to_numpy())


def _gap_row(p: stats.Paired, tol: float) -> dict:
    """A paired gap's cells: mean with interval, median, W/T/L and LOO range of p's diffs."""
    s = stats.summarize(p.diffs, tol)
    return {
        "gap": stats.MeanCI(s.mean, s.t_ci, s.n) if s.n else None,
        "median": s.median,
        "wins": s.wins,
        "losses": s.losses,
        "wtl": f"{s.wins}/{s.ties}/{s.losses}",
        "loo": s.loo,
        "n": s.n,
    }


def natural_complete(ctx: Context) -> dict:
    df = ctx.final("natural")
    rows = []
    for obj, d in per_objective(df):
        static = stats.pick(d, DIRR_METHOD, "static")
        dirr = stats.pick(d, DIRR_METHOD, "dirr")
        dirr_p = stats.paired(dirr, static)
        if static.is_empty() or not dirr_p.frame.height:
            continue
        dirr_gap = stats.mean_ci(dirr_p.diffs)  # DIR-R - Static-IV, the same for every baseline
        for c in _baselines_present(d):
            static_p = stats.paired(stats.pick(d, c, "static"), static)
            if static_p.frame.height:
                rows.append(
                    {
                        "objective": obj,
                        "baseline": c,
                        "static": stats.mean_ci(static_p.diffs),  # C - Static-IV
                        "dirr": dirr_gap,
                        # Eq. 22 from the method's side: C - full = (C - Static) - (DIR-R - Static)
                        "full": stats.composed_ci(static_p, dirr_p),
                    }
                )
    if not rows:
        raise Missing(
            "needs Static-IV, DIR-R and baseline runs under NPO or SimNPO on Natural-TOFU"
        )
    return {"rows": rows}


def natural_main(ctx: Context) -> dict:
    rows = ctx.built(natural_complete)["rows"]
    by = {}
    for r in rows:
        by.setdefault(r["baseline"], {})[r["objective"]] = r["full"]
    order = [m for m in BASELINES if m in by] + sorted(set(by) - set(BASELINES))
    objs = [o for o in ("npo", "simnpo") if any(r["objective"] == o for r in rows)]
    return {  # a column per objective that ran: none of N/A only
        "objectives": objs,
        "rows": [{"baseline": m, "gaps": [by[m].get(o) for o in objs]} for m in order],
    }


def _selected_baselines(
    ctx: Context, benchmark: str, objective: str, available: list[str]
) -> list[str]:
    dec = ctx.decisions
    if not dec.is_empty():
        d = dec.filter((pl.col("benchmark") == benchmark) & (pl.col("objective") == objective))
        if not d.is_empty():
            first = d.sort("frozen_at")["baselines"][0]
            first = first.to_list() if isinstance(first, pl.Series) else (first or [])
            chosen = [b for b in first if b in available]
            if chosen:
                return chosen
    return available


def lacuna_comparison(ctx: Context) -> dict:
    df = ctx.final("lacuna")
    rows = []
    for obj, d in per_objective(df):
        dirr = stats.pick(d, DIRR_METHOD, "dirr")
        if dirr.is_empty():
            continue
        for c in _selected_baselines(ctx, ctx.bench["lacuna"], obj, _baselines_present(d)):
            b = stats.pick(d, c, "static")
            p = stats.paired(b, dirr)
            if p.frame.is_empty():
                continue
            rows.append(
                {"objective": obj, "baseline": c, "ours": _j(dirr), "base": _j(b)}
                | _gap_row(p, ctx.tol)
            )
    if not rows:
        raise Missing("needs DIR-R and baseline runs under NPO or SimNPO on LACUNA")
    return {"rows": rows}


def _graddiff_panel(ctx: Context, d: pl.DataFrame) -> dict:
    dirr = stats.pick(d, DIRR_METHOD, "dirr")
    if dirr.is_empty():
        raise Missing("needs DIR-R GradDiff runs on LACUNA")
    rows = []
    for c in _baselines_present(d):
        b = stats.pick(d, c, "static")
        p = stats.paired(b, dirr)
        if len(p.diffs):
            rows.append({"baseline": c, "mean": _j(b)} | _gap_row(p, ctx.tol))
    rows.sort(key=lambda r: -r["mean"].value)
    return {"ours": _j(dirr), "rows": rows}


def lacuna_main(ctx: Context) -> dict:
    out = {"panel_a": None, "panel_b": None, "missing_a": None, "missing_b": None}
    try:
        out["panel_a"] = ctx.built(lacuna_comparison)["rows"]
    except Missing as m:
        out["missing_a"] = str(m)
    try:
        d = ctx.ok("lacuna").filter(
            (pl.col("objective") == "graddiff") & (pl.col("field") != "Birth_City")
        )
        out["panel_b"] = _graddiff_panel(
            ctx, _require(d, "no LACUNA GradDiff runs outside Birth City")
        )
    except Missing as m:
        out["missing_b"] = str(m)
    if out["panel_a"] is None and out["panel_b"] is None:
        raise Missing(f"{out['missing_a']}; {out['missing_b']}")
    return out


def _dirr_row(dirr: pl.DataFrame, static: pl.DataFrame, tol: float) -> dict | None:
    """DIR-R against Static-IV on matched units: ``dirr_metrics`` and the means it shows with
    their intervals (both arms' J, DIR-R - Static-IV, the available gain); None when no unit
    matches."""
    m = stats.dirr_metrics(dirr, static, tol)
    if not m.n:
        return None
    p = m.pairs.frame
    return {
        "m": m,
        "static": stats.mean_ci(p["J_b"].to_numpy()),
        "dirr": stats.mean_ci(p["J_a"].to_numpy()),
        "delta": stats.mean_ci(p["diff"].to_numpy()),
        "avail": stats.mean_ci(m.gains) if m.gains is not None else None,
        "trig": f"{m.triggered}/{m.n}",
    }


def static_dirr_ablation(ctx: Context) -> dict:
    rows = []
    for key, label in (("natural", "Natural-TOFU"), ("lacuna", "LACUNA")):
        df = ctx.ok(key)
        for obj in ("npo", "simnpo", "graddiff"):
            d = df.filter(pl.col("objective") == obj)
            r = _dirr_row(
                stats.pick(d, DIRR_METHOD, "dirr"), stats.pick(d, DIRR_METHOD, "static"), ctx.tol
            )
            if r:
                setting = OBJECTIVE_NAMES[obj] + (
                    ", four-field" if key == "lacuna" and obj == "graddiff" else ""
                )
                rows.append({"benchmark": label, "setting": setting} | r)
    if not rows:
        raise Missing("needs paired DIR-R and Static-IV runs on Natural-TOFU or LACUNA")
    return {"rows": rows}


def lacuna_selection_comparison(ctx: Context) -> dict:
    df = ctx.final("lacuna")
    st = df.filter(pl.col("variant") == "static")  # ctx.ok is already deduplicated
    objs = [o for o in ("npo", "simnpo") if o in set(st["objective"].to_list())]
    if not objs or not _baselines_present(st.filter(pl.col("objective").is_in(objs))):
        raise Missing("needs static baseline runs under NPO or SimNPO on LACUNA")
    rows, ns = [], set()
    for c in _baselines_present(st):
        means = []
        for obj in objs:  # a column per objective that ran: none of N/A only
            runs = st.filter((pl.col("method") == c) & (pl.col("objective") == obj))
            means.append(_j(runs))
            if runs.height:
                ns.add(runs.height)
        rows.append({"baseline": c, "means": means})
    return {"objectives": objs, "rows": rows, "n": "/".join(str(n) for n in sorted(ns))}


def _graddiff(ctx: Context, split: str = "final") -> pl.DataFrame:
    return _require(
        ctx.ok("lacuna", split).filter(pl.col("objective") == "graddiff"),
        f"no LACUNA GradDiff runs in the {split} split",
    )


def graddiff_primary(ctx: Context) -> dict:
    d = _graddiff(ctx)
    dirr = _require(stats.pick(d, DIRR_METHOD, "dirr"), "needs DIR-R GradDiff runs on LACUNA")
    rows = []
    for c in [*_baselines_present(d), DIRR_METHOD]:
        b = stats.pick(d, c, "static")
        p = stats.paired(b, dirr)
        if len(p.diffs):
            rows.append({"method": c, "mean": _j(b), "dirr": False} | _gap_row(p, ctx.tol))
    rows.append(
        {"method": "DIR-R", "mean": _j(dirr), "gap": None, "median": None, "wtl": "N/A"}
        | {"dirr": True}
    )
    rows.sort(key=lambda r: -r["mean"].value)
    return {"rows": rows}


def graddiff_fieldgap(ctx: Context) -> dict:
    d = _graddiff(ctx)
    dirr = _require(stats.pick(d, DIRR_METHOD, "dirr"), "needs DIR-R GradDiff runs on LACUNA")
    fields = sorted(d["field"].unique().to_list(), key=lambda f: FIELD_NAMES.get(f, f))
    rows = []
    for c in _baselines_present(d):
        p = stats.paired(stats.pick(d, c, "static"), dirr).frame
        gaps = [stats.mean_ci(p.filter(pl.col("field") == f)["diff"].to_numpy()) for f in fields]
        rows.append({"baseline": c, "gaps": gaps})
    return {"fields": fields, "rows": rows}


def graddiff_dirr_field(ctx: Context) -> dict:
    d = _graddiff(ctx)
    static, dirr = stats.pick(d, DIRR_METHOD, "static"), stats.pick(d, DIRR_METHOD, "dirr")
    rows = []
    for f in sorted(d["field"].unique().to_list(), key=lambda f: FIELD_NAMES.get(f, f)):
        r = _dirr_row(dirr.filter(pl.col("field") == f), static.filter(pl.col("field") == f), 0.0)
        if r:
            rows.append({"field": f} | r)
    overall = _dirr_row(dirr, static, 0.0)
    if overall is None:
        raise Missing("needs paired DIR-R and Static-IV GradDiff runs on LACUNA")
    return {"rows": rows, "overall": overall}


def graddiff_calibration(ctx: Context) -> dict:
    import json

    dec = ctx.decisions
    if dec.is_empty():
        raise Missing("no frozen DIR-R decision in the registry")
    d = dec.filter(
        (pl.col("benchmark") == ctx.bench["lacuna"]) & (pl.col("objective") == "graddiff")
    )
    if d.is_empty():
        raise Missing("no frozen LACUNA GradDiff decision in the registry")
    content = json.loads(d.sort("frozen_at")["content"][0])
    cal = content.get("calibration")
    if not cal:
        raise Missing("the frozen decision carries no calibration summary")
    return {
        "tau": content["tau"],
        "cal": cal,
        "fraction": cal["captured_gain"] / cal["total_gain"] if cal["total_gain"] > 0 else None,
    }


def graddiff_replication(ctx: Context) -> dict:
    rows = []
    for split, label in (("final", "Original three-field"), ("replication", "Replication")):
        try:
            d = _graddiff(ctx, split).filter(pl.col("field") != "Birth_City")
        except Missing:
            continue
        static, dirr = stats.pick(d, DIRR_METHOD, "static"), stats.pick(d, DIRR_METHOD, "dirr")
        proj = stats.pick(d, "projected_causal", "static")
        r = _dirr_row(dirr, static, ctx.tol)
        p = stats.paired(proj, dirr)  # Projected Causal - DIR-R
        if r is None or not len(p.diffs):
            continue
        g = _gap_row(p, ctx.tol)
        rows.append(
            {
                "setting": label,
                "seeds": "/".join(str(x) for x in sorted(d["seed"].unique().to_list())),
                "static": _j(static),
                "dirr": _j(dirr),
                "dirr_gap": r["delta"],
                "proj": _j(proj),
                "proj_gap": g["gap"],
                "median": g["median"],
                "wtl": g["wtl"],
                "trig": r["trig"],
            }
        )
    if not rows:
        raise Missing(
            "needs LACUNA GradDiff DIR-R, Static-IV and Projected Causal runs (final or "
            "replication)"
        )
    return {"rows": rows}


def lacuna_modern(ctx: Context) -> dict:
    df = ctx.final("lacuna")
    d = df.filter(pl.col("objective").is_in(["npo", "simnpo"]))
    static = _require(
        stats.pick(d, DIRR_METHOD, "static"), "needs Static-IV runs under NPO/SimNPO on LACUNA"
    )
    rows = []
    for c in MODERN:
        b = stats.pick(d, c, "static")
        p = stats.paired(b, static)  # C - Static-IV
        if p.frame.is_empty():
            continue
        g = _gap_row(p, ctx.tol)
        sw = stats.setting_wins(p)
        rows.append(
            {
                "baseline": c,
                "base": _j(b),
                "gap": g["gap"],
                "wins": f"{g['wins']}/{g['n']}",
                "settings": f"{sw['wins']}/{sw['n']}",
                "ci": sw["ci"],
            }
        )
    if not rows:
        raise Missing(
            "needs modern baselines (FILA, AP-MLP, GRAIL, Activation-Down, Projected Causal) on "
            "LACUNA"
        )
    return {"rows": rows}


def lacuna_dirr(ctx: Context) -> dict:
    rows = []
    for obj, split, label in (
        ("npo", "final", "NPO"),
        ("simnpo", "final", "SimNPO"),
        ("graddiff", "final", "GradDiff, four-field"),
        ("graddiff", "replication", "GradDiff, three-field replication"),
    ):
        d = ctx.ok("lacuna", split).filter(pl.col("objective") == obj)
        if split == "replication":
            d = d.filter(pl.col("field") != "Birth_City")
        r = _dirr_row(stats.pick(d, DIRR_METHOD, "dirr"), stats.pick(d, DIRR_METHOD, "static"), 0.0)
        if r:
            rows.append({"setting": label} | r)
    if not rows:
        raise Missing("needs paired DIR-R and Static-IV runs on LACUNA")
    return {"rows": rows}


LEGACY_COVARIATES = (
    "nuisance_tokens",
)  # older records: the answer length, 2 tokens for every target


def controlled_builds(ctx: Context) -> list[int]:
    """The theta_0 builds the controlled runs cover (each its own construction and frozen
    decision)."""
    df = _require(
        ctx.ok("controlled").filter(pl.col("method").is_in(["backbone", "lora"])),
        f"no runs of benchmark '{ctx.bench['controlled']}' (interfaces 'backbone' and 'lora')",
    )
    return sorted(df["build"].unique().to_list())


def _controlled_targets(ctx: Context, build: int) -> tuple[pl.DataFrame, list[str], list[str]]:
    """One row per target (field) of one theta_0 build with both interfaces' J, the target's
    components, the nuisance covariates' names and the locators' component names
    (``locator:<name>``)."""
    df = _require(
        ctx.ok("controlled").filter(
            pl.col("method").is_in(["backbone", "lora"]) & (pl.col("build") == build)
        ),
        f"no runs of benchmark '{ctx.bench['controlled']}' (interfaces 'backbone' and 'lora') in "
        f"build {build}",
    )
    comps = (
        ctx.components.pivot(on="name", index="run_key", values="value")
        if not ctx.components.is_empty()
        else pl.DataFrame({"run_key": []})
    )
    need = ("storage_score", "injected_backbone")
    if any(c not in comps.columns for c in need):
        raise Missing("controlled runs need components 'storage_score' and 'injected_backbone'")
    d = df.join(comps, on="run_key", how="inner")
    nuis = sorted(c for c in d.columns if c.startswith("nuisance_") and c not in LEGACY_COVARIATES)
    locs = sorted(c for c in d.columns if c.startswith("locator:"))
    extra = []
    if "J_bounded" in d.columns:
        extra = [
            pl.col("J_bounded").filter(pl.col("method") == w).mean().alias(f"Jb_{w}")
            for w in ("backbone", "lora")
        ]
    if "recall" in d.columns:
        extra.append(pl.col("recall").first())
    if not ctx.run_decisions.is_empty():
        d = d.join(ctx.run_decisions, on="run_key", how="left")
        extra.append(pl.col("decision").unique().sort().alias("decisions"))
    per = (
        d.group_by("field")
        .agg(
            pl.col("J").filter(pl.col("method") == "backbone").mean().alias("J_backbone"),
            pl.col("J").filter(pl.col("method") == "lora").mean().alias("J_lora"),
            *extra,
            pl.col("storage_score").first(),
            pl.col("injected_backbone").first(),
            (pl.col("pair").first() if "pair" in d.columns else pl.lit(None)).alias("pair"),
            *[pl.col(c).first() for c in nuis + locs],
        )
        .drop_nulls(["J_backbone", "J_lora"])
        .sort("field")
    )
    if per.height < 2:
        raise Missing("every controlled target needs a run through both interfaces")
    return per, nuis, locs


def _pair(per: pl.DataFrame):
    return per["pair"].to_numpy() if per["pair"].dtype != pl.Null else None


def _controlled_decision(ctx: Context, per: pl.DataFrame) -> ControlledDecision | None:
    """The frozen controlled decision the runs follow (``benchmark.decision``); None when they name
    none. Runs that follow different decisions cannot share a table."""
    if "decisions" not in per.columns:
        return None
    hashes = sorted({h for hs in per["decisions"].to_list() for h in (hs or []) if h is not None})
    if not hashes:
        return None
    if len(hashes) > 1:
        raise Missing(
            f"the controlled runs follow {len(hashes)} different frozen decisions "
            f"({', '.join(h[:12] for h in hashes)}): run one experiment per decision"
        )
    dec = decision_by_hash(ctx, hashes[0])
    if dec is None:
        raise Missing(
            f"the controlled runs follow decision {hashes[0][:12]}, which is not in the registry "
            "(ingest the results directory's decisions/)"
        )
    return dec


def decision_by_hash(ctx: Context, hash_: str | None) -> ControlledDecision | None:
    """The frozen controlled decision with this hash as the registry holds it, verified
    (``ControlledDecision.from_dict``); None when there is no hash or the registry lacks it."""
    import json

    if hash_ is None or ctx.decisions.is_empty():
        return None
    row = ctx.decisions.filter(pl.col("hash") == hash_)
    if row.is_empty():
        return None
    return ControlledDecision.from_dict(json.loads(row["content"][0]), f"decision {hash_[:12]}")


def _learned(
    ctx: Context, build: int
) -> tuple[pl.DataFrame, list[str], list[str], ControlledDecision | None, dict]:
    """The targets of one build Table 1 reads: theta_0 recall >= the frozen threshold
    (docs/benchmarks.md); the others are reported, never silently dropped."""
    per, nuis, locs = _controlled_targets(ctx, build)
    dec = _controlled_decision(ctx, per)
    thr = float(dec.recall_threshold) if dec else RECALL_THRESHOLD
    excluded = (
        per.filter(pl.col("recall") < thr)["field"].to_list() if "recall" in per.columns else []
    )
    kept = per.filter(~pl.col("field").is_in(excluded))
    if kept.height < 2:
        raise Missing(
            f"fewer than 2 controlled targets were learned (theta_0 recall >= {thr}); excluded: "
            f"{', '.join(excluded)}"
        )
    # the residualization's covariates: only those that do not encode the label
    # (experiments.controlled_decision)
    cov = covariate_aurocs(
        {c: kept[c].to_numpy() for c in nuis}, kept["injected_backbone"].to_numpy()
    )
    return (
        kept,
        nuis,
        locs,
        dec,
        {
            "excluded": excluded,
            "n_excluded": len(excluded),
            "n_targets": per.height,
            "recall_threshold": thr,
            "every": per,
            "covariates": cov,
            "residualized_on": residualization_covariates(cov),
            "covariate_band": COVARIATE_BAND,
        },
    )


def controlled_main(ctx: Context) -> dict:
    """Table 1 over every theta_0 build: the quantities of ``controlled_build`` on the learned
    targets of all builds pooled (each build's targets scored by its own frozen primary locator),
    and per build (``per_build``)."""
    builds = controlled_builds(ctx)
    per_build = [{"build": b, **ctx.built_for(controlled_build, b)} for b in builds]
    if len(per_build) == 1:
        return {**per_build[0], "per_build": per_build, "pooled": False}
    units = controlled_units(ctx)
    learned = units.filter(pl.col("learned"))
    if learned.height < 2:
        raise Missing("fewer than 2 controlled targets were learned over all builds")
    q = controlled_quantities(
        learned["score"].to_numpy(),
        learned["injected_backbone"].to_numpy(),
        learned["J_backbone"].to_numpy(),
        learned["J_lora"].to_numpy(),
    )
    bounded = None
    if learned["Jb_backbone"].null_count() == 0:
        bq = controlled_quantities(
            learned["score"].to_numpy(),
            learned["injected_backbone"].to_numpy(),
            learned["Jb_backbone"].to_numpy(),
            learned["Jb_lora"].to_numpy(),
        )
        bounded = {k: bq[k] for k in ("lora_wins", "agree", "agree_pct", "diff", "diff_ci", "corr")}
        bounded.update(_diff_over_builds(learned, "Jb_lora", "Jb_backbone"))
    q.update(_diff_over_builds(learned, "J_lora", "J_backbone"))
    excluded = [
        f"b{r['build']}:{r['field']}"
        for r in units.filter(~pl.col("learned")).iter_rows(named=True)
    ]
    first = per_build[0]
    return {
        **q,
        "bounded": bounded,
        "per_build": per_build,
        "pooled": True,
        "auroc_all": stats.auroc(
            units["score"].to_numpy(), units["injected_backbone"].to_numpy().round().astype(int)
        ),
        "resid_auroc": None,
        "residualized_on": [],
        "covariate_band": COVARIATE_BAND,
        "direction": f"{sum(int(b['direction'].split('/')[0]) for b in per_build)}/"
        f"{sum(int(b['direction'].split('/')[1]) for b in per_build)}",
        "gates": [
            g
            for b in per_build
            for g in [{**g, "gate": f"build {b['build']}: {g['gate']}"} for g in b.get("gates", [])]
        ],
        "excluded": excluded,
        "n_excluded": len(excluded),
        "n_targets": units.height,
        "recall_threshold": first["recall_threshold"],
        "primary_locator": ", ".join(f"b{b['build']} {b['primary_locator']}" for b in per_build),
        "decision": ", ".join((b["decision"] or "none")[:12] for b in per_build),
        "lr": None,
        "calibration_aurocs": None,
    }


def _diff_over_builds(learned: pl.DataFrame, lora: str, backbone: str) -> dict:
    """The pooled paired difference J(lora) - J(backbone) as the mean of the builds' means with the
    interval over builds (``stats.mean_over_builds``): targets of one build share a theta_0, so
    pooling them as independent would make the interval too narrow (issue 32)."""
    got = stats.mean_over_builds(
        (learned[lora] - learned[backbone]).to_numpy(), learned["build"].to_numpy()
    )
    return {"diff": got[0], "diff_ci": got[1]} if got else {"diff_ci": None}


def controlled_units(ctx: Context) -> pl.DataFrame:
    """One row per (build, final target): the frozen primary locator's signed score (> 0: backbone),
    the label, both interfaces' J and bounded J, theta_0 recall and whether the target counts as
    learned -- what the controlled claim's verdict resamples (``reports.verdicts``)."""
    frames = []
    for b in controlled_builds(ctx):
        per, _, _, dec, learned = _learned(ctx, b)
        every = learned["every"]
        primary = dec.primary_locator if dec else None
        col = (
            f"locator:{primary}"
            if primary and f"locator:{primary}" in every.columns
            else "storage_score"
        )
        jb = ["Jb_backbone", "Jb_lora"] if "Jb_backbone" in every.columns else []
        frames.append(
            every.select(
                pl.lit(b, dtype=pl.Int64).alias("build"),
                "field",
                pl.col(col).alias("score"),
                "injected_backbone",
                "J_backbone",
                "J_lora",
                *(
                    jb
                    or [pl.lit(None, dtype=pl.Float64).alias(c) for c in ("Jb_backbone", "Jb_lora")]
                ),
                (pl.col("recall") if "recall" in every.columns else pl.lit(1.0)).alias("recall"),
                pl.col("pair")
                if every["pair"].dtype != pl.Null
                else pl.lit(None, dtype=pl.String).alias("pair"),
            ).with_columns((~pl.col("field").is_in(learned["excluded"])).alias("learned"))
        )
    return pl.concat(frames, how="diagonal_relaxed")


def controlled_build(ctx: Context, build: int) -> dict:
    """Controlled separation (§5.2, Table 1) of one theta_0 build from run records: per target
    (field) two runs, one per interface (methods 'backbone' and 'lora'), each carrying the target's
    components ``locator:<name>`` / ``storage_score`` (signed scores, > 0 = storage localizes the
    target in the backbone), ``injected_backbone`` (1 when the backbone injected it), ``pair`` (its
    blind pair), ``recall`` (theta_0's), ``J_bounded`` and ``nuisance_*`` covariates (the constant
    answer length ``nuisance_tokens`` of older records is left out). The score is the frozen primary
    locator's (the controlled decision the runs name; ``storage_score`` when they name none); only
    learned targets count (``_learned``). ``controlled_quantities`` computes the seven quantities,
    from the bounded J (primary) and from the summed-NLL J."""
    per, nuis, _, dec, learned = _learned(ctx, build)
    primary = dec.primary_locator if dec else None
    col = (
        f"locator:{primary}" if primary and f"locator:{primary}" in per.columns else "storage_score"
    )
    every = learned.pop(
        "every"
    )  # the primary's AUROC on every final target, not-learned ones included
    learned["auroc_all"] = stats.auroc(
        every[col].to_numpy(), every["injected_backbone"].to_numpy().round().astype(int)
    )
    if (
        "recall" in every.columns
    ):  # the construction's validity gates, from theta_0 and the labels only
        recall = {
            w: every.filter((pl.col("injected_backbone") > 0.5) == (w == "backbone"))[
                "recall"
            ].to_list()
            for w in ("backbone", "lora")
        }
        learned["gates"] = construction_gates(
            recall, learned["auroc_all"], learned["recall_threshold"]
        )
    used = learned["residualized_on"]
    X = per.select(used).to_numpy() if used else np.zeros((per.height, 0))
    args = (per[col].to_numpy(), per["injected_backbone"].to_numpy())
    q = controlled_quantities(
        *args, per["J_backbone"].to_numpy(), per["J_lora"].to_numpy(), _pair(per), X
    )
    bounded = None
    if "Jb_backbone" in per.columns and per["Jb_backbone"].null_count() == 0:
        bq = controlled_quantities(
            *args, per["Jb_backbone"].to_numpy(), per["Jb_lora"].to_numpy(), _pair(per), X
        )
        bounded = {k: bq[k] for k in ("lora_wins", "agree", "agree_pct", "diff", "diff_ci", "corr")}
    return {
        **q,
        **learned,
        "bounded": bounded,
        "primary_locator": primary or "storage_score",
        "decision": dec.hash if dec else None,
        "lr": dec.lr if dec else None,
        "calibration_aurocs": dec.locator_aurocs if dec else None,
    }


def controlled_locators(ctx: Context) -> dict:
    """``locators_of`` every theta_0 build (each its own construction and frozen decision)."""
    builds = [{"build": b, **locators_of(ctx, b)} for b in controlled_builds(ctx)]
    return {**builds[0], "per_build": builds}


def locators_of(ctx: Context, build: int) -> dict:
    """Every locator recorded with one build's controlled runs (components ``locator:<name>``) on
    the learned targets: AUROC, residualized AUROC and within-pair direction
    (``locator_quantities``, the same definitions as Table 1's first three rows), each nuisance
    covariate's own AUROC for the label (``covariate_aurocs``), and each locator's calibration AUROC
    from the frozen decision (which chose the primary)."""
    per, nuis, locs, dec, learned = _learned(ctx, build)
    every = learned["every"]
    y = per["injected_backbone"].to_numpy()
    used = learned["residualized_on"]
    X = per.select(used).to_numpy() if used else np.zeros((per.height, 0))
    scores = {c[len("locator:") :]: per[c].to_numpy() for c in locs}
    if not scores:
        raise Missing("the controlled runs carry no locator:<name> components")
    cal = (dec.locator_aurocs if dec is not None else None) or {}
    return {
        "locators": locator_quantities(scores, y, _pair(per), X),
        "covariates": learned["covariates"],
        "residualized_on": used,
        "covariate_band": COVARIATE_BAND,
        "calibration": {name: cal.get(name) for name in sorted(scores)},
        "every_target": {
            name: stats.auroc(
                every[f"locator:{name}"].to_numpy(),
                every["injected_backbone"].to_numpy().round().astype(int),
            )
            for name in sorted(scores)
        },
        "primary": dec.primary_locator if dec else None,
    }


@dataclass(frozen=True)
class TableDef:
    label: str
    caption: str
    builder: Callable[[Context], dict]
    benchmarks: tuple[str, ...] = (
        "lacuna",
    )  # keys of BENCH the table reads (its caption names their theta_0)
    dirr: bool = False  # reads DIR-R runs (its caption marks evaluation-selected ones)
    reference: str | None = None  # what its gaps are measured against (method - reference)
    means: bool = True  # prints means (its caption says what their intervals are)


TABLES: dict[str, TableDef] = {
    t.label: t
    for t in [
        TableDef(
            "tab:controlled-main",
            "Controlled separation between localization and intervention.",
            controlled_main,
            ("controlled",),
            reference="the backbone interface (LoRA$-$backbone)",
            means=False,  # its one mean carries its own interval over builds
        ),
        TableDef(
            "tab:app-controlled-locators",
            "Controlled separation: every registered storage locator on the "
            "calibration targets (which chose the primary locator before any final run), on every "
            "final target and on the learned final targets (label: injected through the backbone).",
            controlled_locators,
            ("controlled",),
            means=False,
        ),
        TableDef(
            "tab:natural-main",
            "Natural-TOFU margins ($\\Delta J$) of each baseline against the full method.",
            natural_main,
            ("natural",),
            dirr=True,
            reference="the full method (Intervention Score + DIR-R)",
        ),
        TableDef(
            "tab:lacuna-main",
            "LACUNA results. Panel A gives NPO/SimNPO comparisons; Panel B the GradDiff "
            "three-field sensitivity (Birth City excluded).",
            lacuna_main,
            dirr=True,
            reference="Intervention Score + DIR-R",
        ),
        TableDef(
            "tab:static-dirr-ablation",
            "Selective revision relative to \\textsc{Static-IV}.",
            static_dirr_ablation,
            ("natural", "lacuna"),
            dirr=True,
            reference="\\textsc{Static-IV}",
        ),
        TableDef(
            "tab:app-natural-complete",
            "Natural-TOFU audited calculation of the Intervention Score + DIR-R margin "
            "(Eq.~22). Totals are computed from unrounded values; displayed components are "
            "rounded.",
            natural_complete,
            ("natural",),
            dirr=True,
            reference="\\textsc{Static-IV} in the first two gap columns, the full method "
            "(Intervention Score + DIR-R) in the last",
        ),
        TableDef(
            "tab:app-lacuna-selection-comparison",
            "LACUNA NPO/SimNPO parameter-selection comparison.",
            lacuna_selection_comparison,
        ),
        TableDef(
            "tab:app-graddiff-primary",
            "GradDiff four-field primary result.",
            graddiff_primary,
            dirr=True,
            reference="DIR-R",
        ),
        TableDef(
            "tab:app-graddiff-fieldgap",
            "GradDiff field-level gaps of each baseline against DIR-R.",
            graddiff_fieldgap,
            dirr=True,
            reference="DIR-R",
        ),
        TableDef(
            "tab:app-graddiff-dirr-field",
            "GradDiff primary four-field \\textsc{DIR-R} decomposition.",
            graddiff_dirr_field,
            dirr=True,
            reference="\\textsc{Static-IV}",
        ),
        TableDef(
            "tab:app-graddiff-calibration",
            "GradDiff primary calibration summary.",
            graddiff_calibration,
            means=False,
        ),
        TableDef(
            "tab:app-graddiff-replication",
            "GradDiff three-field sensitivity and replication.",
            graddiff_replication,
            dirr=True,
            reference="\\textsc{Static-IV} for DIR-R, DIR-R for Projected Causal",
        ),
        TableDef(
            "tab:app-lacuna-modern",
            "LACUNA analysis for modern parameter-selection methods.",
            lacuna_modern,
            reference="\\textsc{Static-IV}",
        ),
        TableDef(
            "tab:app-lacuna-comparison",
            "LACUNA comparison of Intervention Score + DIR-R with the selected baselines.",
            lacuna_comparison,
            dirr=True,
            reference="Intervention Score + DIR-R",
        ),
        TableDef(
            "tab:app-lacuna-dirr",
            "LACUNA DIR-R versus the fixed-subset \\textsc{Static-IV} continuation.",
            lacuna_dirr,
            dirr=True,
            reference="\\textsc{Static-IV}",
        ),
    ]
}


# the paper prints reference - method; every table here prints method - reference (issue 36)
def sign_note(t: TableDef) -> str:
    """What a table's gaps and means are: the sign and its reference, the intervals."""
    note = ""
    if t.reference:
        note += (
            f" $\\Delta J=J(\\text{{method}})-J(\\text{{reference}})$, reference: {t.reference}; "
            "positive = better than the reference (the paper prints reference$-$method)."
        )
    if t.means:
        note += (
            " Each mean: value and 95\\% $t$ interval over its units (a composed margin: "
            "paired where both gaps cover the same units, else Welch's), or its $n$ below two "
            "units."
        )
    return note


def file_name(label: str) -> str:
    return label.replace(":", "-") + ".tex"


def render(label: str, ctx: Context, env: Environment | None = None) -> tuple[str, str | None]:
    """(LaTeX text, missing reason or None) for one table."""
    env = env or environment()
    t = TABLES[label]
    try:
        data = ctx.built(t.builder)
        tmpl = env.from_string(template_text(file_name(label) + ".j2"))
        note = evaluation_note(ctx, t.benchmarks) if t.dirr else ""
        caption = t.caption + note + sign_note(t) + theta0_note(ctx, t.benchmarks)
        return tmpl.render(label=label, caption=caption, **data), None
    except Missing as m:
        tmpl = env.from_string(template_text("missing.tex.j2"))
        return tmpl.render(label=label, caption=t.caption, reason=str(m)), str(m)


def evaluation_note(ctx: Context, benchmarks: tuple[str, ...]) -> str:
    """A DIR-R table's mark when some of its DIR-R runs selected their candidate on the evaluation
    split (over a candidate set holding rho = 0 such a run cannot lose to Static-IV): how many, and
    the dagger that marks its rows (``m.evaluation_selected``)."""
    names = [ctx.bench[b] for b in benchmarks]
    d = ctx.results.filter(
        pl.col("benchmark").is_in(names)
        & (pl.col("variant") == "dirr")
        & (pl.col("split") != "calibration")
        & (pl.col("status") == "ok")
    )
    n = int((d["selection"] == "evaluation").sum()) if d.height else 0
    return (
        f" $^\\dagger$ {n} of {d.height} DIR-R runs selected their candidate on the evaluation "
        "split, where DIR-R cannot lose to \\textsc{Static-IV}; their gains are not evidence."
        if n
        else ""
    )


def theta0_note(ctx: Context, benchmarks: tuple[str, ...]) -> str:
    """`` theta_0: <hash>`` for the benchmarks a table reads: which prepared model produced its
    numbers."""
    parts = []
    for b in benchmarks:
        hashes = ctx.theta0.get(ctx.bench[b], [])
        if hashes:
            name = tex(ctx.bench[b]) if len(benchmarks) > 1 else ""
            parts.append(
                (name + " " if name else "") + ", ".join(f"\\texttt{{{h[:12]}}}" for h in hashes)
            )
    return f" $\\theta_0$: {'; '.join(parts)}." if parts else ""


def render_all(ctx: Context, out: str | Path) -> dict[str, str | None]:
    """Write every table; returns label -> missing reason (None when rendered)."""
    from supportbench._io import write_text_atomic

    out = Path(out)
    env = environment()
    status = {}
    for label in TABLES:
        text, missing = render(label, ctx, env)
        write_text_atomic(out / file_name(label), text)
        status[label] = missing
    return status
