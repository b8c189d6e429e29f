"""AP-MLP (after Lee et al. 2025 and Guo et al. attribution patching): per down-proj input neuron j,
|sum_{b,t} (h_j^corr - h_j^clean) * dm/dh_j|, m = clean answer log-prob, corrupted run = subject
tokens replaced by random tokens (same length)."""

from dataclasses import dataclass

from supportbench.methods.base import MethodBase, register_method


@register_method("ap_mlp")
@dataclass
class ApMlp(MethodBase):
    display_name = "AP-MLP"  # how reports name it
    provenance = (
        "defined here after Lee et al. 2025 (code not public) and "
        "magikarp01/mechanistic-unlearning localizations/ap/ap_wrapper.py: attribution patching at "
        "the down-proj input, random-token subject corruption, m = summed answer log-prob, |sum "
        "over batch and positions|"
    )
    requires = ("attribution:corrupted",)

    def score(self, diag, geometry):
        return diag.attribution("corrupted")["signed"].abs()
