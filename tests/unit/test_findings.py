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


def _row(text: str, prefix: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {prefix}"))


def test_a_claim_whose_precondition_fails_is_not_tested_and_says_why(db):
    con = connect(db, read_only=True)
    ctx = T.Context.from_registry(con)
    # three of the ten baselines gone: a claim about ten baselines cannot be tested
    fewer = ctx.results.filter(~pl.col("method").is_in(["fila", "grail", "memflex"]))
    text = findings(T.Context(fewer, ctx.decisions, ctx.components), None, None, "x")
    assert _row(text, "Natural-TOFU (§5.3)").endswith(
        "| not tested (only 7 of the paper's ten baselines are in the registry (missing: memflex, fila, grail)) |")
    # DIR-R never triggered: its runs are Static-IV's continuations, so 'improves on Static-IV' is not tested
    quiet = ctx.results.with_columns(
        pl.when(pl.col("variant") == "dirr").then(False).otherwise(pl.col("triggered")).alias("triggered"))
    text = findings(T.Context(quiet, ctx.decisions, ctx.components), None, None, "x")
    assert "| not tested (DIR-R never triggered on the final seeds of Natural-TOFU" in _row(
        text, "Natural-TOFU: DIR-R improves")
    # the controlled construction's gate: storage must be accurately localizable before the claim means anything
    flat = ctx.components.with_columns(
        pl.when(pl.col("name") == "storage_score").then(0.0).otherwise(pl.col("value")).alias("value"))
    text = findings(T.Context(ctx.results, ctx.decisions, flat), None, None, "x")
    row = _row(text, "Controlled separation")
    assert ("| not tested (the construction's validity gates fail (storage localizable: primary locator AUROC "
            "0.500, rule: the primary locator's AUROC on every final target >= 0.9)") in row
    assert "primary locator storage_score (no frozen controlled decision)" in row


def test_findings_carry_the_registry_and_code_they_came_from(db):
    from supportbench.experiments.identity import source_hash
    from supportbench.reports.findings import read_stamp

    con = connect(db, read_only=True)
    text = findings(T.Context.from_registry(con), con, None, str(db))
    stamp = read_stamp(text)
    runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert stamp["records"] == runs and stamp["reports_code"] == source_hash("reports")
    assert stamp["theta0"] == {"controlled": ["m"], "lacuna": ["m"], "natural_tofu": ["m"]}  # synthetic hashes
    assert stamp["fingerprints"] == []  # synthetic records carry no code fingerprint
    assert f"{runs} records (registry digest `{stamp['registry']}`)" in text


def test_the_controlled_verdict_sets_storage_beside_an_always_one_interface_rule(db):
    """Agreement with the better intervention means little when one interface wins almost everywhere: the
    verdict states what always picking the more frequent winner would agree on, computed from Table 1."""
    con = connect(db, read_only=True)
    ctx = T.Context.from_registry(con)
    c = ctx.built(T.controlled_main)
    j = c["bounded"] or c
    lora_n, n = (int(x) for x in j["lora_wins"].split("/"))
    agree_n = int(j["agree"].split("/")[0])
    majority = max(lora_n, n - lora_n)
    section = findings(ctx, None, None, "x").split("## Controlled separation")[1].split("\n## ")[0]
    assert f"would agree on {majority}/{n}" in section
    assert ("more than storage" in section) == (majority > agree_n)
