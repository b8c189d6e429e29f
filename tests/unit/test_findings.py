"""findings.md is computed from the registry with the tables' own builders, and says 'does not hold'
when the numbers say so."""

import sys
from pathlib import Path

import polars as pl
import pytest

from supportbench.registry.store import connect
from supportbench.reports import tables as T
from supportbench.reports.findings import findings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import paper_fixture  # noqa: E402


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return paper_fixture.build(tmp_path_factory.mktemp("findings"))


def test_findings_count_the_tables_margins(db):
    con = connect(db, read_only=True)
    ctx = T.Context.from_registry(con)
    rows = ctx.built(T.natural_complete)["rows"]
    pos = sum(r["full"] > 0 for r in rows)
    text = findings(ctx, con, None, str(db))
    assert f"{pos}/{len(rows)} composed margins" in text
    lac = ctx.built(T.lacuna_comparison)["rows"]
    assert f"{sum(r['gap'] > 0 for r in lac)}/{len(lac)} NPO/SimNPO comparisons" in text
    assert "not tested" not in text.split("## ")[0].split("| claim | verdict |")[1].replace(
        "Natural-TOFU: the initial support depends on the objective | not tested", "")


def test_a_claim_that_fails_is_reported_as_failing(db):
    con = connect(db, read_only=True)
    ctx = T.Context.from_registry(con)
    # every Intervention Score run made worse than every baseline: the margins claim must not hold
    worse = ctx.results.with_columns(
        pl.when(pl.col("method") == "intervention_score").then(pl.col("J") - 1e6).otherwise(pl.col("J")).alias("J"))
    bad = T.Context(worse, ctx.decisions, ctx.components)
    text = findings(bad, None, None, "x")
    row = next(line for line in text.splitlines() if line.startswith("| Natural-TOFU (§5.3)"))
    assert row.endswith("| does not hold |")
    assert "0/" in text.split("## Natural-TOFU (§5.3)")[1].split("##")[0]
