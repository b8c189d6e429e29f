"""Learning-rate schedules as pure functions of the step (nanoGPT's ``get_lr``): a checkpoint needs
no scheduler state, and every training loop of the project reads its rate from here.

``constant_after_warmup`` returns a learning rate; the two cosine schedules return a multiplier of
the base rate (what ``torch.optim.lr_scheduler.LambdaLR`` takes).
"""

from __future__ import annotations

import math


def constant_after_warmup(step: int, lr: float, warmup_steps: int) -> float:
    """Unlearning (Eq. 1's eta_k; open-unlearning's constant rate with optional warm-up)."""
    # warm-up: linear from lr / warmup_steps at step 0 to lr at the last warm-up step
    if warmup_steps > 0 and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    # then constant
    return lr


def warmup_cosine(step: int, total: int, warmup: int) -> float:
    """Fine-tuning and masked injection: a multiplier of the base rate."""
    # warm-up: linear from 1 / warmup at step 0 to 1
    if step < warmup:
        return (step + 1) / warmup
    # then cosine decay from 1 towards 0 over the remaining steps
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def cosine(step: int, total: int) -> float:
    """Interface injection (controlled benchmark, each phase): cosine decay from 1 towards 0, no
    warm-up."""
    return 0.5 * (1 + math.cos(math.pi * step / total))
