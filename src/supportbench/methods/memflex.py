"""MemFlex (Tian et al. 2024, KnowUnDo): units whose random-label forget gradient is unaligned with
the retain gradient (cos < mu) and large (mean |g_u| > sigma) are eligible; here a unit is a column.
Eligible columns rank first, by mean |g_u|; the rest follow in the same order."""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase, demote, option, register_method


@register_method("memflex")
@dataclass
class MemFlex(MethodBase):
    mu: option(float, ge=-1, le=1, doc="cosine threshold: eligible when cos(g_u, g_r) < mu") = 0.92
    sigma: option(
        float, ge=0, le=1, doc="magnitude threshold on mean |g_u| (rescaled to columns)"
    ) = 6e-4
    display_name = "MemFlex"  # how reports name it
    provenance = (
        "code: zjunlp/KnowUnDo pretrain/localization.py: eligible iff cos(g_u, g_r) < mu=0.92 and "
        "mean|g_u| > sigma=6e-4 on random-label gradients (3 copies, ~half the answer tokens "
        "replaced; compute_info at batch size 1 divided by the dataset length: every example's "
        "mean-token gradient weighs the same). Defined here: unit = column instead of a LoRA "
        "tensor; sigma rescaled to the column geometry as sigma/6e-4 x median_j mean|g_u,j| (at "
        "the default, the median column)"
    )
    requires = ("random_label_grad:F", "random_label_grad:R")

    def score(self, diag, geometry):
        gu, gr = diag.random_label_grad("F"), diag.random_label_grad("R")
        dot = geometry.per_group_dot(gu, gr)
        cos = dot / (geometry.per_group_norm(gu) * geometry.per_group_norm(gr)).clamp_min(1e-30)
        mag = geometry.per_group_sum({k: v.abs() for k, v in gu.items()}) / geometry.costs.double()
        threshold = self.sigma / 6e-4 * float(mag.median())
        eligible = (cos < self.mu) & (mag > threshold)
        return demote(mag, ~eligible)
