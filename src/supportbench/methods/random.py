"""Random (outcome-blind control, defined here): i.i.d. uniform scores from the run's seed."""

from dataclasses import dataclass

import torch

from supportbench.methods.base import MethodBase, register_method


@register_method("random")
@dataclass
class Random(MethodBase):
    display_name = "Random"  # how reports name it
    provenance = (
        "defined here (paper §5.1 control; no formula given): "
        "i.i.d. U(0,1) per column, seeded by the run seed"
    )
    requires = ()

    def score(self, diag, geometry):
        g = torch.Generator().manual_seed(int(diag.seed))
        return torch.rand(geometry.n_groups, generator=g, dtype=torch.float64)
