"""The objectives' loss formulas (torch); ``objectives`` holds their settings and defaults.

NPO     L_f = -(2/beta) * mean_i log sigmoid(beta * (NLL_theta(i) - NLL_ref(i)))  (open-unlearning
        ``npo.py``), NLL summed over answer tokens, reference = theta_0 (``reference_nll``, once)
SimNPO  L_f = -(2/beta) * mean_i log sigmoid(beta * (NLL_theta(i)/|y_i| - delta))  (``simnpo.py``)
GA, GradDiff's forget term: -(mean-token NLL)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from supportbench.unlearning.data import TokenizedSet, dataset_nll


def npo_forget_loss(nll_sum: torch.Tensor, ref_nll_sum: torch.Tensor, beta: float) -> torch.Tensor:
    """-(2/beta) * mean log sigmoid(beta * (nll - ref_nll)) over sequences."""
    return -(2.0 / beta) * F.logsigmoid(beta * (nll_sum - ref_nll_sum)).mean()


def simnpo_forget_loss(
    nll_sum: torch.Tensor, n_tokens: torch.Tensor, beta: float, delta: float
) -> torch.Tensor:
    """-(2/beta) * mean log sigmoid(beta * (nll/|y| - delta)) over sequences."""
    return -(2.0 / beta) * F.logsigmoid(beta * (nll_sum / n_tokens.clamp(min=1) - delta)).mean()


def mean_token_nll(nll_sum: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    return nll_sum.sum() / n_tokens.sum().clamp(min=1)


@torch.no_grad()
def reference_nll(model, forget: TokenizedSet, batch_size: int = 64) -> torch.Tensor:
    """NPO's reference: summed answer NLL at theta_0 for every forget sequence, computed once."""
    return dataset_nll(model, forget, batch_size)[0]
