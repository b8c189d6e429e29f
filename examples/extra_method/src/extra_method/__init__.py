"""A third-party selection method in one file: rank columns by the norm of the forget gradient.

Installed with ``pip install examples/extra_method``; supportbench finds it through the
``supportbench.methods`` entry point, no import needed on the user's side.

It also shows a plugin diagnostic: ``forget_answer_length`` is computed once per sweep cell by
``Diagnostics`` and shared by every method that lists it in ``requires`` (here:
``length_weighted_norm``).
"""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase
from supportbench.methods.diagnostics import register_diagnostic


@register_diagnostic("forget_answer_length")
def forget_answer_length(diag) -> float:
    """Mean answer length (tokens) of the forget diagnostic records."""
    return float(diag.records.F.n_answer_tokens.double().mean())


@dataclass
class GradientNorm(MethodBase):
    display_name = "Gradient norm"  # how reports print it (default: the registered name)
    provenance = (
        "examples/extra_method: ||P_g grad l_F||_2 (an illustration, not a baseline of the paper)"
    )
    requires = ("grad:F",)

    def score(self, diag, geometry):
        return geometry.per_group_norm(diag.role_grad("F"))


@dataclass
class LengthWeightedNorm(MethodBase):
    display_name = "Length-weighted norm"
    provenance = (
        "examples/extra_method: ||P_g grad l_F||_2 x mean forget answer length (illustration only)"
    )
    requires = ("grad:F", "forget_answer_length")

    def score(self, diag, geometry):
        return geometry.per_group_norm(diag.role_grad("F")) * diag.get("forget_answer_length")
