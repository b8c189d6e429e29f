"""Evaluation metrics: the terminal score J (paper Eq. 19) and TOFU's metrics with open-unlearning's
definitions (src/evals/metrics). Pure functions on per-item numbers, so each is checked by hand."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy import stats


def terminal_score(forget_delta: torch.Tensor, retain_delta: torch.Tensor, protected_delta: torch.Tensor) -> dict:
    """J = G_F - D_coll with G_F = mean forget NLL increase, D_coll = max(0, mean retain increase) +
    max(0, mean protected increase); increases are summed answer NLL relative to theta_0 (nats)."""
    g_f = float(forget_delta.double().mean())
    r = float(retain_delta.double().mean()) if len(retain_delta) else 0.0
    p = float(protected_delta.double().mean()) if len(protected_delta) else 0.0
    d = max(0.0, r) + max(0.0, p)
    return {"J": g_f - d, "G_F": g_f, "D_coll": d, "retain_increase": r, "protected_increase": p}


def probability(nll_sum: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    """Per item: exp(-mean answer-token NLL)."""
    return torch.exp(-nll_sum.double() / n_tokens.double().clamp(min=1))


def normalised_probability(p_true: torch.Tensor, p_perturbed: torch.Tensor) -> torch.Tensor:
    """Real authors / world facts: p_true / (p_true + sum_k p_perturbed_k); p_perturbed is [N, K]."""
    return p_true / (p_true + p_perturbed.sum(1))


def truth_ratio(p_correct: torch.Tensor, p_perturbed: torch.Tensor) -> torch.Tensor:
    """tr = exp(-mean_k NLL_avg(perturbed_k)) / exp(-NLL_avg(correct)) = geomean(p_perturbed) / p_correct."""
    return torch.exp(torch.log(p_perturbed).mean(1)) / p_correct


def truth_ratio_forget(tr: torch.Tensor) -> float:
    """Forget set: mean(min(tr, 1/tr)) (closer to 1 = indistinguishable)."""
    return float(torch.minimum(tr, 1.0 / tr).mean())


def truth_ratio_keep(tr: torch.Tensor) -> float:
    """Retain / real authors / world facts: mean(max(0, 1 - tr))."""
    return float(torch.clamp(1.0 - tr, min=0.0).mean())


def forget_quality(tr_unlearned: Sequence[float], tr_retain_model: Sequence[float]) -> float:
    """KS-test p-value between truth-ratio distributions of the unlearned and the retain model."""
    return float(stats.ks_2samp(np.asarray(tr_unlearned), np.asarray(tr_retain_model)).pvalue)


def rouge_l_recall(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return [scorer.score(ref, pred)["rougeL"].recall for pred, ref in zip(predictions, references)]


def model_utility(values: Sequence[float]) -> float:
    """Harmonic mean of the nine retain / real-author / world-fact values; 0 if any value is 0."""
    v = np.asarray(values, dtype=np.float64)
    if (v <= 0).any():
        return 0.0
    return float(stats.hmean(v))
