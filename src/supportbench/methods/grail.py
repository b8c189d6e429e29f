"""GRAIL (Kim et al. 2025): per-tensor z-scores of random-label mean gradients; columns in the forget
top-UR fraction that are also in the retain top-RR fraction are frozen (OP-UR) -> ranked last."""

from dataclasses import dataclass

import torch

from supportbench.methods.base import MethodBase, demote, register_method


def _column_abs_z(geometry, grads) -> torch.Tensor:
    z = {}
    for k, g in grads.items():
        g = g.double()
        z[k] = ((g - g.mean()) / g.std().clamp_min(1e-30)).abs()
    return geometry.per_group_sum(z) / geometry.costs.double()


def _top(x: torch.Tensor, frac: float) -> torch.Tensor:
    k = max(1, int(round(frac * len(x))))
    mask = torch.zeros(len(x), dtype=torch.bool)
    mask[torch.argsort(-x, stable=True)[:k]] = True
    return mask


@register_method("grail")
@dataclass
class Grail(MethodBase):
    unlearn_ratio: float = 0.1
    retain_ratio: float = 0.2
    provenance = ("code: piso7/GRAIL llm_localization/grail_parameter_wise_localization.py: per-tensor z-score "
                  "of mean signed grads, abs; top UR=0.1 (unlearn) and RR=0.2 (retain); overlap frozen (OP-UR). "
                  "Column version defined here: mean |z| per column, overlap ranked last")
    requires = ("random_label_grad:F", "random_label_grad:R")

    def score(self, diag, geometry):
        zf = _column_abs_z(geometry, diag.random_label_grad("F"))
        zr = _column_abs_z(geometry, diag.random_label_grad("R"))
        frozen = _top(zf, self.unlearn_ratio) & _top(zr, self.retain_ratio)
        return demote(zf, frozen)
