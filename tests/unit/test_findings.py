"""findings.md renders the verdicts of the claims the experiment registered (reports/verdicts.py),
cites the claims' hash, and says when they were not registered; its rows are the verdicts' own
numbers."""

import sys
from pathlib import Path

import polars as pl
import pytest

from supportbench.experiments import claims as claims_module
from supportbench.registry.store import connect
from supportbench.reports import tables as tables
from supportbench.reports import verdicts as verdicts
from supportbench.reports.findings import findings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import paper_fixture  # noqa: E402


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return paper_fixture.build(tmp_path_factory.mktemp("findings"))


def _row(text: str, prefix: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {prefix}"))


def _section(text: str, title_start: str) -> str:
    return text.split(f"## {title_start}")[1].split("\n## ")[0]


def test_findings_render_every_registered_claims_verdict(db):
    con = connect(db, read_only=True)
    ctx = tables.Context.from_registry(con)
    text = findings(ctx, con, None, str(db))
    claims = claims_module.load()
    assert f"sha256 `{claims.hash[:16]}`" in text and "**not registered**" in text
    for v in verdicts.judge(claims, ctx, con):
        row = _row(text, v.claim.title)
        assert f"| {v.verdict} |" in row, row
        assert f"**{v.verdict}.**" in _section(text, v.claim.title)
    # the fixture has one theta_0 build: every claim that
    # could be judged reads inconclusive, saying why
    assert "1 theta_0 build(s); the claims file asks for at least 3" in text


def test_a_precondition_that_fails_reads_not_tested_and_says_why(db):
    con = connect(db, read_only=True)
    ctx = tables.Context.from_registry(con)
    # DIR-R never triggered: its runs are Static-IV's
    # continuations, so 'improves on Static-IV' is not tested
    quiet = ctx.results.with_columns(
        pl.when(pl.col("variant") == "dirr")
        .then(False)
        .otherwise(pl.col("triggered"))
        .alias("triggered"),
        pl.lit("development").alias("selection"),
    )
    text = findings(tables.Context(quiet, ctx.decisions, ctx.components), None, None, "x")
    assert "| not tested |" in _row(text, "Natural-TOFU: DIR-R improves")
    assert "DIR-R never triggered" in _section(text, "Natural-TOFU: DIR-R improves")
    # the fixture's DIR-R runs selected on the evaluation split: not tested either, with that reason
    text = findings(ctx, None, None, "x")
    assert "selected their candidate on the evaluation split" in _section(
        text, "LACUNA: DIR-R improves"
    )
    # the controlled construction's gate: storage must be
    # accurately localizable before the claim means anything
    flat = ctx.components.with_columns(
        pl.when(pl.col("name") == "storage_score")
        .then(0.0)
        .otherwise(pl.col("value"))
        .alias("value")
    )
    text = findings(tables.Context(ctx.results, ctx.decisions, flat), None, None, "x")
    assert "| not tested |" in _row(text, "Controlled separation")
    assert "storage localizable" in _section(text, "Controlled separation")


def test_the_controlled_section_names_the_best_constant_rule_and_the_direction(db):
    con = connect(db, read_only=True)
    ctx = tables.Context.from_registry(con)
    section = _section(findings(ctx, None, None, "x"), "Controlled separation")
    assert "best constant rule (always" in section and "exact McNemar p =" in section
    assert "storage x interface interaction" in section and "direction: LoRA wins" in section


def test_findings_carry_the_registry_and_code_they_came_from(db):
    from supportbench.experiments.identity import source_hash
    from supportbench.reports.findings import read_stamp

    con = connect(db, read_only=True)
    text = findings(tables.Context.from_registry(con), con, None, str(db))
    stamp = read_stamp(text)
    runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert stamp["records"] == runs and stamp["reports_code"] == source_hash("reports")
    assert stamp["theta0"] == {
        "controlled": ["m"],
        "lacuna": ["m"],
        "natural_tofu": ["m"],
    }  # synthetic hashes
    assert stamp["fingerprints"] == []  # synthetic records carry no code fingerprint
    assert stamp["claims"] == claims_module.load().hash
    assert f"{runs} records (registry digest `{stamp['registry']}`)" in text


def test_findings_say_when_the_design_cannot_refute_any_claim():
    from supportbench.reports.findings import _design_line

    claims = claims_module.load()
    a, b = claims.claims[:2]
    low = [
        verdicts.Verdict(a, verdicts.INCONCLUSIVE, "r", power=0.03),
        verdicts.Verdict(b, verdicts.NOT_TESTED, "r"),
    ]
    (blank, line) = _design_line(low, claims.defaults)
    assert "cannot refute any claim" in line and "(0.03-0.03)" in line
    # one claim powered at its minimum: the design can refute it, nothing is said
    assert (
        _design_line([*low, verdicts.Verdict(b, verdicts.HOLDS, "r", power=0.85)], claims.defaults)
        == []
    )
    assert _design_line([verdicts.Verdict(b, verdicts.NOT_TESTED, "r")], claims.defaults) == []
