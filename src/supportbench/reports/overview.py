"""Per-method tables for whatever an experiment holds: its own methods, objectives and benchmarks,
not only the paper's (issue 23). The paper's tables (``tables.py``) answer the paper's questions and
need the paper's methods; these describe the user's sweep, one row per method present.

An *arm* is a method run as a variant: ``wagle`` (static) or ``intervention_score:dirr``. Every arm
is compared with one *reference* arm on matched units (``stats.paired``: same experiment, benchmark,
field, objective, seed). One sign convention in every table and figure of a report (issue 36):

    ΔJ = mean over matched units of J(arm) − J(reference)
         (method − reference: positive = better than the reference)
    its 95% t interval, median paired ΔJ, the arm's W/T/L against the reference (tie: |d| <= tol)

Every mean J comes with its 95% t interval over the arm's runs and their SD.

The reference is ``--reference ARM`` when given; otherwise Intervention Score (static) when the
experiment ran it; otherwise the first static arm in alphabetical order of registered names (the
first arm when none is static). The rule that chose it is printed with the tables. One table per
benchmark and split (final first), rows grouped by objective; one more table for DIR-R whenever a
method was run with the ``dirr`` variant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from supportbench.errors import ReportError
from supportbench.reports import stats
from supportbench.reports.latex import OBJECTIVE_NAMES, environment, template_text, tex
from supportbench.reports.names import arm_display
from supportbench.reports.tables import Context

DEFAULT_REFERENCE = "intervention_score"
OBJECTIVE_ORDER = ("npo", "simnpo", "graddiff", "ga")


def arm_key(method: str, variant: str) -> str:
    return method if variant == "static" else f"{method}:{variant}"


def split_arm(key: str) -> tuple[str, str]:
    method, _, variant = key.partition(":")
    return method, variant or "static"


def arm_name(key: str) -> str:
    return arm_display(*split_arm(key))


def present_arms(df: pl.DataFrame) -> list[str]:
    """Arm keys of a frame's ok runs, static arms first, each part in alphabetical order."""
    if df.is_empty():
        return []
    ok = df.filter(pl.col("status") == "ok") if "status" in df.columns else df
    keys = {arm_key(m, v) for m, v in ok.select("method", "variant").unique().iter_rows()}
    return sorted(keys, key=lambda k: (":" in k, k))


@dataclass(frozen=True)
class Reference:
    key: str | None  # None: the experiment has no ok runs
    rule: str  # how it was chosen, said with the tables

    @property
    def name(self) -> str:
        return arm_name(self.key) if self.key else "none"


def choose_reference(results: pl.DataFrame, requested: str | None = None) -> Reference:
    """The reference arm (module docstring); an unknown ``requested`` arm is an error naming the
    arms present."""
    arms = present_arms(results)
    if requested is not None:
        if requested not in arms:
            listed = (
                ", ".join(f"{a} ({arm_name(a)})" for a in arms)
                or "none (the experiment has no ok runs)"
            )
            raise ReportError(
                f"--reference '{requested}' names no method of this experiment's ok runs; it takes "
                f"one of: {listed}"
            )
        return Reference(requested, f"{arm_name(requested)}, chosen with --reference")
    if not arms:
        return Reference(None, "none: the experiment has no ok runs with J")
    if DEFAULT_REFERENCE in arms:
        return Reference(
            DEFAULT_REFERENCE, f"{arm_name(DEFAULT_REFERENCE)}, the paper's method (the default)"
        )
    first = arms[0]
    return Reference(
        first,
        f"{arm_name(first)}: Intervention Score is not among this experiment's runs, so the "
        "reference is the first method in alphabetical order of registered names (static runs "
        "first); choose another with --reference",
    )


def reference_of(ctx: Context) -> Reference:
    """The report's reference for ``ctx`` (``ctx.reference`` is the requested arm or None), computed
    once."""
    return ctx.built(_reference_builder)["reference"]


def _reference_builder(ctx: Context) -> dict:
    return {"reference": choose_reference(ctx.results, ctx.reference)}


def objectives(df: pl.DataFrame) -> list[str]:
    """The objectives present, in the paper's order, then any other by name."""
    present = set(df["objective"].unique().to_list())
    return [o for o in OBJECTIVE_ORDER if o in present] + sorted(present - set(OBJECTIVE_ORDER))


def slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", s)


def splits(df: pl.DataFrame) -> list[str]:
    """The splits present, final first."""
    return sorted(
        set(df["split"].unique().to_list()) if not df.is_empty() else set(),
        key=lambda s: (s != "final", s),
    )


@dataclass
class MethodTable:
    label: str
    caption: str
    kind: str  # "methods" or "dirr"
    rows: list[dict]
    missing: str | None = None  # why the table has no rows
    benchmark: str | None = None  # as the registry names it (kind "methods")
    split: str | None = None
    paired: bool = True  # False: the reference never ran here, the table has no ΔJ columns


NO_REFERENCE = "no reference runs"


def has_reference(rows: list[dict]) -> bool:
    """Whether any of these per-method rows was compared with the reference (its table or
    leaderboard shows ΔJ columns only then)."""
    return any(r["note"] != NO_REFERENCE for r in rows)


def _methods_caption(where: str, reference: str, paired: bool) -> str:
    """A per-method table's caption (LaTeX); without ΔJ where the reference never ran there."""
    head = (
        f"Every method of this experiment on {where}: mean $J$ over its runs with its 95\\% $t$ "
        "interval, SD and median"
    )
    if not paired:
        return f"{head}; the reference ({reference}) has no run here, so no paired $\\Delta J$."
    return (
        f"{head}, and on matched units $\\Delta J$ = method$-$reference (reference: {reference}; "
        "positive = better than the reference) with its 95\\% $t$ interval, its median and the "
        "method's W/T/L against the reference."
    )


def _arm_rows(d: pl.DataFrame, ref: Reference, tol: float) -> list[dict]:
    rm, rv = split_arm(ref.key) if ref.key else (None, None)
    ref_runs = stats.pick(d, rm, rv) if ref.key else d.clear()
    arms = present_arms(d)
    arms = ([ref.key] if ref.key in arms else []) + [a for a in arms if a != ref.key]
    rows = []
    for a in arms:
        runs = stats.pick(d, *split_arm(a))
        row = {
            "arm": a,
            "name": arm_name(a),
            "n": runs.height,
            "mean": float(runs["J"].mean()),
            "ci": stats.t_interval(runs["J"].to_numpy()),  # 95% t interval of the mean J
            "sd": runs["J"].std(),  # None below two runs
            "median": float(runs["J"].median()),
            "is_ref": a == ref.key,
            "delta": None,  # method − reference on matched units
            "delta_ci": None,
            "median_delta": None,
            "wtl": None,
            "note": None,
            "evaluation": _evaluation_selected(runs),
        }
        if a == ref.key:
            row["note"] = "reference"
        elif ref_runs.is_empty():
            row["note"] = NO_REFERENCE
        else:
            s = stats.summarize(stats.paired(runs, ref_runs).diffs, tol)
            if s.n:
                row.update(
                    delta=s.mean,
                    delta_ci=s.t_ci,
                    median_delta=s.median,
                    wtl=f"{s.wins}/{s.ties}/{s.losses}",
                )
            else:
                row["note"] = "no matched units"
        rows.append(row)
    return rows


def _evaluation_selected(runs: pl.DataFrame) -> int:
    """DIR-R runs that selected their candidate on the evaluation split (they cannot lose to
    Static-IV)."""
    if "selection" not in runs.columns or runs.is_empty():
        return 0
    return int(((runs["variant"] == "dirr") & (runs["selection"] == "evaluation")).sum())


EVALUATION_NOTE = (
    " $^\\dagger$ Rows with DIR-R runs that selected their candidate on the evaluation split ({k} "
    "of {n} DIR-R runs), where DIR-R cannot lose to \\textsc{{Static-IV}}: their gains are not "
    "evidence."
)


def evaluation_caption(rows: list[dict], d: pl.DataFrame) -> str:
    """The caption's mark for the daggered rows, when any."""
    k = sum(r.get("evaluation", 0) for r in rows)
    n = int((d["variant"] == "dirr").sum()) if "variant" in d.columns else 0
    return EVALUATION_NOTE.format(k=k, n=n) if k else ""


def method_tables(ctx: Context) -> list[MethodTable]:
    """One table per benchmark and split present (final first), and one for DIR-R when any arm ran
    it."""
    ref = reference_of(ctx)
    ok = stats.usable(ctx.results)
    out = []
    for bench in sorted(set(ok["benchmark"].unique().to_list()) if not ok.is_empty() else set()):
        for split in splits(ok):
            d = ok.filter((pl.col("benchmark") == bench) & (pl.col("split") == split))
            if d.is_empty():
                continue
            rows = []
            for obj in objectives(d):
                rows += [
                    {"objective": obj, **r}
                    for r in _arm_rows(d.filter(pl.col("objective") == obj), ref, ctx.tol)
                ]
            where = tex(bench) + ("" if split == "final" else f", {tex(split)} split")
            paired = has_reference(rows)
            out.append(
                MethodTable(
                    label=f"tab:methods:{slug(bench)}"
                    + ("" if split == "final" else f":{slug(split)}"),
                    caption=_methods_caption(where, tex(ref.name), paired)
                    + evaluation_caption(rows, d),
                    kind="methods",
                    rows=rows,
                    benchmark=bench,
                    split=split,
                    paired=paired,
                )
            )
    dirr = _dirr_rows(ok, ctx.tol)
    if dirr:
        out.append(
            MethodTable(
                label="tab:methods:dirr",
                kind="dirr",
                rows=dirr,
                caption="DIR-R against the same method's static run on matched units, for every "
                "method run with DIR-R: the paired gap DIR-R$-$static, how often the gate "
                "triggered, the available gain (Eq.~20) and the captured fraction (Eq.~21); "
                "N/A where a run lacks a complete candidate set."
                + evaluation_caption(
                    [{"evaluation": r["m"].evaluation_selected} for r in dirr],
                    ok.filter(pl.col("variant") == "dirr"),
                ),
            )
        )
    return out


def _dirr_rows(ok: pl.DataFrame, tol: float) -> list[dict]:
    if ok.is_empty():
        return []
    rows = []
    for bench, split, method in (
        ok.filter(pl.col("variant") == "dirr")
        .select("benchmark", "split", "method")
        .unique()
        .sort(["benchmark", pl.col("split") != "final", "split", "method"])
        .iter_rows()
    ):
        d = ok.filter((pl.col("benchmark") == bench) & (pl.col("split") == split))
        for obj in objectives(d):
            do = d.filter(pl.col("objective") == obj)
            dirr, static = stats.pick(do, method, "dirr"), stats.pick(do, method, "static")
            m = stats.dirr_metrics(dirr, static, tol)
            if m.n:
                rows.append(
                    {
                        "benchmark": bench + ("" if split == "final" else f" ({split})"),
                        "objective": obj,
                        "name": arm_name(method),
                        "m": m,
                        # 95% t intervals of m.delta (DIR-R - static over the same matched units)
                        # and of the available gain (Eq. 20, a mean over those units)
                        "ci": stats.t_interval(m.pairs.diffs),
                        "avail_ci": None if m.gains is None else stats.t_interval(m.gains),
                        "wtl": f"{m.wins}/{m.ties}/{m.losses}",
                        "trig": f"{m.triggered}/{m.n}",
                        "evaluation": m.evaluation_selected,
                    }
                )
    return rows


# ---- rendering -----------------------------------------------------------------------------------
def render_tex(t: MethodTable) -> str:
    env = environment()
    name = "tab-methods.tex.j2" if t.kind == "methods" else "tab-methods-dirr.tex.j2"
    return env.from_string(template_text(name)).render(
        label=t.label, caption=t.caption, rows=t.rows, paired=t.paired
    )


def _md_num(x, digits=4, sign=False) -> str:
    return "N/A" if x is None else f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def dagger(row: dict) -> str:
    """† after a row with evaluation-selected DIR-R runs (the caption says what it means)."""
    return " †" if row.get("evaluation") else ""


def _md_ci(ci, sign=False) -> str:
    """A 95% interval as ``[lo, hi]``; ``[n/a: n < 2]`` where fewer than two values define none."""
    if ci is None:
        return "[n/a: n < 2]"
    return f"[{_md_num(ci[0], sign=sign)}, {_md_num(ci[1], sign=sign)}]"


def render_markdown(t: MethodTable) -> list[str]:
    """The table as Markdown lines (report.md): every mean with its 95% interval, ΔJ = method −
    reference."""
    if t.kind == "methods":
        md = [
            "| objective | method | n | mean J [95% CI] | SD | median J |"
            + (" ΔJ method − reference [95% CI] | median ΔJ | W/T/L |" if t.paired else ""),
            "|---|---|---|---|---|---|" + ("---|---|---|" if t.paired else ""),
        ]
        for r in t.rows:
            delta = r["note"] or f"{_md_num(r['delta'], sign=True)} {_md_ci(r['delta_ci'], True)}"
            md.append(
                f"| {OBJECTIVE_NAMES.get(r['objective'], r['objective'])} | {r['name']}{dagger(r)} "
                f"| {r['n']} | {_md_num(r['mean'])} {_md_ci(r['ci'])} | {_md_num(r['sd'])} | "
                f"{_md_num(r['median'])} |"
                + (
                    f" {delta} | "
                    f"{_md_num(r['median_delta'], sign=True) if not r['note'] else '-'} | "
                    f"{r['wtl'] or '-'} |"
                    if t.paired
                    else ""
                )
            )
        return md
    md = [
        "| benchmark | objective | method | n | ΔJ DIR-R − static [95% CI] | W/T/L | triggered | "
        "available gain [95% CI] | captured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in t.rows:
        m = r["m"]
        cap = "N/A" if m.captured is None else f"{100 * m.captured:.1f}%"
        avail = _md_num(m.available_gain, sign=True) + (
            "" if m.available_gain is None else f" {_md_ci(r['avail_ci'], True)}"
        )
        obj = OBJECTIVE_NAMES.get(r["objective"], r["objective"])
        md.append(
            f"| {r['benchmark']} | {obj} | {r['name']}{dagger(r)} | "
            f"{m.n} | {_md_num(m.delta, sign=True)} {_md_ci(r['ci'], True)} | {r['wtl']} | "
            f"{r['trig']} | {avail} | {cap} |"
        )
    return md
