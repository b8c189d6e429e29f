"""Projected Causal (after Liu et al. 2024 causal unlearning and Guo et al. 2025): attribution
patching with a *counterfactual* run (the subject's name replaced by another subject's name), each
position's effect of neuron j projected into the residual stream through W_down[:, j]:
    score_j = sum_{b,t} | (h_j^cf - h_j) * <W_down[:, j], dm/dy> |,   y = down-proj output.
Because dm/dh_j = <W_down[:, j], dm/dy>, this is the per-position absolute attribution at the
down-proj input; unlike AP-MLP it uses name counterfactuals and does not let positions cancel."""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase, register_method


@register_method("projected_causal")
@dataclass
class ProjectedCausal(MethodBase):
    display_name = "Projected Causal"  # how reports name it
    provenance = (
        "defined here after Liu et al. 2024 (UCSB-NLP-Chang/causal_unlearn: name-replaced "
        "counterfactuals) and Guo et al. 2025 (attribution patching): per-position |effect| "
        "projected through W_down[:, j], summed"
    )
    requires = ("attribution:counterfactual",)

    def score(self, diag, geometry):
        return diag.attribution("counterfactual")["abs"]
