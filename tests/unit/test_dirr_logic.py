import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from supportbench.errors import CalibrationError, DecisionError, SpecError
from supportbench.experiments.decisions import (
    ACTIONS,
    freeze_decision,
    load_decision,
    load_decision_for,
)
from supportbench.experiments.spec import RunSpec
from supportbench.harness.calibration import calibrate
from supportbench.harness.dirr import candidate_supports
from supportbench.unlearning.support import Geometry, GeometryTensor, select


def geometry(costs_per_tensor):
    ts, off = [], 0
    for i, (rows, n) in enumerate(costs_per_tensor):
        p = torch.nn.Parameter(torch.zeros(rows, n))
        ts.append(GeometryTensor(f"w{i}", f"m{i}", p, 1, off, n))
        off += n
    return Geometry(ts)


def test_candidate_family_equal_cost_by_hand():
    geo = geometry([(3, 200)])
    scores = torch.arange(200, dtype=torch.float64)  # group g has score g
    s0 = select(scores, 3 * 100, geo)  # top 100: groups 100..199
    c = candidate_supports(scores, s0, ACTIONS)
    assert c[0.0] is s0
    # rho = 0.05: k = 5; drop 100..104 (lowest selected), add 99..95 (best unselected)
    assert set(s0.groups) - set(c[0.05].groups) == {100, 101, 102, 103, 104}
    assert set(c[0.05].groups) - set(s0.groups) == {95, 96, 97, 98, 99}
    assert len(set(c[0.025].groups) ^ set(s0.groups)) == 2 * 2  # floor(2.5) = 2
    assert all(cand.cost == s0.cost for cand in c.values())


@settings(max_examples=50, deadline=None)
@given(st.integers(20, 300), st.floats(0.05, 0.9), st.integers(0, 2**31 - 1))
def test_candidate_family_keeps_cost_exactly(n, frac, seed):
    geo = geometry([(4, n)])
    scores = torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    s0 = select(scores, max(4, int(frac * 4 * n)), geo)
    for rho, cand in candidate_supports(scores, s0).items():
        assert cand.cost == s0.cost and len(cand) == len(s0)
        assert len(set(cand.groups) - set(s0.groups)) == min(int(rho * len(s0) + 1e-9), n - len(s0))


def test_heterogeneous_cost_matching():
    geo = geometry([(2, 50), (4, 50)])  # costs 2 and 4
    scores = torch.arange(100, dtype=torch.float64).flip(0)  # group 0 best
    s0 = select(scores, 2 * 40, geo)  # groups 0..39, cost 2 each -> 80
    c = candidate_supports(scores, s0, (0.0, 0.1))
    assert c[0.1].cost == s0.cost
    # drop 36..39 (cost 8); best unselected are 40..49 (cost 2) -> add 40..43
    assert set(c[0.1].groups) - set(s0.groups) == {40, 41, 42, 43}


def test_heterogeneous_no_exact_match_is_an_error():
    geo = geometry([(2, 10), (3, 10)])  # ten groups of cost 2 (best), ten of cost 3
    scores = torch.arange(20, dtype=torch.float64).flip(0)
    s0 = select(scores, 20, geo)  # all cost-2 groups
    with pytest.raises(SpecError, match="no set of unselected groups costs exactly 2"):
        candidate_supports(scores, s0, (0.0, 0.1))  # frees 2, only cost-3 groups remain


def test_calibration_hand_made():
    # T=200, t=160, d=20: trigger costs 0.8 extra, non-trigger 0.1 extra
    s = [0.0, 0.01, 0.03, 0.05, 0.2, 0.0]
    g = [0.5, 0.0, 0.3, 0.2, 0.4, 0.0]
    cal = calibrate(s, g, T=200, t=160, d=20, admissible=(0.2, 0.8))
    # tau=0: trigger {1,2,3,4} (4/6): gain .9 / (4*.8 + 2*.1) = .2647
    # tau=.01: {2,3,4} (3/6): .9 / (2.4 + .3) = .3333
    # tau=.03: {3,4} (2/6): .6 / (1.6 + .4) = .3 ; tau=.05: {4} (1/6 < 20%) inadmissible
    assert cal.tau == 0.01 and cal.triggered == 3
    assert cal.gain_per_compute == pytest.approx(0.9 / 2.7)
    assert cal.precision == 1.0 and cal.total_gain == pytest.approx(1.4)


def test_calibration_reproduces_paper_table_11_arithmetic():
    # 12 instances, 5 triggered, all with positive gain: 0.9025 captured of 1.8925 available
    s = [0.1, 0.2, 0.3, 0.4, 0.5] + [0.0] * 7
    g = [0.2, 0.2, 0.2, 0.2, 0.1025] + [0.9875, 0.0025] + [0.0] * 5
    cal = calibrate(s, g, T=200, t=160, d=20, admissible=(0.2, 0.8))
    assert cal.tau == 0.0 and cal.triggered == 5 and cal.precision == 1.0
    assert cal.captured_gain == pytest.approx(0.9025)
    assert cal.captured_gain / cal.total_gain == pytest.approx(0.476882, abs=1e-6)
    assert cal.gain_per_compute == pytest.approx(0.192021, abs=1e-6)


def test_calibration_ties_prefer_larger_tau():
    # gains zero everywhere: every admissible threshold ties at 0 -> the largest admissible tau
    cal = calibrate([0.1, 0.2, 0.3, 0.4], [0, 0, 0, 0], T=20, t=10, d=2, admissible=(0.25, 0.75))
    assert cal.tau == 0.3 and cal.triggered == 1  # 1/4 = 25% is inside [25%, 75%]
    # {s > 0.2} captures the same gain as {s > 0.1} with one trigger less: higher gain per compute
    cal = calibrate([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1], T=20, t=10, d=2, admissible=(0.25, 0.75))
    assert cal.tau == 0.2 and cal.captured_gain == 2


def test_calibration_empty_admissible_set():
    with pytest.raises(
        CalibrationError, match=r"no threshold has a trigger fraction in the admissible range"
    ):
        calibrate([0.0, 0.0, 0.0], [1, 1, 1], T=200, t=160, d=20, admissible=(0.2, 0.8))


def frozen(tmp_path, **over):
    items = dict(
        tau=0.02125,
        rho_p=0.01,
        d=20,
        t=160,
        T=200,
        actions=list(ACTIONS),
        admissible_range=[0.2, 0.8],
        calibration_seeds=[73, 311, 997],
        baselines=["projected_causal"],
        benchmark="tofu",
        objective="npo",
        selection="evaluation",
        calibration_runs=[],
    )
    items.update(over)
    return freeze_decision(tmp_path, **items)


def test_frozen_decision_roundtrip_and_tamper_detection(tmp_path):
    dec = frozen(tmp_path)
    path = tmp_path / f"{dec['hash']}.json"
    assert load_decision(path)["tau"] == 0.02125
    raw = json.loads(path.read_text())
    raw["tau"] = 0.5
    path.write_text(json.dumps(raw))
    with pytest.raises(DecisionError, match=r"do not match their content hash .*tau=0.5"):
        load_decision(path)


def test_final_dirr_run_refuses_without_decision(tmp_path):
    spec = RunSpec("tofu", "forget10", "npo", "intervention_score", variant="dirr", T=20, t=10, d=2)
    with pytest.raises(DecisionError, match="need a frozen decision"):
        load_decision_for(spec, None)
    assert load_decision_for(spec.replace(split="calibration"), None) is None
    assert load_decision_for(spec, None, allow_unfrozen=True) is None


def test_calibrate_and_freeze_reads_only_complete_calibration_records(tmp_path):
    from supportbench.experiments.record import Compute, DirrResult, Provenance, RunRecord
    from supportbench.harness.calibration import calibrate_and_freeze

    def rec(seed, s, cands, split="calibration", complete=True):
        dirr = DirrResult(
            decision_hash=None,
            unfrozen=False,
            tau=None,
            probe_signal=s,
            probe_values={},
            triggered=True,
            chosen_rho=0.0,
            selection="evaluation",
            candidates=cands,
            candidates_J=cands,
            rho0_J=cands["0.0"],
            post_hoc=False,
            complete=complete,
            calibration=split == "calibration",
        )
        return RunRecord(
            run_key=f"{seed:064d}",
            status="ok",
            dirr=dirr,
            compute=Compute(),
            spec={
                "split": split,
                "variant": "dirr",
                "field": "f",
                "seed": seed,
                "T": 20,
                "t": 16,
                "d": 2,
                "rho_p": 0.01,
                "benchmark": "tofu",
                "objective": "npo",
            },
            provenance=Provenance(
                supportbench="-",
                git="-",
                torch="-",
                transformers="-",
                started_at="2026-01-01T00:00:00+00:00",
            ),
        )

    recs = [
        rec(1, 0.0, {"0.0": 1.0, "0.01": 0.5}),
        rec(2, 0.3, {"0.0": 1.0, "0.01": 1.4}),
        rec(3, 0.1, {"0.0": 2.0, "0.01": 2.1}),
        rec(4, 0.0, {"0.0": 0.0, "0.01": 0.0}),
    ]
    cal, dec = calibrate_and_freeze(recs, tmp_path, baselines=["wagle"], admissible=(0.25, 0.5))
    assert (
        cal.tau == 0.1
        and dec["calibration_seeds"] == [1, 2, 3, 4]
        and dec["baselines"] == ["wagle"]
    )
    assert dec["calibration"]["instances"][1]["gamma"] == pytest.approx(0.4)
    assert (tmp_path / f"{dec['hash']}.json").exists()
    with pytest.raises(
        CalibrationError, match="calibration reads calibration-split DIR-R runs only"
    ):
        calibrate_and_freeze(recs + [rec(5, 0.0, {"0.0": 0.0}, split="final")], tmp_path)
    with pytest.raises(CalibrationError, match="no complete candidate set"):
        calibrate_and_freeze([rec(6, 0.0, {"0.0": 0.0}, complete=False)], tmp_path)


def test_degenerate_probe_action_is_refused():
    from supportbench.harness.dirr import run_dirr

    geo = geometry([(2, 60)])
    scores = torch.arange(60, dtype=torch.float64)
    s0 = select(scores, 2 * 50, geo)  # M = 50: floor(0.01 * 50) = 0
    spec = RunSpec(
        "tofu",
        "forget10",
        "npo",
        "intervention_score",
        variant="dirr",
        T=20,
        t=10,
        d=2,
        rho_p=0.01,
        hyperparameters={"tau": 0.0},
    )
    with pytest.raises(SpecError, match=r"rho_p=0.01 swaps floor\(0.01 x 50\) = 0 groups"):
        run_dirr(
            spec,
            bench=None,
            model=None,
            roles=None,
            geometry=geo,
            scores=scores,
            support=s0,
            objective=None,
            data=None,
            config=None,
            decision=None,
            progress=False,
        )
