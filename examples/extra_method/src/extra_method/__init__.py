"""A third-party selection method in one file: rank columns by the norm of the forget gradient.

Installed with ``pip install examples/extra_method``; supportbench finds it through the
``supportbench.methods`` entry point, no import needed on the user's side.
"""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase


@dataclass
class GradientNorm(MethodBase):
    provenance = "examples/extra_method: ||P_g grad l_F||_2 (an illustration, not a baseline of the paper)"
    requires = ("grad:F",)

    def score(self, diag, geometry):
        return geometry.per_group_norm(diag.role_grad("F"))
