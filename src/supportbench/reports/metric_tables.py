"""Per-method metric tables: every metric beyond J that an experiment's runs carry (the registry's
``metrics`` view: open-unlearning's names such as forget_quality, model_utility, forget_Q_A_Prob),
imported runs included.

An imported run (``registry import`` of TOFU's logs, open-unlearning's or LACUNA's files) often has
no J: the J tables and statistics leave it out, and these tables are where it shows. One table per
benchmark, split (final first) and objective; one row per arm (method and variant), the source of
its runs (record, imported, or both); one column per metric present in the table:

    cell = median of the metric over the arm's runs that carry it (seeds and fields pooled)

with the number of runs in column n, and the count in brackets where fewer of the arm's runs carry a
metric.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from supportbench.registry.store import terminal_metrics
from supportbench.reports.latex import OBJECTIVE_NAMES, environment, template_text, tex
from supportbench.reports.overview import (
    arm_key,
    arm_name,
    dagger,
    evaluation_caption,
    objectives,
    slug,
    splits,
)

FIRST = (
    "forget_quality",
    "model_utility",
)  # TOFU's two headline numbers lead; the rest in name order
SOURCES = {"record": "record", "import": "imported"}


@dataclass
class MetricTable:
    label: str
    caption: str
    benchmark: str
    split: str
    objective: str
    metrics: list[str]
    rows: list[dict]  # name, source, n, cells: {metric: (median, n)}


def load(con, experiment: str | None) -> pl.DataFrame:
    """Long frame of the ok runs' metrics: the cell, the run's origin, name, value (one row per run
    and metric)."""
    where = "AND r.experiment = $exp" if experiment else ""
    return con.sql(
        """SELECT r.run_key, r.benchmark, r.field, r.objective, r.method, r.variant, r.seed, """
        """r.split,
                              r.origin, m.name, m.value, g.selection
                       FROM metrics m JOIN results_all r USING (run_key) LEFT JOIN gate_events g """
        f"""USING (run_key)
                       WHERE r.status = 'ok' AND {terminal_metrics(con)} {where}
                       ORDER BY r.ingest_seq, m.name""",
        params={"exp": experiment} if experiment else None,
    ).pl()


def metric_only_count(con, experiment: str | None) -> int:
    """ok runs without J (metric-only imports): outside every J statistic, shown in the metric
    tables."""
    where = "AND experiment = $exp" if experiment else ""
    return con.execute(
        f"SELECT count(*) FROM results_all WHERE status = 'ok' AND J IS NULL {where}",
        {"exp": experiment} if experiment else {},
    ).fetchall()[0][0]


def _order(names) -> list[str]:
    names = set(names)
    return [n for n in FIRST if n in names] + sorted(names - set(FIRST))


def metric_tables(long: pl.DataFrame) -> list[MetricTable]:
    if long.is_empty():
        return []
    long = long.with_columns(
        arm=pl.struct("method", "variant").map_elements(
            lambda s: arm_key(s["method"], s["variant"]), return_dtype=pl.String
        )
    )
    out = []
    for bench in sorted(set(long["benchmark"].to_list())):
        for split in splits(long):
            b = long.filter((pl.col("benchmark") == bench) & (pl.col("split") == split))
            for obj in objectives(b):
                d = b.filter(pl.col("objective") == obj)
                metrics = _order(d["name"].unique().to_list())
                rows = []
                for arm in sorted(set(d["arm"].to_list()), key=lambda k: (":" in k, k)):
                    a = d.filter(pl.col("arm") == arm)
                    origins = sorted({SOURCES.get(o, o) for o in a["origin"].unique().to_list()})
                    cells = {}
                    for (name,), g in a.group_by("name"):
                        cells[name] = (float(g["value"].median()), g["run_key"].n_unique())
                    ev = a.filter(
                        (pl.col("variant") == "dirr") & (pl.col("selection") == "evaluation")
                    )
                    rows.append(
                        {
                            "arm": arm,
                            "name": arm_name(arm),
                            "source": " + ".join(origins),
                            "n": a["run_key"].n_unique(),
                            "cells": cells,
                            "evaluation": ev["run_key"].n_unique(),
                        }
                    )
                where = f"{tex(bench)}, {OBJECTIVE_NAMES.get(obj, tex(obj))}" + (
                    "" if split == "final" else f", {tex(split)} split"
                )
                suffix = "" if split == "final" else f":{slug(split)}"
                out.append(
                    MetricTable(
                        label=f"tab:metrics:{slug(bench)}:{slug(obj)}{suffix}",
                        benchmark=bench,
                        split=split,
                        objective=obj,
                        metrics=metrics,
                        rows=rows,
                        caption=(
                            f"Metrics beyond $J$ on {where}: the median over each method's runs "
                            "(seeds and fields pooled), $n$ runs, in brackets the runs carrying a "
                            "metric where fewer; source: record (this harness's runs) or imported "
                            "(\\texttt{registry import})."
                            + evaluation_caption(rows, d.unique("run_key"))
                        ),
                    )
                )
    return out


def _cell(cell, n: int, fmt) -> str:
    if cell is None:
        return "N/A"
    value, k = cell
    return fmt(value) + ("" if k == n else f" ({k})")


def render_tex(t: MetricTable) -> str:
    from supportbench.reports.latex import fixed

    rows = [
        {
            "name": r["name"],
            "evaluation": r["evaluation"],
            "source": r["source"],
            "n": r["n"],
            "cells": [_cell(r["cells"].get(m), r["n"], lambda v: fixed(v, 4)) for m in t.metrics],
        }
        for r in t.rows
    ]
    return (
        environment()
        .from_string(template_text("tab-metrics.tex.j2"))
        .render(label=t.label, caption=t.caption, metrics=t.metrics, rows=rows)
    )


def render_markdown(t: MetricTable) -> list[str]:
    md = [
        "| method | source | n | " + " | ".join(t.metrics) + " |",
        "|---|---|---|" + "---|" * len(t.metrics),
    ]
    for r in t.rows:
        cells = [_cell(r["cells"].get(m), r["n"], lambda v: f"{v:.4g}") for m in t.metrics]
        md.append(
            f"| {r['name']}{dagger(r)} | {r['source']} | {r['n']} | " + " | ".join(cells) + " |"
        )
    return md
