import math

import pytest
import torch
from scipy import stats

from supportbench.benchmarks import evaluators as ev


def test_terminal_score_clips_collateral_at_zero():
    out = ev.terminal_score(
        torch.tensor([2.0, 4.0]), torch.tensor([-1.0, -3.0]), torch.tensor([0.5, 1.5])
    )
    # G_F = 3; retain mean -2 -> contributes 0; protected mean 1 -> D_coll = 1; J = 2
    assert (out["J"], out["G_F"], out["D_coll"]) == (2.0, 3.0, 1.0)


def test_probability_and_normalised_probability():
    p = ev.probability(torch.tensor([math.log(2) * 3]), torch.tensor([3]))
    assert p.item() == pytest.approx(0.5)
    # (avg NLL of probability p)
    L = lambda *p: -torch.log(torch.tensor(p, dtype=torch.float64))  # noqa: E731
    n = ev.normalised_probability(L(0.5), L(0.25, 0.125, 0.125).view(1, 3))
    assert n.item() == pytest.approx(0.5 / (1.0 + 1e-10), rel=1e-12)


def test_truth_ratio_both_aggregations():
    p_correct = torch.tensor([0.5, 0.1], dtype=torch.float64)
    p_wrong = torch.tensor([[0.25, 0.25], [0.1, 0.4]], dtype=torch.float64)
    tr = ev.truth_ratio(
        -p_correct.log(), -p_wrong.log()
    )  # geomeans 0.25, 0.2 -> tr = 0.5, 2.0 (up to the 1e-10)
    torch.testing.assert_close(tr, torch.tensor([0.5, 2.0], dtype=torch.float64))
    assert ev.truth_ratio_forget(tr) == pytest.approx((0.5 + 0.5) / 2)
    assert ev.truth_ratio_keep(tr) == pytest.approx((0.5 + 0.0) / 2)


def test_forget_quality_is_ks_pvalue():
    a, b = [0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]
    # disjoint samples of size 4: D = 1, exact two-sided p = 2 / C(8, 4) = 2/70
    assert ev.forget_quality(a, b) == pytest.approx(2 / 70)
    assert ev.forget_quality(a, a) == pytest.approx(1.0)
    assert ev.forget_quality(a, b) == pytest.approx(stats.ks_2samp(a, b).pvalue)


def test_model_utility_harmonic_mean():
    vals = [1.0, 0.5, 0.25, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert ev.model_utility(vals) == pytest.approx(9 / (6 + 1 + 2 + 4))
    assert ev.model_utility(vals[:-1] + [0.0]) == 0.0


def test_rouge_l_recall():
    got = ev.rouge_l_recall(["the cat sat", "dogs running"], ["the cat sat on the mat", "dog runs"])
    assert got[0] == pytest.approx(3 / 6)
    assert got[1] == pytest.approx(
        1.0
    )  # stemmer: dogs->dog, running->run, runs->run: 2/2 reference tokens
    assert ev.rouge_l_recall(["cats"], ["dog runs"])[0] == 0.0


def test_bounded_terminal_score_by_hand():
    # forget drops 0.5, -0.1 -> G_F_bounded 0.2; retain mean
    # drop 0.1 -> counts; protected mean -0.05 -> clamped
    out = ev.bounded_terminal_score(
        torch.tensor([0.5, -0.1]), torch.tensor([0.3, -0.1]), torch.tensor([-0.05])
    )
    assert out["G_F_bounded"] == pytest.approx(0.2)
    assert out["D_coll_bounded"] == pytest.approx(0.1)
    assert out["J_bounded"] == pytest.approx(0.1)
    assert (out["retain_prob_drop"], out["protected_prob_drop"]) == (
        pytest.approx(0.1),
        pytest.approx(-0.05),
    )
    # from probabilities: theta_0 answers with p = 0.8,
    # the model with p = exp(-mean token NLL) = 0.2
    nll0, n = torch.tensor([2 * -math.log(0.8)]), torch.tensor([2])
    drop = ev.probability(nll0, n) - ev.probability(torch.tensor([2 * -math.log(0.2)]), n)
    worst = ev.bounded_terminal_score(-torch.ones(1), torch.ones(1), torch.ones(1))  # the bounds
    assert ev.bounded_terminal_score(drop, drop[:0], drop[:0])["J_bounded"] == pytest.approx(0.6)
    assert (worst["G_F_bounded"], worst["D_coll_bounded"], worst["J_bounded"]) == (-1.0, 2.0, -3.0)
