"""Storage (outcome-blind control, defined here): first-order ablation effect of column j on the
forget NLL, |sum_i W_ij * dNLL_F/dW_ij| (the change in l_F if column j were zeroed, to first
order)."""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase, register_method


@register_method("storage")
@dataclass
class Storage(MethodBase):
    display_name = "Storage"  # how reports name it
    provenance = (
        "defined here (paper §5.1 control; reference/methods.md suggestion): "
        "|sum_i W_ij g_F,ij|, first-order ablation effect on the forget NLL"
    )
    requires = ("grad:F", "weights")

    def score(self, diag, geometry):
        return geometry.per_group_dot(geometry.weights(), diag.role_grad("F")).abs()
