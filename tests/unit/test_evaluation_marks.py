"""Every table that shows DIR-R runs marks the rows whose runs selected their candidate on the
evaluation split (where DIR-R cannot lose to Static-IV) and says so in its caption; rows selected on
development records carry no mark (issue 32: the mark existed in two templates only)."""

from __future__ import annotations

import itertools

import pytest

from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect
from supportbench.reports import metric_tables as MT
from supportbench.reports import overview as overview
from supportbench.reports import tables as tables_module


def _registry(tmp_path, selection):
    res = tmp_path / "res"
    for b, f, s in itertools.product(range(2), ("forget05", "forget10"), (1, 2)):
        kw = dict(
            experiment="e", benchmark="natural_tofu", build=b, field=f, objective="npo", seed=s
        )
        syn.write(res, syn.record(**kw, J=1.0, components={"forget_prob": 0.2}))
        syn.write(res, syn.record(**kw, method="random", J=0.8, components={"forget_prob": 0.3}))
        syn.write(
            res,
            syn.record(
                **kw,
                variant="dirr",
                J=1.2,
                components={"forget_prob": 0.1},
                candidates={"0.0": 1.0, "0.05": 1.2},
                triggered=True,
                selection=selection,
                decision_hash="x",
            ),
        )
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    return con, tables_module.Context.from_registry(con, "e")


@pytest.mark.parametrize("selection", ["evaluation", "development"])
def test_method_and_metric_tables_mark_evaluation_selected_rows(tmp_path, selection):
    con, ctx = _registry(tmp_path, selection)
    marked = selection == "evaluation"
    tables = overview.method_tables(ctx)
    assert {t.label for t in tables} >= {"tab:methods:natural_tofu", "tab:methods:dirr"}
    for t in tables:
        tex, md = overview.render_tex(t), "\n".join(overview.render_markdown(t))
        dirr_rows = [r for r in t.rows if r.get("evaluation")]
        assert bool(dirr_rows) == marked, t.label
        assert ("evaluation split (8 of 8 DIR-R runs)" in t.caption) == marked
        assert tex.count("$^\\dagger$") == (
            len(dirr_rows) + 1 if marked else 0
        )  # rows and the caption
        assert md.count("†") == len(dirr_rows)
    for t in MT.metric_tables(MT.load(con, "e")):
        tex = MT.render_tex(t)
        assert ("$^\\dagger$" in tex) == marked and ("evaluation split" in t.caption) == marked
        assert sum(bool(r["evaluation"]) for r in t.rows) == (
            1 if marked else 0
        )  # the DIR-R arm only
