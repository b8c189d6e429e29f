"""Resample (mean) ablation locator, standardised per interface: replace one interface's output on a
target's diagnostic prompts by its average over background subjects, and measure what the target
loses.

    c_B(h) = W[:, I_B] h[I_B],   c_L(h) = scaling B A h          the interfaces' terms in the
    down-projection m_w[k] = mean of c_w over the background subjects' diagnostic prompts at their
    k-th answer-predicting
             position (the last prompt token is k = 0, the answer's first token k = 1, ...)
    e_w(t) = NLL_t(c_w -> m_w at every answer-predicting position) - NLL_t(theta_0)
    score(t) = z_B(t) - z_L(t),   z_w = (e_w - mean_t e_w) / std_t e_w   (population std, across
    targets)

Of the two readings of activation patching, this is the noising one (ablate the interface on the
clean run), not denoising (swap the subject for a background subject and restore the interface):
storage means "remove it and the fact is lost", and the average over all background subjects is
deterministic where one swapped subject is a random draw. Background subjects are known to theta_0
(pretrained) and never targets, so m_w is what the interface writes when it retrieves *some*
             subject's attribute, not nothing (zero ablation) —
the difference that resample ablation makes (Chan et al. 2022, causal scrubbing).

Only answer-predicting positions are patched: at the default interface layer (the last) a position's
down-projection output reaches only that position's logits, so this is the interface's whole effect
on the NLL; at an earlier layer it is the effect through those positions. A position k that no
background prompt has takes the mean over all their answer-predicting positions. Hooks only: no
weight is touched.
"""

from __future__ import annotations

import torch

from supportbench.benchmarks.controlled.interfaces import INTERFACES, Interfaces, down_proj_module
from supportbench.benchmarks.controlled.locators.base import (
    LocatorInputs,
    answer_index,
    check_inputs,
    contributions,
    hooked,
    mean_token_nll,
    register_locator,
    signed_effects,
)
from supportbench.unlearning.data import TokenizedSet, model_device


@torch.no_grad()
def background_means(
    model, itf: Interfaces, data: TokenizedSet
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per interface: (m [K, d_model], the k-th answer-predicting position's mean contribution; the
    mean over all answer-predicting positions [d_model])."""
    module, dev = down_proj_module(model, itf), model_device(model)
    seen: list[torch.Tensor] = []
    sums = {w: {} for w in INTERFACES}
    counts: dict[int, int] = {}
    for b in data.batches(64):
        seen.clear()
        with hooked(module, lambda m, args: seen.append(args[0].detach()), pre=True):
            model(input_ids=b.input_ids.to(dev), attention_mask=b.attention_mask.to(dev))
        idx = answer_index(b).to(dev)
        c = contributions(model, itf, seen[0].double())
        for k in range(int(idx.max()) + 1):
            sel = idx == k
            counts[k] = counts.get(k, 0) + int(sel.sum())
            for w in INTERFACES:
                sums[w][k] = sums[w].get(k, 0) + c[w][sel].sum(0)
    K = len(counts)
    total = sum(counts.values())
    return {
        w: (
            torch.stack([sums[w][k] / counts[k] for k in range(K)]),
            sum(sums[w][k] for k in range(K)) / total,
        )
        for w in INTERFACES
    }


@register_locator("resample_ablation")
class ResampleAblation:
    provenance = (
        "mean ablation over a resample distribution (Wang et al. 2022, IOI, arXiv:2211.00593; Chan "
        "et al. 2022, causal scrubbing; Heimersheim & Nanda 2024, arXiv:2404.15255); background "
        "subjects as the distribution and per-interface z-scores defined here"
    )

    locate = signed_effects

    @torch.no_grad()
    def effects(self, model, itf: Interfaces, inputs: LocatorInputs) -> dict[str, dict[str, float]]:
        """{interface: {target: e_w(t)}}, before standardising."""
        check_inputs(model, itf, inputs)
        means = background_means(model, itf, inputs.background)
        module = down_proj_module(model, itf)
        sets = inputs.probes.sets
        base = {k: mean_token_nll(model, d) for k, d in sets.items()}
        effects = {}
        for which in INTERFACES:
            per_k, overall = means[which]
            effects[which] = {}
            for target, data in sets.items():
                idx = answer_index(data).to(model_device(model))
                patch = torch.where(
                    (idx < len(per_k))[..., None], per_k[idx.clamp(0, len(per_k) - 1)], overall
                )  # [B, L, d_model]; used only where idx >= 0

                def hook(m, args, out, idx=idx, patch=patch, which=which):
                    c = contributions(model, itf, args[0].double())[which]
                    new = out.double() - c + patch
                    return torch.where((idx >= 0)[..., None], new, out.double()).to(out.dtype)

                with hooked(module, hook):
                    effects[which][target] = mean_token_nll(model, data) - base[target]
        return effects
