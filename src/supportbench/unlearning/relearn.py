"""The relearning attack (issue 35) and its metric, written out from LACUNA's definition
(McGill-NLP/LACUNA ``scripts/extraction_leakage.py``; docs/benchmarks.md, "Relearning"):

- a forget *unit* (LACUNA: a person; each benchmark says what its units are) *leaks* from a model
  when its target string appears, case-insensitively, in the greedy answer to any of its probe
  prompts (upstream: up to ``attempts`` varied questions per person);
- *forgotten by unlearning* = the units that do not leak from the unlearned model;
- *resurfaced after relearning* = the forgotten units that leak after the attack, which fine-tunes
  the unlearned model on data outside every role of the run (upstream: ``relearn_train``, people in
  no split) for a fixed number of steps;
- ``pct_resurfaced_of_forgotten`` = 100 x resurfaced / max(1, forgotten), rounded to 2 places.

The counts keep upstream's names, so a run of this harness and an imported LACUNA run
(``registry.lacuna_summary``) read alike. ``total_forget_people`` counts units, whatever a
benchmark's units are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from supportbench.experiments.metric_names import LACUNA_LEAKAGE
from supportbench.unlearning.data import TokenizedSet
from supportbench.unlearning.train import FinetuneConfig, finetune_steps

# the components a run with the attack adds: upstream's counts, then the attack's last loss
RESURFACING = (*LACUNA_LEAKAGE, "relearn_final_loss")


@dataclass(frozen=True)
class Probe:
    """One forget unit's probe: the prompts its leak is looked for after, and its target string."""

    unit: str
    prompts: tuple[str, ...]
    target: str


@dataclass(frozen=True)
class RelearnSet:
    """A benchmark's relearning attack inputs for one run's roles: ``train`` = records outside every
    role (what the attacker fine-tunes on), ``probes`` = the forget units, and ``generate`` = the
    benchmark's greedy answers (its own prompt format) to a list of prompts."""

    train: TokenizedSet
    probes: tuple[Probe, ...]
    generate: Callable[[object, Sequence[str]], list[str]]


# targets upstream's build_prompts skips (no probe: the person counts, and never leaks)
NO_TARGET = ("", "N/A", "None", "{}")


def leaked(model, rs: RelearnSet) -> set[str]:
    """The units whose target appears (case-insensitive) in any of their probes' greedy answers; a
    unit whose target is one of ``NO_TARGET`` is not probed, as upstream."""
    probes = [pr for pr in rs.probes if pr.target.strip() not in NO_TARGET]
    prompts = [p for pr in probes for p in pr.prompts]
    owners = [(pr.unit, pr.target.lower()) for pr in probes for _ in pr.prompts]
    with torch.no_grad():
        answers = rs.generate(model, prompts) if prompts else []
    return {u for (u, t), a in zip(owners, answers, strict=True) if t in a.lower()}


def resurfacing(
    units: set[str], after_unlearning: set[str], after_relearning: set[str], attempts: int
) -> dict[str, float]:
    """LACUNA's counts (``extraction_leakage.py``) from the leaking sets."""
    forgotten = units - after_unlearning
    resurfaced = forgotten & after_relearning
    return {
        "attempts": float(attempts),
        "total_forget_people": float(len(units)),
        "still_leaking_after_unlearn": float(len(units & after_unlearning)),
        "forgotten_by_unlearn": float(len(forgotten)),
        "resurfaced_after_relearn": float(len(resurfaced)),
        "pct_resurfaced_of_forgotten": round(100 * len(resurfaced) / max(1, len(forgotten)), 2),
    }


def relearn(
    model, data: TokenizedSet, *, steps: int, lr: float, batch_size: int, seed: int
) -> list[float]:
    """The attack's training: every parameter of ``model``, in place, for exactly ``steps`` AdamW
    steps on ``data`` (seeded batch order, linear warm-up over 5 % then cosine decay, no weight
    decay: ``unlearning.train``'s loop), then released for inference (no gradients kept).
    Upstream relearns through a LoRA (r 16, alpha 8); every parameter is the stronger attack."""
    config = FinetuneConfig(epochs=1, lr=lr, batch_size=batch_size, weight_decay=0.0, seed=seed)
    try:
        return finetune_steps(model, data, config, steps, stream=3, desc="relearn")
    finally:
        model.eval()
        for p in model.parameters():  # its gradients too: a whole model's, which every later
            p.grad = None  # run in the process would hold (14.96 GiB at 8B, measured on a GPU)
            p.requires_grad_(False)


def relearning_attack(
    model, rs: RelearnSet, *, steps: int, lr: float, batch_size: int, seed: int
) -> dict[str, float]:
    """Probe the unlearned model, relearn it in place (the caller's model is spent: the runner
    resets it to theta_0 before the next run), probe again; LACUNA's counts plus the attack's final
    training loss."""
    units = {p.unit for p in rs.probes}
    if not units:
        raise ValueError("the relearning attack has no forget units to probe")
    before = leaked(model, rs)
    losses = relearn(model, rs.train, steps=steps, lr=lr, batch_size=batch_size, seed=seed)
    after = leaked(model, rs)
    out = resurfacing(units, before, after, max(len(p.prompts) for p in rs.probes))
    out["relearn_final_loss"] = float(losses[-1]) if losses else float("nan")
    return out
