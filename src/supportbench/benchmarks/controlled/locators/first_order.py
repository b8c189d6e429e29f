"""First-order storage locator: the predicted effect on a target's diagnostic NLL of zeroing each
interface, one gradient per target (the project's original storage score, moved here unchanged).

    g   = d(mean-token diagnostic NLL) / d W_eff      W_eff = the interface layer's effective
    down-projection e_B = |sum_{j in I_B} <W_:,j, g_:,j>|             zeroing the block neurons'
    down columns e_L = |<scaling B A, g>|                          removing the LoRA's delta
    score = e_B - e_L                                 (> 0: storage localizes the target in the
    backbone)

Both terms scale with ||g||, which grows as a target is learned more weakly: the score largely
measures injection strength. The benchmark records theta_0's diagnostic NLL and ||g|| beside it
(``first_order_terms``) as nuisance covariates; theta_0's NLL encodes the label (the backbone holds
its targets more weakly).
"""

from __future__ import annotations

import torch

from supportbench.benchmarks.controlled.interfaces import (
    Interfaces,
    TargetProbes,
    _base_weight,
    _lora_delta,
)
from supportbench.benchmarks.controlled.locators.base import (
    LocatorInputs,
    check_inputs,
    register_locator,
)
from supportbench.unlearning.data import sequence_nll


def first_order_terms(model, itf: Interfaces, probes: TargetProbes) -> dict[str, dict[str, float]]:
    """Per target: ``e_backbone``, ``e_lora`` (module docstring), theta_0's mean-token diagnostic
    NLL ``nll`` and ``grad_norm`` = ||g||. Every parameter's ``requires_grad`` is restored
    afterwards; no weight changes."""
    if not isinstance(probes, TargetProbes):
        raise TypeError(f"first_order_terms reads only TargetProbes, got {type(probes).__name__}")
    W = _base_weight(model, itf)
    delta = _lora_delta(model, itf).detach()
    cols = torch.tensor(itf.columns, device=W.device)
    flags = [(p, p.requires_grad) for p in model.parameters()]
    out = {}
    for p, _ in flags:
        p.requires_grad_(False)
    W.requires_grad_(True)
    try:
        for target, data in probes.sets.items():
            W.grad = None
            with torch.enable_grad():
                nll, n = sequence_nll(model, data)
                loss = nll.sum() / n.sum()
                loss.backward()
            g = W.grad.detach()
            e_b = float((W.detach()[:, cols].double() * g[:, cols].double()).sum().abs())
            e_l = float((delta.double() * g.double()).sum().abs())
            out[target] = {
                "e_backbone": e_b,
                "e_lora": e_l,
                "nll": float(loss.detach()),
                "grad_norm": float(g.double().norm()),
            }
    finally:
        W.grad = None
        for p, flag in flags:
            p.requires_grad_(flag)
    return out


@register_locator("first_order")
class FirstOrder:
    provenance = (
        "defined here: methods/storage.py's first-order ablation <W_:,j, g_:,j>, summed over the "
        "block I_B before the absolute value, and the same for the LoRA delta"
    )

    def locate(self, model, itf: Interfaces, inputs: LocatorInputs) -> dict[str, float]:
        check_inputs(model, itf, inputs)
        return {
            k: t["e_backbone"] - t["e_lora"]
            for k, t in first_order_terms(model, itf, inputs.probes).items()
        }
