"""Activation-Down (Chang et al. 2024 "Activations", MemPi largest_act):
|mean_t h_j| * ||W_down[:, j]||_2 over forget target positions."""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase, register_method


@register_method("activation_down")
@dataclass
class ActivationDown(MethodBase):
    display_name = "Activation-Down"  # how reports name it
    provenance = (
        "code: terarachang/MemPi knowledge_neuron.py::largest_act: |mean activation| x ||W_down[:, "
        "j]||; target positions = forget answer positions; link to Lee et al.'s name is inferred"
    )
    requires = ("activations", "weights")

    def score(self, diag, geometry):
        return diag.activations()["mean"].abs() * geometry.column_norms()
