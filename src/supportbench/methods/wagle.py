"""WAGLE (Jia et al. 2024): weight attribution, element score |(theta - g_r / mu) * g_f|, gradients
summed over examples (each example's mean-token gradient), mu = 1e-6; column score = sum over the
column's elements."""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase, option, register_method


@register_method("wagle")
@dataclass
class Wagle(MethodBase):
    mu: option(float, gt=0, le=1, doc="weight of the retain gradient: |(theta - g_r/mu) g_f|") = (
        1e-6
    )
    display_name = "WAGLE"  # how reports name it
    provenance = (
        "code: OPTML-Group/WAGLE src/unlearn/generate_mask.py (snip_advanced): element score "
        "|(theta - g_r/mu) * g_f|, mu=1e-6, gradients summed over batches of size 1 as its TOFU "
        "configs run it (a sum of per-example mean-token gradients, independent of the diagnostics "
        "batch size); column adaptation (sum over the column) defined here"
    )
    requires = ("grad_sum:F", "grad_sum:R", "weights")

    def score(self, diag, geometry):
        gf, gr = diag.role_grad("F", "sum"), diag.role_grad("R", "sum")
        w = geometry.weights()
        elem = {k: ((w[k].double() - gr[k].double() / self.mu) * gf[k].double()).abs() for k in w}
        return geometry.per_group_sum(elem)
