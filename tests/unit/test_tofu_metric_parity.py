"""TOFU metrics against open-unlearning's definitions (src/evals/metrics/memorization.py,
utility.py), written out here in numpy exactly as upstream computes them, fed the same per-item
mean-token NLLs over the ranges users hit: a fresh model (0-5 nats), an unlearned one (0-30) and a
collapsed one (15-800)."""

import numpy as np
import pytest
import scipy as sc
import torch

from supportbench.benchmarks import evaluators as ev

RANGES = [(0.0, 5.0), (0.0, 30.0), (15.0, 800.0)]


# ---- open-unlearning, transcribed (float64 numpy, as upstream) -----------------------------------
def ou_probability_w_options(avg_correct, avg_wrong):
    correct = np.exp(-avg_correct)
    wrong = np.sum(np.exp(-avg_wrong), axis=1)
    return correct / (correct + wrong + 1e-10)


def ou_truth_ratios(avg_correct, avg_wrong):
    correct_prob = np.exp(-avg_correct)
    wrong_prob = np.exp(-np.mean(avg_wrong, axis=1))  # aggregate_to_1D over the perturbed answers
    return wrong_prob / (correct_prob + 1e-10)


def ou_closer_to_1_better(arr):
    return np.mean(np.minimum(arr, 1 / (arr + 1e-10)))


def ou_true_better(arr):
    return np.mean(np.maximum(0, 1 - arr))


def draws(lo, hi, seed, n=400, k=5):
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, n), rng.uniform(lo, hi, (n, k))


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)


@pytest.mark.parametrize("lo, hi", RANGES)
def test_metrics_equal_open_unlearning(lo, hi):
    c, w = draws(lo, hi, seed=int(hi))
    tc, tw = torch.from_numpy(c), torch.from_numpy(w)
    got_p = ev.normalised_probability(tc, tw).numpy()
    got_tr = ev.truth_ratio(tc, tw).numpy()
    close(got_p, ou_probability_w_options(c, w))
    close(got_tr, ou_truth_ratios(c, w))
    assert np.isfinite(got_p).all() and np.isfinite(got_tr).all()
    f, k = (
        ev.truth_ratio_forget(ev.truth_ratio(tc, tw)),
        ev.truth_ratio_keep(ev.truth_ratio(tc, tw)),
    )
    close(f, ou_closer_to_1_better(ou_truth_ratios(c, w)))
    close(k, ou_true_better(ou_truth_ratios(c, w)))
    assert np.isfinite([f, k]).all()
    # forget quality: KS p-value between two models' forget
    # truth ratios, as upstream (scipy.stats.ks_2samp)
    c2, w2 = draws(lo, hi, seed=int(hi) + 1)
    fq = ev.forget_quality(
        got_tr.tolist(), ev.truth_ratio(torch.from_numpy(c2), torch.from_numpy(w2)).tolist()
    )
    close(fq, sc.stats.ks_2samp(ou_truth_ratios(c, w), ou_truth_ratios(c2, w2)).pvalue)


@pytest.mark.parametrize("avg_nll", [1e-3, 23.0, 30.0, 300.0, 690.0, 800.0])
def test_extreme_probabilities_down_to_underflow(avg_nll):
    """Where exp(-NLL) is ~1e-300 or underflows to 0 in float64 the 1e-10 decides; no NaN, same
    value."""
    c = np.full(3, avg_nll)
    w = np.stack([np.full(3, avg_nll * 0.5), np.full(3, avg_nll), np.full(3, avg_nll * 2)], 1)
    close(ev.truth_ratio(torch.from_numpy(c), torch.from_numpy(w)).numpy(), ou_truth_ratios(c, w))
    close(
        ev.normalised_probability(torch.from_numpy(c), torch.from_numpy(w)).numpy(),
        ou_probability_w_options(c, w),
    )


def test_the_epsilons_matter_after_unlearning():
    """The audit's case: once probabilities fall below ~1e-4 the 1e-10 terms change the result."""
    c = np.array([25.0, 28.0])  # p_correct ~ 1e-11..1e-12 < 1e-10
    w = np.array([[20.0, 22.0], [26.0, 27.0]])
    tr = ev.truth_ratio(torch.from_numpy(c), torch.from_numpy(w)).numpy()
    naive = np.exp(-w.mean(1)) / np.exp(-c)
    assert not np.allclose(tr, naive, rtol=1e-3)
    close(tr, ou_truth_ratios(c, w))
