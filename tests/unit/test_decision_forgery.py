"""Frozen decisions cannot be forged or back-dated: the hash covers frozen_at, a recomputed hash of
a changed decision is caught, and the audit flags unfrozen, late and undated records."""

import json
import sys

import pytest

from supportbench.experiments.decisions import decision_hash, freeze_decision
from supportbench.registry import synthetic as syn
from supportbench.registry.audit import audit
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect

CLI = [sys.executable, "-m", "supportbench.cli"]


def _now() -> str:
    """A run's start: now, after the decision just frozen and before the ingest that follows (the
    audit flags dates in the future of the registry's clock)."""
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="microseconds")


# ---- frozen decisions that cannot be forged or back-dated ----------------------------------------
def _decision(res, baselines=("random",)):
    return freeze_decision(
        res / "decisions",
        tau=0.02,
        rho_p=0.01,
        d=20,
        t=160,
        T=200,
        actions=[0, 0.01],
        admissible_range=[0.2, 0.8],
        calibration_seeds=[7],
        baselines=list(baselines),
        benchmark="natural_tofu",
        objective="npo",
        selection="evaluation",
        experiment="e",
        calibration_runs=[],
    )


def _final_dirr(res, dec, seed=3, **kw):
    rec = syn.record(
        experiment="e",
        variant="dirr",
        seed=seed,
        decision_hash=dec["hash"] if dec else None,
        candidates={"0.0": 1.0},
        started_at=_now(),
        **kw,
    )
    syn.write(res, rec)
    return rec


def test_frozen_at_is_part_of_the_hash():
    dec = {"tau": 0.1, "rho_p": 0.01, "frozen_at": "2026-01-02T00:00:00+00:00"}
    assert decision_hash(dec) != decision_hash({**dec, "frozen_at": "2025-01-01T00:00:00+00:00"})


@pytest.mark.parametrize("change", [{"tau": 0.5}, {"frozen_at": "2000-01-01T00:00:00+00:00"}])
def test_forged_or_backdated_decision_with_a_recomputed_hash_is_caught(tmp_path, change):
    res = tmp_path / "res"
    dec = _decision(res)
    rec = _final_dirr(res, dec)
    forged = {**dec, **change}
    forged["hash"] = decision_hash(forged)  # the forger recomputes the hash
    (res / "decisions" / f"{dec['hash']}.json").unlink()
    (res / "decisions" / f"{forged['hash']}.json").write_text(json.dumps(forged))
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    a = audit(con, "e")
    assert [u["run_key"] for u in a.undeclared_decisions] == [rec["run_key"]] and not a.ok


def test_audit_gaps_unfrozen_late_decision_and_undated_records(tmp_path):
    res = tmp_path / "res"
    dec = _decision(res, baselines=("random",))
    _final_dirr(res, None, seed=4)  # unfrozen final run
    syn.write(
        res,
        syn.record(experiment="e", method="random", seed=3, started_at="2000-01-01T00:00:00+00:00"),
    )  # baseline before freezing
    undated = syn.record(experiment="e", method="wagle", seed=3)
    undated["provenance"]["started_at"] = None
    syn.write(res, undated)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    a = audit(con, "e")
    assert [u["seed"] for u in a.unfrozen] == [4]
    assert [d["hash"] for d in a.decisions_after_baselines] == [dec["hash"]]
    assert [u["run_key"] for u in a.undated] == [undated["run_key"]]
    text = a.text()
    for title in (
        "final DIR-R runs without a frozen decision",
        "decisions frozen after the baseline outcomes",
        "records without a start time",
    ):
        assert f"{title}" in text
