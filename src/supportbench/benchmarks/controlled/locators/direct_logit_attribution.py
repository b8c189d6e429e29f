"""Direct logit attribution locator, standardised per interface: how much each interface's output
writes the answer token's logit directly, through the final norm and the unembedding.

At each answer-predicting position p of a target's diagnostic prompts, with a_p the token to
predict:

    c_B = W[:, I_B] h[I_B],   c_L = scaling B A h                the interfaces' terms in the
    down-projection DLA_w(p) = r_p * < gamma * c_w, U_c[a_p] >                   r_p = 1 /
    sqrt(mean(x_p^2) + eps) U_c = U - mean_v U[v]                                         the
    unembedding, centred over the vocabulary d_w(t) = mean of DLA_w over the target's
    answer-predicting positions score(t) = z_B(t) - z_L(t),   z_w = (d_w - mean_t d_w) / std_t d_w
      (population std, across targets)

x_p is the residual stream entering the final RMSNorm (weight gamma) at theta_0: the norm is held at
its theta_0 scale, which makes the attribution linear in c_w (TransformerLens,
``ActivationCache.apply_ln_to_stack`` with the cached final-norm scale). The unembedding is centred
because softmax ignores a shift shared by every logit (TransformerLens's ``center_unembed``, on by
default in ``from_pretrained``): a term that raises every logit alike does not raise the answer's
probability. This is the *direct* path: at the default interface layer (the last) it is the
interface's whole route to the logits, at an earlier layer only part of it. Hooks only: no weight is
touched.
"""

from __future__ import annotations

import torch

from supportbench.benchmarks.controlled.interfaces import INTERFACES, Interfaces, down_proj_module
from supportbench.benchmarks.controlled.locators.base import (
    LocatorInputs,
    check_inputs,
    contributions,
    register_locator,
    signed_effects,
)
from supportbench.errors import SpecError
from supportbench.unlearning.data import IGNORE, model_device


def final_norm_and_unembedding(model) -> tuple[torch.nn.Module, torch.Tensor]:
    """The decoder's final RMSNorm (with ``weight`` and ``variance_epsilon``) and the unembedding
    [V, d_model]."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    norm = getattr(getattr(base, "model", None), "norm", None)
    if norm is None or not hasattr(norm, "variance_epsilon") or not hasattr(norm, "weight"):
        raise SpecError(
            f"direct logit attribution needs a final RMSNorm at model.norm (Llama/Qwen2 layout); "
            f"{type(base).__name__} has {type(norm).__name__}"
        )
    return norm, base.get_output_embeddings().weight


def _inputs_of(model, modules, data) -> list[torch.Tensor]:
    """What each of ``modules`` receives when ``model`` reads ``data`` (one forward pass)."""
    seen: list[list[torch.Tensor]] = [[] for _ in modules]
    dev = model_device(model)
    hooks = [
        m.register_forward_pre_hook(lambda m, args, box=box: box.append(args[0].detach()))
        for m, box in zip(modules, seen)
    ]
    try:
        model(input_ids=data.input_ids.to(dev), attention_mask=data.attention_mask.to(dev))
    finally:
        for hk in hooks:
            hk.remove()
    return [box[0] for box in seen]


@register_locator("direct_logit_attribution")
class DirectLogitAttribution:
    provenance = (
        "direct logit attribution (Elhage et al. 2021, 'A Mathematical Framework for Transformer "
        "Circuits'; TransformerLens ActivationCache.logit_attrs: frozen final-norm scale, centred "
        "unembedding); per-interface z-scores defined here"
    )

    locate = signed_effects

    @torch.no_grad()
    def effects(self, model, itf: Interfaces, inputs: LocatorInputs) -> dict[str, dict[str, float]]:
        """{interface: {target: d_w(t)}}, before standardising."""
        check_inputs(model, itf, inputs)
        norm, U = final_norm_and_unembedding(model)
        Uc = U.detach().double() - U.detach().double().mean(0, keepdim=True)
        gamma = norm.weight.detach().double()
        module, dev = down_proj_module(model, itf), model_device(model)
        effects = {w: {} for w in INTERFACES}
        for target, data in inputs.probes.sets.items():
            h, x = _inputs_of(model, (module, norm), data)
            nxt = torch.full_like(data.labels, IGNORE)
            nxt[:, :-1] = data.labels[:, 1:]
            nxt = nxt.to(dev)
            at = nxt != IGNORE
            x = x.double()
            r = torch.rsqrt(x.pow(2).mean(-1) + norm.variance_epsilon)  # [B, L]
            direction = Uc[nxt.clamp(min=0)] * gamma  # [B, L, d_model]
            c = contributions(model, itf, h.double())
            for w in INTERFACES:
                dla = r * (c[w] * direction).sum(-1)  # [B, L]
                effects[w][target] = float(dla[at].mean())
        return effects
