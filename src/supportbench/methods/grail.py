"""GRAIL (Kim et al. 2025): per-tensor z-scores of random-label mean gradients; a column in the
top-UR fraction of its tensor for the unlearn gradient **and** for the retain gradient is frozen
(OP-UR) and ranked last. Percentiles are taken per tensor, as upstream (np.percentile, ``>=`` the
threshold)."""

from dataclasses import dataclass

import torch

from supportbench.methods.base import MethodBase, demote, option, register_method


def column_abs_z(geometry, grads) -> tuple[torch.Tensor, torch.Tensor]:
    """Per column, the mean |z| of its elements (z standardised over the whole tensor), and per
    column whether its tensor is degenerate (std < 1e-12: upstream selects nothing there)."""
    z, flat = {}, {}
    for k, g in grads.items():
        g = g.double()
        std = g.std()
        flat[k] = bool(std < 1e-12)
        z[k] = torch.zeros_like(g) if flat[k] else ((g - g.mean()) / std).abs()
    degenerate = torch.cat([torch.full((t.n,), flat[t.name]) for t in geometry.tensors])
    return geometry.per_group_sum(z) / geometry.costs.double(), degenerate


def top_per_tensor(
    geometry, x: torch.Tensor, degenerate: torch.Tensor, frac: float
) -> torch.Tensor:
    """Columns at or above their tensor's (1 - frac) percentile (linear interpolation, numpy's
    default)."""
    out = torch.zeros(len(x), dtype=torch.bool)
    for t in geometry.tensors:
        part = x[t.offset : t.offset + t.n]
        if not bool(degenerate[t.offset]):
            out[t.offset : t.offset + t.n] = part >= torch.quantile(part, 1 - frac)
    return out


@register_method("grail")
@dataclass
class Grail(MethodBase):
    unlearn_ratio: option(
        float, gt=0, le=1, doc="share of each tensor's top-attributed scalars frozen"
    ) = 0.1
    display_name = "GRAIL"  # how reports name it
    provenance = (
        "code: piso7/GRAIL llm_localization/grail_parameter_wise_localization.py "
        "(get_top_indices_zscore): per-tensor z-score of the random-label mean signed gradients "
        "(KnowUnDo's compute_info), abs; OP-UR = top-UR(unlearn) ∩ top-UR(retain), both at UR=0.1, "
        "percentile per tensor, frozen. RR (0.2) only builds upstream's retention-step mask, which "
        "support selection does not use. Column version defined here: an element percentile "
        "becomes a column percentile of mean |z| within each tensor; frozen columns rank last, the "
        "rest by mean |z| of the unlearn gradient (z is per tensor, so tensors compare on one "
        "scale)"
    )
    requires = ("random_label_grad:F", "random_label_grad:R")

    def score(self, diag, geometry):
        zf, flat_f = column_abs_z(geometry, diag.random_label_grad("F"))
        zr, flat_r = column_abs_z(geometry, diag.random_label_grad("R"))
        frozen = top_per_tensor(geometry, zf, flat_f, self.unlearn_ratio) & top_per_tensor(
            geometry, zr, flat_r, self.unlearn_ratio
        )
        return demote(zf, frozen)
