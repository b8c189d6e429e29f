"""Activation (outcome-blind control, defined here): mean |h_j| over forget answer positions,
h = input of the down-projection."""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase, register_method


@register_method("activation")
@dataclass
class Activation(MethodBase):
    display_name = "Activation"  # how reports name it
    provenance = (
        "defined here (paper §5.1 control; no formula given): mean over forget answer positions of "
        "|h_j|, h = down-proj input"
    )
    requires = ("activations",)

    def score(self, diag, geometry):
        return diag.activations()["mean_abs"]
