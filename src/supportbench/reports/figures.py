"""The report's figures (matplotlib, Agg): field-gap heatmap, LOO forest plot, DIR-R available vs
captured gain, the support Jaccard matrix across objectives and curves (J against the step). Each
figure builder raises ``Missing`` when the registry lacks its data; the report lists it instead of
skipping silently."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
# Labels carry user strings (method, field and experiment names): never let matplotlib read them as
# mathtext or TeX, whatever '$', '\\', '_' or '^' they hold.
SAFE_TEXT = {"text.parse_math": False, "text.usetex": False}
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from supportbench.experiments.metric_names import OPEN_UNLEARNING  # noqa: E402
from supportbench.registry.store import has_steps  # noqa: E402
from supportbench.reports import stats  # noqa: E402
from supportbench.reports.latex import FIELD_NAMES, OBJECTIVE_NAMES  # noqa: E402
from supportbench.reports.names import arm_display, method_display  # noqa: E402
from supportbench.reports.overview import (  # noqa: E402
    arm_name,
    present_arms,
    reference_of,
    split_arm,
)
from supportbench.reports.tables import (  # noqa: E402
    DIRR_METHOD,
    Context,
    Missing,
)


@dataclass(frozen=True)
class Comparison:
    benchmark: str  # the benchmark's registry name
    runs: pl.DataFrame  # its final-split ok runs
    method: str  # the reference arm
    variant: str
    baselines: list[str]  # the arms compared with it (every other arm: static and DIR-R)

    @property
    def who(self) -> str:
        """The reference's name as the tables print it."""
        return arm_display(self.method, self.variant)


def _comparison(ctx: Context) -> Comparison:
    """What the gap figures compare: the report's reference (``overview.reference_of``, the one the
    tables use) against every other arm (static or DIR-R), on LACUNA when both ran there, else
    Natural-TOFU, else the first benchmark (alphabetical) where both were run (final split). Gaps
    are method − reference, as in every table of the report."""
    ref = reference_of(ctx)
    if ref.key is None:
        raise Missing("the experiment has no ok runs")
    method, variant = split_arm(ref.key)
    ok = stats.usable(ctx.results.filter(pl.col("split") == "final"))
    present = sorted(ok["benchmark"].unique().to_list()) if ok.height else []
    paper = [ctx.bench["lacuna"], ctx.bench["natural"]]
    for bench in [b for b in paper if b in present] + [b for b in present if b not in paper]:
        df = ok.filter(pl.col("benchmark") == bench)
        others = [a for a in present_arms(df) if a != ref.key]
        if not stats.pick(df, method, variant).is_empty() and others:
            return Comparison(bench, df, method, variant, others)
    raise Missing(
        f"needs final-split runs of the reference ({ref.name}) and of another method on one "
        "benchmark"
    )


def text_colour(rgba) -> str:
    """Black or white, whichever reads better on a cell of colour ``rgba`` (WCAG relative
    luminance)."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "black" if lum > 0.179 else "white"


def _annotate(ax, im, M: np.ndarray, fmt: str, fontsize: int = 7) -> None:
    for i in range(M.shape[0]):
        for j in range(M.shape[1]):
            if not np.isnan(M[i, j]):
                ax.text(
                    j,
                    i,
                    format(M[i, j], fmt),
                    ha="center",
                    va="center",
                    fontsize=fontsize,
                    color=text_colour(im.cmap(im.norm(M[i, j]))),
                )


def _empty(ax, message: str) -> None:
    """Say on the axes why they hold nothing to read, instead of leaving them blank."""
    ax.text(
        0.5,
        0.5,
        message,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=9,
        wrap=True,
        bbox={"boxstyle": "round", "facecolor": "0.95", "edgecolor": "0.6"},
    )


def field_gap_heatmap(ctx: Context):
    c = _comparison(ctx)
    ref = stats.pick(c.runs, c.method, c.variant)
    fields = sorted(c.runs["field"].unique().to_list())
    M = np.full((len(c.baselines), len(fields)), np.nan)
    for i, b in enumerate(c.baselines):
        fd = stats.field_decomposition(stats.paired(stats.pick(c.runs, *split_arm(b)), ref))
        for f, g in zip(fd["field"].to_list(), fd["mean_gap"].to_list()):
            M[i, fields.index(f)] = g
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(fields), 0.8 + 0.4 * len(c.baselines)))
    lim = (np.nanmax(np.abs(M)) if not np.isnan(M).all() else 0.0) or 1.0
    im = ax.imshow(M, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(
        range(len(fields)), [FIELD_NAMES.get(f, f) for f in fields], rotation=30, ha="right"
    )
    ax.set_yticks(range(len(c.baselines)), [arm_name(b) for b in c.baselines])
    _annotate(ax, im, M, "+.3f")
    if np.isnan(M).all():
        _empty(ax, f"no unit matched between {c.who} and any other method")
    ax.set_title(
        f"ΔJ = method − {c.who} (reference) by field\n({c.benchmark}, mean over matched units, "
        "objectives pooled; positive = better than the reference)",
        fontsize=9,
    )
    fig.colorbar(im, ax=ax, shrink=0.8, label="mean paired ΔJ")
    return fig


def loo_forest(ctx: Context):
    c = _comparison(ctx)
    ref = stats.pick(c.runs, c.method, c.variant)
    rows = []
    objs = [o for o in OBJECTIVE_NAMES if o in set(c.runs["objective"].to_list())]
    objs += sorted(set(c.runs["objective"].to_list()) - set(objs))
    for b in c.baselines:  # one row per method and objective: the tables' cells
        for obj in objs:
            by = pl.col("objective") == obj
            p = stats.paired(stats.pick(c.runs.filter(by), *split_arm(b)), ref.filter(by))
            s = stats.summarize(p.diffs)
            if s.n:
                rows.append(
                    (f"{arm_name(b)} · {OBJECTIVE_NAMES.get(obj, obj)}", s.mean, s.t_ci, s.loo, s.n)
                )
    if not rows:
        raise Missing(f"no matched units between {c.who} and any other method")
    fig, ax = plt.subplots(figsize=(6, 0.9 + 0.35 * len(rows)))
    for i, (_, mean, ci, rng, _n) in enumerate(rows):
        if ci is not None:  # the interval the tables print beside the same mean
            ax.plot(ci, [i, i], color="0.4", lw=2)
        if rng is not None:  # the leave-one-out range, beside it
            ax.plot(rng, [i, i], "|", color="C1", ms=9, mew=1.5)
        ax.plot([mean], [i], "o", color="C0", zorder=3)
    ax.axvline(0, color="k", lw=0.8)
    xs = [0.0] + [r[1] for r in rows] + [v for r in rows for iv in r[2:4] if iv for v in iv]
    pad = 0.1 * (max(xs) - min(xs)) or 0.1 * max(abs(v) for v in xs) or 0.05
    ax.set_xlim(min(xs) - pad, max(xs) + pad)  # every point in view, also one point at zero
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    single = [r[0] for r in rows if r[4] < 2]
    ax.set_xlabel(
        f"ΔJ = method − {c.who}: mean over matched units (dot), 95% t interval (bar, as the "
        "tables print it), leave-one-out range (|)"
        + (" (neither where one unit is matched)" if single else ""),
        fontsize=8,
    )
    ax.set_title(
        f"Each method against the reference, {c.who} ({c.benchmark}); "
        "positive = better than the reference",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def dirr_gain(ctx: Context):
    """Available vs captured gain per benchmark x objective (and method, for DIR-R of other
    methods). When no run triggered, DIR-R equals its static continuation and the axes say so."""
    rows, triggered, runs = [], 0, 0
    ok = stats.usable(ctx.results.filter(pl.col("split") == "final"))
    present = set(ok["benchmark"].unique().to_list()) if ok.height else set()
    paper = [ctx.bench["natural"], ctx.bench["lacuna"]]
    benches = [b for b in paper if b in present] + sorted(present - set(paper))
    order = list(OBJECTIVE_NAMES)
    for bench in benches:
        df = ok.filter(pl.col("benchmark") == bench)
        methods = sorted(
            df.filter(pl.col("variant") == "dirr")["method"].unique().to_list(),
            key=lambda m: (m != DIRR_METHOD, m),
        )
        objs = sorted(
            df["objective"].unique().to_list(),
            key=lambda o: (order.index(o) if o in order else len(order), o),
        )
        for m in methods:
            for obj in objs:
                d = df.filter(pl.col("objective") == obj)
                dm = stats.dirr_metrics(stats.pick(d, m, "dirr"), stats.pick(d, m, "static"))
                if dm.n:
                    who = f"\n{method_display(m)}"  # every bar names its method
                    rows.append(
                        (
                            f"{bench}\n{OBJECTIVE_NAMES.get(obj, obj)}{who}",
                            dm.available_gain,
                            dm.delta,
                            dm.triggered,
                        )
                    )
                    triggered += dm.triggered
                    runs += dm.n
    if not rows:
        raise Missing("needs paired DIR-R and static runs of one method (final split)")
    fig, ax = plt.subplots(figsize=(4.4 + 1.3 * len(rows), 3.4))  # + the legend's column
    x = np.arange(len(rows))
    ax.bar(
        x - 0.2,
        [r[1] if r[1] is not None else 0 for r in rows],
        0.4,
        label="available (Eq. 20)",
        color="0.75",
    )
    ax.bar(x + 0.2, [r[2] for r in rows], 0.4, label="captured: ΔJ DIR-R − static", color="C0")
    for i, r in enumerate(rows):
        if r[1] is None and triggered:  # Eq. 20 needs every run's complete candidate set
            ax.text(  # inside the axes whatever the bars' signs (x: data, y: axes fraction)
                i - 0.2,
                0.5,
                "not measured:\nno complete\ncandidate sets",
                transform=ax.get_xaxis_transform(),
                rotation=90,
                ha="center",
                va="center",
                fontsize=6,
                color="0.3",
            )
        if r[3] == 0 and triggered:
            ax.text(
                i + 0.2,
                0,
                "no trigger",
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=6,
                color="0.3",
            )
    ax.set_xticks(x, [r[0] for r in rows], fontsize=8)
    ax.axhline(0, color="k", lw=0.8)
    if triggered == 0:
        unmeasured = any(r[1] is None for r in rows)
        _empty(
            ax,
            f"DIR-R triggered in none of its {runs} runs:\nevery DIR-R run is its static "
            "continuation (ΔJ = 0)."
            + (
                "\nAvailable gain needs complete candidate sets (sweep --post-hoc)."
                if unmeasured
                else ""
            ),
        )
        ax.set_ylim(-1, 1)
    else:  # beside the axes: inside, it covered a bar
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_ylabel("ΔJ (DIR-R − static; positive = DIR-R better)", fontsize=8)
    ax.set_title("DIR-R: available vs captured candidate-set gain")
    fig.tight_layout()
    return fig


def support_jaccard(ctx: Context, con=None):
    """Support overlap across objectives of one method's static runs: Intervention Score's by
    default, else the report's reference's."""
    if con is None:
        raise Missing("needs the registry's supports table")
    ref = reference_of(ctx)
    candidates = ([DIRR_METHOD] if ctx.reference is None else []) + (
        [split_arm(ref.key)[0]] if ref.key else []
    )
    for method in dict.fromkeys(candidates):
        sup = con.sql(
            """SELECT r.benchmark, r.build, r.field, r.seed, r.method, r.objective, s.groups
                         FROM supports s
                         JOIN runs r USING (run_key) WHERE r.variant = 'static' AND r.method = $m
                         AND r.split = 'final' AND ($exp IS NULL OR r.experiment = $exp)""",
            params={"m": method, "exp": _experiment(ctx)},
        ).pl()
        if not sup.is_empty() and sup["objective"].n_unique() >= 2:
            break
    else:
        raise Missing(
            "needs "
            f"{' or '.join(method_display(m) for m in dict.fromkeys(candidates)) or 'a method'}'s "
            "supports under at least two objectives"
        )
    m = stats.support_jaccard(sup)
    objs = sorted(sup["objective"].unique().to_list())

    def cell(a, b):  # None (no common unit) is NaN; an overlap of 0.0 stays 0.0
        v = m.filter((pl.col("a") == a) & (pl.col("b") == b))["jaccard"][0]
        return np.nan if v is None else v

    M = np.array([[cell(a, b) for b in objs] for a in objs], dtype=float)
    fig, ax = plt.subplots(figsize=(1.5 + 1.1 * len(objs), 1.2 + 1.0 * len(objs)))
    im = ax.imshow(M, vmin=0, vmax=1, cmap="viridis")
    labels = [OBJECTIVE_NAMES.get(o, o) for o in objs]
    ax.set_xticks(range(len(objs)), labels)
    ax.set_yticks(range(len(objs)), labels)
    _annotate(ax, im, M, ".3f", fontsize=9)
    ax.set_title(f"{method_display(method)} support overlap (Jaccard)")
    fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    return fig


# a curve's benchmark metric drawn under its J (curve_metrics runs): the first of these a
# benchmark's points carry -- TOFU's forget quality, LACUNA's exact memorization, else ROUGE, the
# controlled separation's bounded J -- under the metrics view's names (open-unlearning's where it
# has one)
CURVE_METRICS = tuple(
    OPEN_UNLEARNING.get(m, m)
    for m in ("forget_quality", "forget_exact_memorization", "forget_rouge", "J_bounded")
)


def curves(ctx: Context, con=None):
    """J on each run's curve slice against the training step (``eval_every`` runs): one panel per
    benchmark x objective, one line per method (the mean over its runs at each step); under it,
    where the points carry the benchmark's own metrics (``curve_metrics``), the first of
    ``CURVE_METRICS`` they hold. A curve is shown, never used to choose a checkpoint: every table
    scores the terminal model."""
    if con is None:
        raise Missing("needs the registry's metrics view")
    if not has_steps(con):  # a registry from before curves: no run has one
        raise Missing("needs runs with a curve (eval_every > 0)")
    pts = con.sql(
        """SELECT r.benchmark, r.objective, r.method, m.name, m.step, avg(m.value) AS value
           FROM metrics m JOIN runs r USING (run_key)
           WHERE m.step IS NOT NULL AND r.split = 'final'
             AND list_contains($names, m.name)
             AND ($exp IS NULL OR r.experiment = $exp)
           GROUP BY ALL ORDER BY ALL""",
        params={"exp": _experiment(ctx), "names": ["J", *CURVE_METRICS]},
    ).pl()
    if pts.filter(pl.col("name") == "J").is_empty():
        raise Missing("needs runs with a curve (eval_every > 0)")
    panels = (
        pts.filter(pl.col("name") == "J")
        .select("benchmark", "objective")
        .unique()
        .sort(["benchmark", "objective"])
        .rows()
    )
    metric = {}  # panel -> the benchmark metric it draws under J
    for bench, obj in panels:
        have = set(
            pts.filter((pl.col("benchmark") == bench) & (pl.col("objective") == obj))["name"]
        )
        metric[bench, obj] = next((m for m in CURVE_METRICS if m in have), None)
    rows = 2 if any(metric.values()) else 1
    fig, axes = plt.subplots(
        rows, len(panels), figsize=(4.2 * len(panels), 3.2 * rows), squeeze=False, sharey=False
    )
    for i, (bench, obj) in enumerate(panels):
        sub = pts.filter((pl.col("benchmark") == bench) & (pl.col("objective") == obj))
        for row, name in enumerate(("J", metric[bench, obj])[:rows]):
            ax = axes[row][i]
            if name is None:
                ax.axis("off")
                continue
            _curve_panel(ax, sub.filter(pl.col("name") == name), name)
            ax.set_title(f"{bench}, {OBJECTIVE_NAMES.get(obj, obj)}", fontsize=9)
    fig.suptitle(
        "Curves: J (and the benchmark's metric) during unlearning (the terminal model is what "
        "the tables score)",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def _curve_panel(ax, sub, name: str) -> None:
    """One line per method: ``name``'s mean value at each step."""
    for method in sorted(sub["method"].unique().to_list()):
        m = sub.filter(pl.col("method") == method)
        ax.plot(
            m["step"].to_list(),
            m["value"].to_list(),
            marker="o",
            ms=3,
            label=method_display(method),
        )
    if name == "J":
        ax.axhline(0.0, color="grey", lw=0.6)
        ax.set_ylabel("J on the curve slice (higher = better)")
    else:
        ax.set_ylabel(f"{name} on the curve slice")
    ax.set_xlabel("training step")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))


def _experiment(ctx: Context) -> str | None:
    exps = ctx.results["experiment"].unique().to_list() if ctx.results.height else []
    return exps[0] if len(exps) == 1 else None


FIGURES = {
    "field-gap-heatmap": field_gap_heatmap,
    "loo-forest": loo_forest,
    "dirr-gain": dirr_gain,
    "support-jaccard": support_jaccard,
    "curves": curves,
}
_READS_THE_REGISTRY = ("support-jaccard", "curves")


def render_figures(ctx: Context, out: str | Path, con=None) -> dict[str, str | None]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    status = {}
    with matplotlib.rc_context(SAFE_TEXT):
        for name, fn in FIGURES.items():
            try:
                fig = fn(ctx, con) if name in _READS_THE_REGISTRY else fn(ctx)
            except Missing as m:
                status[name] = str(m)
                continue
            try:
                for ext in ("png", "pdf"):
                    fig.savefig(out / f"{name}.{ext}", dpi=150, bbox_inches="tight")
            finally:
                plt.close(fig)
            status[name] = None
    return status
