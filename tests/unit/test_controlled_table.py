"""Table 1's seven quantities against hand computations (paper §5.2)."""

import numpy as np
import pytest
from scipy import stats

from supportbench.reports.stats import auroc, controlled_quantities


def test_auroc_counts_pairs_and_halves_ties():
    s = np.array([3.0, 1.0, 2.0, 2.0, 0.0])
    y = np.array([1, 1, 0, 1, 0])
    # positives 3, 1, 2 vs negatives 2, 0: (3>2)(3>0)(1<2)(1>0)(2=2)(2>0) -> 1+1+0+1+0.5+1 = 4.5 of 6
    assert auroc(s, y) == pytest.approx(4.5 / 6)
    assert auroc(s, np.ones(5, dtype=int)) is None


def test_seven_quantities_by_hand():
    score = np.array([0.9, -0.2, 0.4, -0.7, -0.1, 0.3])       # > 0: storage says backbone
    inj_b = np.array([1, 0, 1, 0, 0, 1])                       # pairs (0,1), (2,3), (4,5)
    pair = np.array([0, 0, 1, 1, 2, 2])
    J_b = np.array([1.0, 2.0, 1.5, 0.5, 1.0, 2.0])
    J_l = np.array([2.0, 2.5, 1.0, 1.5, 0.5, 3.0])
    nuis = np.array([[0.1], [0.3], [0.2], [0.4], [0.9], [0.5]])
    q = controlled_quantities(score, inj_b, J_b, J_l, pair, nuis)
    # positives (backbone-injected) 0.9, 0.4, 0.3 vs negatives -0.2, -0.7, -0.1: all 9 pairs ordered
    assert q["auroc"] == pytest.approx(1.0)
    # within-pair: pair 0: 0.9 > -0.2 yes; pair 1: 0.4 > -0.7 yes; pair 2: target 5 (0.3) > target 4 (-0.1) yes
    assert q["direction"] == "3/3"
    diff = J_l - J_b                                           # [1, .5, -.5, 1, -.5, 1]
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
