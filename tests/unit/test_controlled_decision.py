"""The controlled separation's frozen decision: its rules, its hash, and the audit that holds final
runs to it."""

import json
from datetime import UTC

import pytest

from supportbench.errors import DecisionError
from supportbench.experiments import controlled_decision as cd
from supportbench.registry import synthetic as syn
from supportbench.registry.audit import audit
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect


def test_rules_and_their_ties():
    # positives 0.9, 0.1 vs negatives 0.1, -1: (.9>.1)(.9>-1)(.1=.1)(.1>-1) -> 3.5 of 4
    assert cd.auroc([0.9, 0.1, 0.1, -1.0], [1, 1, 0, 0]) == pytest.approx(3.5 / 4)
    assert cd.auroc([1.0, 2.0], [1, 1]) is None
    assert (
        cd.choose_primary({"zeta": 0.9, "alpha": 0.9, "mid": 0.8, "none": None}) == "alpha"
    )  # tie: alphabetical
    assert cd.choose_lr({0.1: 2.0, 0.01: 2.0, 0.001: 1.0}) == 0.01  # tie: smaller lr
    with pytest.raises(DecisionError, match="calibration AUROC"):
        cd.choose_primary({"a": None})


def _freeze(tmp_path):
    return cd.freeze_controlled(
        tmp_path / "res" / "decisions",
        experiment="synthetic",
        benchmark="controlled",
        objective="npo",
        model="tiny-llama",
        T=200,
        seed=0,
        theta0_hash="m",
        calibration_targets=["c00", "c01"],
        locator_aurocs={"a": 1.0, "b": 0.5},
        primary_locator="a",
        lr_grid=list(cd.LR_GRID),
        mean_J={"backbone": {"0.01": 1.0}, "lora": {"0.01": 2.0}},
        lr={"backbone": 0.01, "lora": 0.01},
        recall_threshold=cd.RECALL_THRESHOLD,
        calibration_runs=[],
    )


def test_an_edited_decision_no_longer_matches_its_hash(tmp_path):
    dec = _freeze(tmp_path)
    cd.verify_controlled(
        json.loads((tmp_path / "res" / "decisions" / f"{dec['hash']}.json").read_text())
    )
    with pytest.raises(DecisionError, match="content hash"):
        cd.verify_controlled({**dec, "primary_locator": "b"})


def test_the_typed_decision_is_its_file_and_refuses_an_edit(tmp_path):
    from supportbench.experiments.record import ControlledDecision

    dec = _freeze(tmp_path)
    text = (tmp_path / "res" / "decisions" / f"{dec['hash']}.json").read_text()
    typed = ControlledDecision.from_dict(json.loads(text))
    assert typed.to_dict() == json.loads(text) == dec  # the file's content, nothing lost
    assert (typed.primary_locator, typed.lr, typed.hash) == ("a", dec["lr"], dec["hash"])
    assert typed.label == dec["hash"][:12] and typed.extras == {}
    extra = cd.freeze_controlled(
        tmp_path / "other", **{k: dec[k] for k in cd.FROZEN_ITEMS if k != "kind"}, note="seen"
    )
    assert ControlledDecision.from_dict(extra).extras == {"note": "seen"}
    with pytest.raises(DecisionError, match="content hash"):
        ControlledDecision.from_dict({**dec, "lr": {"backbone": 0.1, "lora": 0.01}})
    with pytest.raises(DecisionError, match="not a controlled decision"):
        ControlledDecision.from_dict({**dec, "kind": "dirr"}, "d.json")
    with pytest.raises(DecisionError, match="d.json: .*T"):
        ControlledDecision.from_dict(_refrozen({**dec, "T": "two hundred"}), "d.json")


def _refrozen(dec: dict) -> dict:
    """``dec`` with its hash recomputed (a well-hashed decision whose item has the wrong type)."""
    return {**dec, "hash": cd.decision_hash(dec)}


def _now() -> str:
    from datetime import datetime

    return datetime.now(UTC).isoformat()


def _runs(tmp_path, started_at, decision):
    for f in ("t00", "t01"):
        for m in ("backbone", "lora"):
            hp = {"benchmark.decision": decision} if decision else {}
            syn.write(
                tmp_path / "res",
                syn.record(
                    benchmark="controlled",
                    field=f,
                    method=m,
                    started_at=started_at,
                    hyperparameters=hp,
                ),
            )
    con = connect(tmp_path / "r.duckdb")
    ingest(con, tmp_path / "res")
    return audit(con)


def test_audit_passes_final_runs_started_after_their_decision(tmp_path):
    dec = _freeze(tmp_path)
    # after the decision and before the ingest (a run dated
    # in the registry's future fails the clock check)
    rep = _runs(tmp_path, _now(), dec["hash"])
    assert rep.controlled_unfrozen == [] and rep.ok, rep.text()


def test_audit_fails_runs_started_before_their_decision(tmp_path):
    dec = _freeze(tmp_path)
    rep = _runs(tmp_path, "2000-01-01T00:00:00+00:00", dec["hash"])
    assert len(rep.controlled_unfrozen) == 4 and not rep.ok
    assert {r["reason"] for r in rep.controlled_unfrozen} == {
        "run started before the decision was frozen"
    }


def test_audit_fails_runs_without_a_decision(tmp_path):
    rep = _runs(tmp_path, _now(), None)
    assert {r["reason"] for r in rep.controlled_unfrozen} == {
        "no frozen controlled decision"
    } and not rep.ok
    assert (
        "final controlled runs without a controlled decision frozen before they started: 4"
        in rep.text()
    )


def test_construction_gates_by_hand():
    # backbone: 1 of 4 learned (25%), median (0.1 + 0.2) / 2 = 0.15; lora: 3 of 4 (75%), median 0.65
    recall = {"backbone": [0.05, 0.1, 0.2, 0.9], "lora": [0.3, 0.6, 0.7, 0.8]}
    gates = {g["gate"]: g for g in cd.construction_gates(recall, 0.95)}
    assert (
        not gates["facts learned"]["passed"]
        and gates["facts learned"]["value"] == "backbone 25%, lora 75%"
    )
    assert not gates["interfaces balanced"]["passed"]
    assert (
        gates["interfaces balanced"]["value"]
        == "backbone median recall 0.150, lora median recall 0.650"
    )
    assert gates["storage localizable"]["passed"]
    even = {
        "backbone": [0.5, 0.6, 0.7, 0.1],
        "lora": [0.55, 0.65, 0.6, 0.2],
    }  # 75% each; medians .55 / .575
    assert all(
        g["passed"] for g in cd.construction_gates(even, 0.9)
    )  # 0.9 is enough: the rule is >=
    assert not cd.construction_gates(even, None)[2]["passed"]  # undefined AUROC never passes
