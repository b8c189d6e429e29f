"""FILA-relative Fisher (Cha et al. 2025, LoKU): I = (F_f/N_f) / (1e-5 + F_r/N_r) per element with
F = sum_batches n_tokens * grad^2; column score = sum of I over the column."""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase, register_method


@register_method("fila")
@dataclass
class Fila(MethodBase):
    eps: float = 1e-5
    provenance = ("code: csm9493/efficient-llm-unlearning TOFU/measure_importance.py, TOFU/forget.py: relative "
                  "Fisher (F_f/N_f)/(1e-5 + F_r/N_r); FILA reduces over rows (sqrt) for its LoRA init — "
                  "column-sum adaptation defined here")
    requires = ("fisher:F", "fisher:R")

    def score(self, diag, geometry):
        ff, fr = diag.fisher("F"), diag.fisher("R")
        return geometry.per_group_sum({k: ff[k].double() / (self.eps + fr[k].double()) for k in ff})
