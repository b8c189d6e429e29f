"""The report's figures (matplotlib, Agg): field-gap heatmap, LOO forest plot, DIR-R available vs
captured gain, and the support Jaccard matrix across objectives. Each figure builder raises
``Missing`` when the registry lacks its data; the report lists it instead of skipping silently."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
# Labels carry user strings (method, field and experiment names): never let matplotlib read them as
# mathtext or TeX, whatever '$', '\\', '_' or '^' they hold.
SAFE_TEXT = {"text.parse_math": False, "text.usetex": False}
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from supportbench.reports import stats as S  # noqa: E402
from supportbench.reports.latex import FIELD_NAMES, METHOD_NAMES, OBJECTIVE_NAMES  # noqa: E402
from supportbench.reports.tables import DIRR_METHOD, Context, Missing, _baselines_present  # noqa: E402


def _reference(ctx: Context) -> tuple[str, pl.DataFrame, str]:
    """The comparison the figures show: DIR-R if present, else Static-IV, on the richest benchmark."""
    for key in ("lacuna", "natural"):
        df = ctx.ok(key)
        for variant, name in (("dirr", "DIR-R"), ("static", "Static-IV")):
            ref = S.pick(df, DIRR_METHOD, variant)
            if not ref.is_empty() and _baselines_present(df):
                return key, df, variant if name else variant
    raise Missing("needs Intervention Score runs and at least one baseline on Natural-TOFU or LACUNA")


def field_gap_heatmap(ctx: Context):
    key, df, variant = _reference(ctx)
    ref = S.pick(df, DIRR_METHOD, variant)
    fields = sorted(df["field"].unique().to_list())
    bases = _baselines_present(df)
    M = np.full((len(bases), len(fields)), np.nan)
    for i, c in enumerate(bases):
        fd = S.field_decomposition(S.paired(ref, S.pick(df, c, "static")))
        for f, g in zip(fd["field"].to_list(), fd["mean_gap"].to_list()):
            M[i, fields.index(f)] = g
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(fields), 0.8 + 0.4 * len(bases)))
    lim = np.nanmax(np.abs(M)) or 1.0
    im = ax.imshow(M, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(range(len(fields)), [FIELD_NAMES.get(f, f) for f in fields], rotation=30, ha="right")
    ax.set_yticks(range(len(bases)), [METHOD_NAMES.get(b, b) for b in bases])
    for i in range(len(bases)):
        for j in range(len(fields)):
            if not np.isnan(M[i, j]):
                ax.text(j, i, f"{M[i, j]:+.3f}", ha="center", va="center", fontsize=7)
    who = "DIR-R" if variant == "dirr" else "Static-IV"
    ax.set_title(f"{who} − baseline by field ({ctx.bench[key]}, mean paired ΔJ)")
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def loo_forest(ctx: Context):
    key, df, variant = _reference(ctx)
    ref = S.pick(df, DIRR_METHOD, variant)
    rows = []
    for c in _baselines_present(df):
        s = S.summarize(S.paired(ref, S.pick(df, c, "static")).diffs)
        if s.n:
            rows.append((METHOD_NAMES.get(c, c), s.mean, s.loo))
    if not rows:
        raise Missing("no matched units between the reference and any baseline")
    fig, ax = plt.subplots(figsize=(6, 0.6 + 0.35 * len(rows)))
    for i, (_, mean, rng) in enumerate(rows):
        if rng is not None:
            ax.plot(rng, [i, i], color="0.4", lw=2)
        ax.plot([mean], [i], "o", color="C0")
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("mean paired ΔJ with leave-one-out range")
    ax.set_title(f"{'DIR-R' if variant == 'dirr' else 'Static-IV'} vs baselines ({ctx.bench[key]})")
    fig.tight_layout()
    return fig


def dirr_gain(ctx: Context):
    rows = []
    for key in ("natural", "lacuna"):
        df = ctx.ok(key)
        for obj in ("npo", "simnpo", "graddiff"):
            d = df.filter(pl.col("objective") == obj)
            m = S.dirr_metrics(S.pick(d, DIRR_METHOD, "dirr"), S.pick(d, DIRR_METHOD, "static"))
            if m.n:
                rows.append((f"{ctx.bench[key]}\n{OBJECTIVE_NAMES[obj]}", m.available_gain, m.delta))
    if not rows:
        raise Missing("needs paired DIR-R and Static-IV runs")
    fig, ax = plt.subplots(figsize=(1.2 + 1.3 * len(rows), 3.2))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r[1] if r[1] is not None else 0 for r in rows], 0.4, label="available (Eq. 20)", color="0.75")
    ax.bar(x + 0.2, [r[2] for r in rows], 0.4, label="captured: ΔJ DIR-R − Static-IV", color="C0")
    for i, r in enumerate(rows):
        if r[1] is None:
            ax.text(i - 0.2, 0, "undefined", rotation=90, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [r[0] for r in rows], fontsize=8)
    ax.axhline(0, color="k", lw=0.8)
    ax.legend(fontsize=8)
    ax.set_title("DIR-R: available vs captured candidate-set gain")
    fig.tight_layout()
    return fig


def support_jaccard(ctx: Context, con=None):
    if con is None:
        raise Missing("needs the registry's supports table")
    sup = con.sql("""SELECT r.benchmark, r.field, r.seed, r.method, r.objective, s.groups FROM supports s
                     JOIN runs r USING (run_key) WHERE r.variant = 'static' AND r.method = 'intervention_score'
                     AND r.split = 'final'""").pl()
    if sup.is_empty() or sup["objective"].n_unique() < 2:
        raise Missing("needs Intervention Score supports under at least two objectives")
    m = S.support_jaccard(sup)
    objs = sorted(sup["objective"].unique().to_list())
    M = np.array([[m.filter((pl.col("a") == a) & (pl.col("b") == b))["jaccard"][0] or np.nan for b in objs]
                  for a in objs], dtype=float)
    fig, ax = plt.subplots(figsize=(1.5 + 1.1 * len(objs), 1.2 + 1.0 * len(objs)))
    im = ax.imshow(M, vmin=0, vmax=1, cmap="viridis")
    labels = [OBJECTIVE_NAMES.get(o, o) for o in objs]
    ax.set_xticks(range(len(objs)), labels)
    ax.set_yticks(range(len(objs)), labels)
    for i in range(len(objs)):
        for j in range(len(objs)):
            ax.text(j, i, f"{M[i, j]:.3f}", ha="center", va="center", color="w" if M[i, j] < 0.6 else "k")
    ax.set_title("Intervention Score support overlap (Jaccard)")
    fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    return fig


FIGURES = {"field-gap-heatmap": field_gap_heatmap, "loo-forest": loo_forest, "dirr-gain": dirr_gain,
           "support-jaccard": support_jaccard}


def render_figures(ctx: Context, out: str | Path, con=None) -> dict[str, str | None]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    status = {}
    with matplotlib.rc_context(SAFE_TEXT):
        for name, fn in FIGURES.items():
            try:
                fig = fn(ctx, con) if name == "support-jaccard" else fn(ctx)
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
