"""Table 1's seven quantities against hand computations (paper §5.2)."""

import numpy as np
import pytest
from scipy import stats

from supportbench.reports.stats import (
    auroc,
    controlled_quantities,
    covariate_aurocs,
    locator_quantities,
)


def test_auroc_counts_pairs_and_halves_ties():
    s = np.array([3.0, 1.0, 2.0, 2.0, 0.0])
    y = np.array([1, 1, 0, 1, 0])
    # positives 3, 1, 2 vs negatives 2, 0:
    # (3>2)(3>0)(1<2)(1>0)(2=2)(2>0) -> 1+1+0+1+0.5+1 = 4.5 of 6
    assert auroc(s, y) == pytest.approx(4.5 / 6)
    assert auroc(s, np.ones(5, dtype=int)) is None


def test_seven_quantities_by_hand():
    score = np.array([0.9, -0.2, 0.4, -0.7, -0.1, 0.3])  # > 0: storage says backbone
    inj_b = np.array([1, 0, 1, 0, 0, 1])  # pairs (0,1), (2,3), (4,5)
    pair = np.array([0, 0, 1, 1, 2, 2])
    J_b = np.array([1.0, 2.0, 1.5, 0.5, 1.0, 2.0])
    J_l = np.array([2.0, 2.5, 1.0, 1.5, 0.5, 3.0])
    nuis = np.array([[0.1], [0.3], [0.2], [0.4], [0.9], [0.5]])
    q = controlled_quantities(score, inj_b, J_b, J_l, pair, nuis)
    # positives (backbone-injected) 0.9, 0.4, 0.3 vs negatives -0.2, -0.7, -0.1: all 9 pairs ordered
    assert q["auroc"] == pytest.approx(1.0)
    # within-pair: pair 0: 0.9 > -0.2 yes; pair 1: 0.4 > -0.7 yes;
    # pair 2: target 5 (0.3) > target 4 (-0.1) yes
    assert q["direction"] == "3/3"
    diff = J_l - J_b  # [1, .5, -.5, 1, -.5, 1]
    assert q["lora_wins"] == "4/6"
    # storage picks backbone where score > 0 (0, 2, 5); best is backbone where diff < 0 (2, 4)
    # agreement: t0 no, t1 yes (lora, lora), t2 yes, t3 yes, t4 no, t5 no -> 3/6
    assert q["agree"] == "3/6" and q["agree_pct"] == pytest.approx(0.5)
    assert q["diff"] == pytest.approx(diff.mean())
    lo, hi = stats.t.interval(0.95, len(diff) - 1, loc=diff.mean(), scale=stats.sem(diff))
    assert q["diff_ci"] == pytest.approx((lo, hi))
    assert q["corr"] == pytest.approx(stats.pearsonr(score, diff)[0])
    X = np.column_stack([np.ones(6), nuis[:, 0]])
    resid = score - X @ np.linalg.lstsq(X, score, rcond=None)[0]
    pos, neg = resid[inj_b == 1], resid[inj_b == 0]
    want = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert q["resid_auroc"] == pytest.approx(want)


def test_covariate_aurocs_by_hand():
    y = np.array([1, 1, 0, 0])
    cov = {
        "nuisance_nll": np.array([2.0, 1.5, 0.5, 1.5]),  # pos 2.0, 1.5 vs neg 0.5, 1.5
        "nuisance_grad_norm": np.array([0.1, 0.2, 0.3, 0.4]),
        "nuisance_tokens": np.array([2.0, 2.0, 2.0, 2.0]),
    }
    got = covariate_aurocs(cov, y)
    # nll: (2>.5)(2>1.5)(1.5>.5)(1.5=1.5) -> 3.5/4; grad: every
    # positive below every negative -> 0; constant -> 1/2
    assert got == {
        "nuisance_grad_norm": 0.0,
        "nuisance_nll": pytest.approx(3.5 / 4),
        "nuisance_tokens": 0.5,
    }
    assert list(got) == sorted(got)


def test_locator_quantities_are_table_1s_first_three_rows():
    y = np.array([1, 0, 1, 0])
    pair = np.array([0, 0, 1, 1])
    nuis = np.array([[0.3], [0.1], [0.2], [0.6]])
    scores = {"b": np.array([0.5, 0.7, 0.2, -0.1]), "a": np.array([1.0, -1.0, 1.0, -1.0])}
    q = locator_quantities(scores, y, pair, nuis)
    assert list(q) == ["a", "b"]
    assert q["a"]["auroc"] == 1.0 and q["a"]["direction"] == "2/2"
    # b: positives .5, .2 vs negatives .7, -.1 -> (.5<.7)(.5>-.1)(.2<.7)(.2>-.1) = 2/4
    # pairs: pair 0: .5 < .7, pair 1: .2 > -.1
    assert q["b"]["auroc"] == 0.5 and q["b"]["direction"] == "1/2"
    full = controlled_quantities(scores["b"], y, np.zeros(4), np.ones(4), pair, nuis)
    assert {k: full[k] for k in q["b"]} == q["b"]


def test_a_constant_covariate_leaves_the_residualized_auroc_unchanged():
    """The answer length (2 tokens for every target) is collinear with the intercept: dropping it
    from the regression cannot change the residuals (only float rounding)."""
    rng = np.random.default_rng(0)
    s, y, nll = rng.normal(size=12), np.tile([1, 0], 6), rng.normal(size=12)
    with_tokens = controlled_quantities(
        s, y, np.zeros(12), np.ones(12), None, np.column_stack([nll, np.full(12, 2.0)])
    )
    without = controlled_quantities(s, y, np.zeros(12), np.ones(12), None, nll[:, None])
    assert with_tokens["resid_auroc"] == without["resid_auroc"]


def test_locators_and_covariates_from_the_registry(tmp_path):
    """Each run carries every locator's score as ``locator:<name>``; the report reads them per
    target, the legacy constant ``nuisance_tokens`` is no covariate, and a covariate that encodes
    the label (own AUROC outside 0.5 +- COVARIATE_BAND) is reported but not regressed on."""
    from supportbench.registry import synthetic as syn
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect
    from supportbench.reports.tables import Context, controlled_locators, controlled_main

    score_a, score_b = [0.9, -0.2, 0.4, -0.7], [0.1, 0.3, -0.5, -0.6]
    nll, inj = [0.5, 0.1, 0.7, 0.2], [1, 0, 1, 0]
    grad = [
        0.2,
        0.4,
        0.6,
        0.5,
    ]  # positives .2, .6 vs negatives .4, .5: AUROC 2/4 = 0.5, carries no label
    J = {"backbone": [0.1, 0.5, 0.2, 0.4], "lora": [0.6, 0.7, 0.1, 0.9]}
    for k in range(4):
        comps = {
            "storage_score": score_a[k],
            "locator:a": score_a[k],
            "locator:b": score_b[k],
            "injected_backbone": float(inj[k]),
            "pair": float(k // 2),
            "nuisance_nll": nll[k],
            "nuisance_grad_norm": grad[k],
            "nuisance_tokens": 2.0,
        }
        for m in ("backbone", "lora"):
            syn.write(
                tmp_path / "res",
                syn.record(
                    benchmark="controlled", field=f"t{k:02d}", method=m, J=J[m][k], components=comps
                ),
            )
    con = connect(tmp_path / "r.duckdb")
    ingest(con, tmp_path / "res")
    ctx = Context.from_registry(con)
    got = controlled_locators(ctx)
    X = np.array(grad)[:, None]  # nll encodes the label (AUROC 1.0): left out
    want = locator_quantities(
        {"a": np.array(score_a), "b": np.array(score_b)}, np.array(inj), np.array([0, 0, 1, 1]), X
    )
    assert got["locators"] == want
    # nll: positives .5, .7 vs negatives .1, .2 -> all four ordered
    assert got["covariates"] == {"nuisance_grad_norm": 0.5, "nuisance_nll": 1.0}
    assert got["residualized_on"] == ["nuisance_grad_norm"]
    main = controlled_main(ctx)
    assert main["resid_auroc"] == want["a"]["resid_auroc"] and main["auroc"] == want["a"]["auroc"]


def test_the_text_of_table_1_is_read_from_the_registry(tmp_path):
    """``controlled_text`` (what ``run --benchmark controlled`` prints and ``controlled.md`` holds)
    shows the frozen decision the runs name and Table 1's quantities as ``controlled_main`` computes
    them from the same registry."""
    from datetime import UTC, datetime

    from supportbench.experiments import controlled_decision as cd
    from supportbench.registry import synthetic as syn
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect
    from supportbench.reports.console import controlled_text
    from supportbench.reports.tables import Context, controlled_main

    dec = cd.freeze_controlled(
        tmp_path / "res" / "decisions",
        experiment="synthetic",
        benchmark="controlled",
        objective="npo",
        model="tiny-llama",
        T=200,
        seed=0,
        theta0_hash="f" * 16,
        calibration_targets=["c00", "c01"],
        locator_aurocs={"a": 1.0, "b": 0.5},
        primary_locator="a",
        lr_grid=list(cd.LR_GRID),
        mean_J={"backbone": {"0.01": 1.0, "0.1": 0.5}, "lora": {"0.01": 2.0}},
        lr={"backbone": 0.01, "lora": 0.01},
        recall_threshold=cd.RECALL_THRESHOLD,
        calibration_runs=[],
        # per-target J behind each mean: backbone at 0.01 is 1.0 +- t(0.975, 1) * 0.7071 / sqrt 2
        # = 1.0 +- 12.7062 * 0.5; at 0.1 the two targets agree (a zero-width interval); lora's
        # 0.01 has one finished target (no interval)
        calibration_J={
            "backbone": {"0.01": {"c00": 0.5, "c01": 1.5}, "0.1": {"c00": 0.5, "c01": 0.5}},
            "lora": {"0.01": {"c00": 2.0}},
        },
    )
    score, inj = [0.9, -0.2, 0.4, -0.7], [1, 0, 1, 0]
    J = {"backbone": [0.1, 0.5, 0.2, 0.4], "lora": [0.6, 0.7, 0.1, 0.9]}
    now = datetime.now(UTC).isoformat()
    for k in range(4):
        comps = {"storage_score": score[k], "locator:a": score[k], "locator:b": -score[k],
                 "injected_backbone": float(inj[k]), "pair": float(k // 2)}  # fmt: skip
        for m in ("backbone", "lora"):
            syn.write(
                tmp_path / "res",
                syn.record(benchmark="controlled", field=f"t{k:02d}", method=m, J=J[m][k],
                           components=comps, started_at=now,
                           hyperparameters={"benchmark.decision": dec["hash"]}),
            )  # fmt: skip
    con = connect(tmp_path / "r.duckdb")
    ingest(con, tmp_path / "res")
    ctx = Context.from_registry(con)
    text, q = controlled_text(ctx), controlled_main(ctx)
    assert text[0] == (
        f"frozen controlled decision {dec['hash'][:12]} (frozen_at {dec['frozen_at']}, theta_0 "
        "ffffffffffff), from calibration targets c00, c01:"
    )
    assert text[1:5] == [
        "  calibration AUROC per locator: a 1.00000, b 0.50000",
        "  primary locator: a",
        "  backbone: lr 0.01   (mean calibration J per lr [95% t interval over the calibration "
        "targets]: 0.01 +1.0000 [-5.3531, +7.3531], 0.1 +0.5000 [+0.5000, +0.5000])",
        "  lora: lr 0.01   (mean calibration J per lr [95% t interval over the calibration "
        "targets]: 0.01 +2.0000)",
    ]
    assert q["decision"] == dec["hash"] and q["primary_locator"] == "a"
    row = {line[:42].strip(): line[42:].split() for line in text if line.startswith("  ")}
    assert row["storage/best-intervention agreement"][-1] == str(q["agree"])
    assert row["LoRA intervention wins"][-1] == str(q["lora_wins"])
    assert row["LoRA - backbone paired difference"][-1] == f"{q['diff']:+.4f}"
    assert row["storage AUROC (learned targets)"] == [f"{q['auroc']:.5f}"]


def test_a_decision_without_per_target_J_says_its_means_have_no_interval(tmp_path):
    """A decision frozen before per-target J was recorded prints its means and says why they carry
    no interval, rather than printing bare means as if they had none to give."""
    from supportbench.experiments import controlled_decision as cd
    from supportbench.experiments.record import ControlledDecision
    from supportbench.reports.console import decision_lines

    dec = cd.freeze_controlled(
        tmp_path / "decisions", experiment="x", benchmark="controlled", objective="npo",
        model="tiny-llama", T=20, seed=0, theta0_hash="f" * 16, calibration_targets=["c00"],
        locator_aurocs={"a": 1.0}, primary_locator="a", lr_grid=list(cd.LR_GRID),
        mean_J={"backbone": {"0.01": 1.0}}, lr={"backbone": 0.01},
        recall_threshold=cd.RECALL_THRESHOLD, calibration_runs=[],
    )  # fmt: skip
    lines = decision_lines(ControlledDecision.from_dict(dec))
    assert lines[-2:] == [
        "  backbone: lr 0.01   (mean calibration J per lr: 0.01 +1.0000)",
        "  (the decision records no per-target calibration J: no intervals)",
    ]
