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
    unrounded values."""
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
        assert got[k] == pytest.approx(v, abs=2e-6), k
    text, missing = render("tab:app-natural-complete", Context.from_registry(con))
    assert missing is None and "NPO & Random & $+0.002789$ & $+0.002010$ & $+0.004799$" in text


def test_missing_data_gives_explicit_note(tmp_path):
    con = connect(tmp_path / "empty.duckdb")
    status = render_all(Context.from_registry(con), tmp_path / "out")
    assert all(v for v in status.values())  # every table missing, none skipped
    for label in TABLES:
        text = (tmp_path / "out" / file_name(label)).read_text()
        assert "\\emph{missing:}" in text and f"\\label{{{label}}}" in text


def test_user_names_are_latex_escaped():
    assert tex("my_method & 50%") == r"my\_method \& 50\%"
