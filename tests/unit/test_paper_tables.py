"""Golden test: every paper table rendered from a small fixed registry equals the checked-in .tex.

Regenerate after an intended change with: UPDATE_GOLDEN=1 pytest tests/unit/test_paper_tables.py
"""

import os
import sys
from pathlib import Path

import pytest

from supportbench.registry.imports import import_table
from supportbench.registry.store import connect
from supportbench.reports.latex import tex
from supportbench.reports.tables import TABLES, Context, file_name, render, render_all

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import paper_fixture  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    db = paper_fixture.build(tmp_path_factory.mktemp("paper"))
    return Context.from_registry(connect(db, read_only=True))


def test_every_table_matches_golden(ctx, tmp_path):
    status = render_all(ctx, tmp_path)
    assert set(status) == set(TABLES) and len(TABLES) == 15
    assert all(v is None for v in status.values()), status
    for label in TABLES:
        got = (tmp_path / file_name(label)).read_text()
        want_path = GOLDEN / file_name(label)
        if os.environ.get("UPDATE_GOLDEN"):
            want_path.write_text(got)
        assert got == want_path.read_text(), f"{label} differs from {want_path}"


def test_natural_complete_reproduces_paper_full_column(tmp_path):
    """Paper Table app-natural-complete: Full = (Static-IV - C) + (DIR-R - Static-IV), from
    unrounded values; printed as method - reference, so each gap is the paper's negated but for
    DIR-R - Static-IV (whose reference is Static-IV in both)."""
    paper = {
        "npo": {"random": 0.002789, "grail": 0.000163, "_dirr": 0.002010},
        "simnpo": {"fila": -0.005930, "grail": -0.004412, "_dirr": 0.005130},
    }
    want_full = {
        ("npo", "random"): 0.004799,
        ("npo", "grail"): 0.002172,
        ("simnpo", "fila"): -0.000799,
        ("simnpo", "grail"): 0.000719,
    }
    lines = ["experiment,benchmark,field,objective,method,variant,seed,split,J,G_F,D_coll,status"]
    for obj, gaps in paper.items():
        for seed, base in ((1, 1.0), (2, 3.0)):  # per-unit gaps equal the paper's means
            row = f"p,natural_tofu,forget10,{obj},{{m}},{{v}},{seed},final,{{J}},0,0,ok"
            lines.append(row.format(m="intervention_score", v="static", J=base))
            lines.append(row.format(m="intervention_score", v="dirr", J=base + gaps["_dirr"]))
            for c in ("random", "fila", "grail"):
                if c in gaps:
                    lines.append(row.format(m=c, v="static", J=base - gaps[c]))
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    con = connect(tmp_path / "r.duckdb")
    import_table(con, tmp_path / "t.csv")
    from supportbench.reports.tables import natural_complete

    rows = natural_complete(Context.from_registry(con))["rows"]
    got = {(r["objective"], r["baseline"]): r["full"] for r in rows}
    for k, v in want_full.items():
        assert got[k].value == pytest.approx(-v, abs=2e-6), k
        assert got[k].n == 2 and got[k].ci == pytest.approx((-v, -v), abs=2e-6)  # equal gaps
    text, missing = render("tab:app-natural-complete", Context.from_registry(con))
    cell = "${:+.6f}$ {{\\scriptsize $[{:+.6f},{:+.6f}]$}}".format
    want = " & ".join(cell(g, g, g) for g in (-0.002789, 0.002010, -0.004799))
    assert missing is None and f"NPO & Random & {want} \\\\" in text, text
    assert "reference: \\textsc{Static-IV} in the first two gap columns" in text


def test_mean_cells_carry_t_intervals_worked_by_hand():
    """Two units {1, 3}: mean 2, s = sqrt(2), se = 1, t(0.975, df 1) = 12.7062047361747; a sum of
    two independent means {1, 3} + {-0.5, -0.5} (Welch): se = 1, df = 1; one unit has no interval
    and the cell prints its n."""
    from supportbench.reports import stats
    from supportbench.reports.latex import gap, mean

    t1 = 12.7062047361747
    m = stats.mean_ci([1.0, 3.0])
    assert m.value == 2.0 and m.n == 2 and m.ci == pytest.approx((2 - t1, 2 + t1), abs=1e-9)
    s = stats.sum_ci([1.0, 3.0], [-0.5, -0.5])
    assert s.value == 1.5 and s.ci == pytest.approx((1.5 - t1, 1.5 + t1), abs=1e-9)
    # Welch with equal variances and n: se^2 = 2 s^2 / n, df = 2 (n - 1); {0, 2} + {1, 3}: s^2 = 2
    w = stats.sum_ci([0.0, 2.0], [1.0, 3.0])
    assert w.ci == pytest.approx((3 - 4.302652729749464 * 2**0.5, 3 + 4.302652729749464 * 2**0.5))
    assert stats.sum_ci([1.0], [2.0, 3.0]) == stats.MeanCI(3.5, None, 1)
    assert stats.sum_ci([1.0, 1.0], [2.0, 2.0]) == stats.MeanCI(3.0, (3.0, 3.0), 2)
    assert stats.mean_ci([]) is None and stats.sum_ci([], [1.0]) is None
    assert mean(stats.MeanCI(2.0, (1.0, 3.0), 2), 2) == "$2.00$ {\\scriptsize $[1.00,3.00]$}"
    assert gap(stats.mean_ci([-0.25]), 3) == "$-0.250$ {\\scriptsize $n{=}1$}"
    assert gap(None) == "N/A"


def test_every_gap_is_method_minus_reference_named_in_the_caption(ctx):
    """One sign convention: each table that prints a gap names its reference in the caption; the
    gap columns put the reference second (C - DIR-R, DIR-R - Static-IV, ...)."""
    for label, t in TABLES.items():
        text, missing = render(label, ctx)
        assert missing is None
        assert ("reference: " in text) == (t.reference is not None), label
        assert "positive favours it" not in text and "favor ours" not in text, label
        assert ("$t$ interval over its units" in text) == t.means, label
    primary, _ = render("tab:app-graddiff-primary", ctx)
    assert "Method$-$DIR-R" in primary and "DIR-R$-$method" not in primary


def test_missing_data_gives_explicit_note(tmp_path):
    con = connect(tmp_path / "empty.duckdb")
    status = render_all(Context.from_registry(con), tmp_path / "out")
    assert all(v for v in status.values())  # every table missing, none skipped
    for label in TABLES:
        text = (tmp_path / "out" / file_name(label)).read_text()
        assert "\\emph{missing:}" in text and f"\\label{{{label}}}" in text


def test_user_names_are_latex_escaped():
    assert tex("my_method & 50%") == r"my\_method \& 50\%"


def test_a_table_has_a_column_only_for_an_objective_that_ran(ctx):
    """Review of issue 36: the paper's grid under NPO alone gave natural-main a SimNPO column of
    N/A in every row. Now a column per objective that ran, none of N/A only."""
    import dataclasses

    import polars as pl

    npo = dataclasses.replace(
        ctx, results=ctx.results.filter(pl.col("objective") != "simnpo"), _ok={}, _built={}
    )
    for label in ("tab:natural-main", "tab:app-lacuna-selection-comparison"):
        full, _ = render(label, ctx)
        text, missing = render(label, npo)
        body = text[text.index("\\toprule") : text.index("\\bottomrule")]
        assert missing is None and "SimNPO" in full and "NPO" in body, label
        assert "SimNPO" not in body and "N/A" not in body, (label, body)
