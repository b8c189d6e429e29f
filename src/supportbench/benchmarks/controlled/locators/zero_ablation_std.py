"""Zero-ablation locator, standardised per interface: remove each interface outright and measure
what each target loses.

    e_B(t) = NLL_t(W[:, I_B] = 0) - NLL_t(theta_0)       the block neurons' write through W zeroed
    e_L(t) = NLL_t(lora_B = 0)   - NLL_t(theta_0)        the LoRA delta removed
    score(t) = z_B(t) - z_L(t),   z_w = (e_w - mean_t e_w) / std_t e_w   (population std, across
    targets)

NLL_t = mean over target t's diagnostic phrasings of the mean-token answer NLL. The two ablations
remove different parts of the layer's output (a block of neurons, a low-rank delta reading every
neuron), so their raw effects are not on one scale; standardising per interface compares each target
with the other targets under the same ablation. The weights are changed in place and written back
from a copy, bitwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from supportbench.benchmarks.controlled.interfaces import INTERFACES, Interfaces, _base_weight
from supportbench.benchmarks.controlled.locators.base import (
    LocatorInputs,
    check_inputs,
    lora_parts,
    mean_token_nll,
    register_locator,
    signed_effects,
)


@contextmanager
def zeroed(model, itf: Interfaces, which: str) -> Iterator[None]:
    """Within the block, interface ``which`` contributes nothing: the block neurons' down columns or
    the LoRA's B are zero; afterwards the saved values are copied back (bitwise)."""
    if which == "backbone":
        W = _base_weight(model, itf)
        cols = torch.tensor(itf.columns, device=W.device)
        saved = W.detach()[:, cols].clone()
        with torch.no_grad():
            W[:, cols] = 0
        try:
            yield
        finally:
            with torch.no_grad():
                W[:, cols] = saved
    else:
        B = lora_parts(model, itf)[1]
        saved = B.detach().clone()
        with torch.no_grad():
            B.zero_()
        try:
            yield
        finally:
            with torch.no_grad():
                B.copy_(saved)


@register_locator("zero_ablation_std")
class ZeroAblationStd:
    provenance = (
        "zero-ablation of a component (Heimersheim & Nanda 2024, 'How to use and interpret "
        "activation patching', arXiv:2404.15255, section on "
        "ablation baselines); per-interface z-scores defined here"
    )

    locate = signed_effects

    @torch.no_grad()
    def effects(self, model, itf: Interfaces, inputs: LocatorInputs) -> dict[str, dict[str, float]]:
        """{interface: {target: e_w(t)}}, before standardising."""
        check_inputs(model, itf, inputs)
        sets = inputs.probes.sets
        base = {k: mean_token_nll(model, d) for k, d in sets.items()}
        effects = {}
        for which in INTERFACES:
            with zeroed(model, itf, which):
                effects[which] = {k: mean_token_nll(model, d) - base[k] for k, d in sets.items()}
        return effects
