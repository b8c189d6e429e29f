"""FILA-relative Fisher (Cha et al. 2025, LoKU): I = (F_f/N_f) / (1e-5 + F_r/N_r) per element with
F = sum over micro-batches of n_tokens * grad^2 (micro-batch 4, upstream's); column score = sum of
I."""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase, option, register_method
from supportbench.methods.diagnostics import FISHER_BATCH


@register_method("fila")
@dataclass
class Fila(MethodBase):
    eps: option(float, gt=0, le=1, doc="stabiliser of the retain Fisher in the ratio") = 1e-5
    batch_size: option(int, ge=1, le=4096, doc="Fisher micro-batch size (upstream: 4)") = (
        FISHER_BATCH
    )
    display_name = "FILA"  # how reports name it
    provenance = (
        "code: csm9493/efficient-llm-unlearning TOFU/measure_importance.py, TOFU/forget.py: "
        "relative Fisher (F_f/N_f)/(1e-5 + F_r/N_r), F = sum_batches n_tokens * grad^2 at "
        "upstream's batch size 4 (the Fisher depends on it by construction, so it is this method's "
        "default, not the diagnostics batch size); FILA reduces over rows (sqrt) for its LoRA init "
        "— column-sum adaptation defined here"
    )
    requires = (f"fisher:F@{FISHER_BATCH}", f"fisher:R@{FISHER_BATCH}")

    def __post_init__(self):
        self.requires = (f"fisher:F@{self.batch_size}", f"fisher:R@{self.batch_size}")

    def score(self, diag, geometry):
        ff, fr = diag.fisher("F", self.batch_size), diag.fisher("R", self.batch_size)
        return geometry.per_group_sum({k: ff[k].double() / (self.eps + fr[k].double()) for k in ff})
