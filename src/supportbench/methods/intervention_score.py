"""Intervention Score (paper Eq. 9-10): rank groups by the predicted effect of the actual update.

e[g, q] = -<P_g grad l_q, P_g u0>      q in {F, R, P, N}
s(g)    = (e_F - max(e_R, e_P, 0)) / (|e_N| + eps)
"""

from dataclasses import dataclass

import torch

from supportbench.methods.base import MethodBase, option, register_method


@register_method("intervention_score")
@dataclass
class InterventionScore(MethodBase):
    eps: option(
        float, gt=0, le=1, doc="stabiliser of the neutral-effect denominator |e_N| + eps"
    ) = 1e-8
    display_name = "Intervention Score"  # how reports name it
    provenance = (
        "paper Eq. 9-10 "
        "(storage-is-not-strategy.tex, §4.2, eq:group-alignment, eq:intervention-score)"
    )
    requires = ("objective_direction", "grad:F", "grad:R", "grad:P", "grad:N")

    def effects(self, diag, geometry) -> dict[str, torch.Tensor]:
        u0 = diag.objective_direction()
        return {q: -geometry.per_group_dot(diag.role_grad(q), u0) for q in "FRPN"}

    def score(self, diag, geometry):
        e = self.effects(diag, geometry)
        harm = torch.clamp(torch.maximum(e["R"], e["P"]), min=0)
        return (e["F"] - harm) / (e["N"].abs() + self.eps)
