"""Unlearning objectives with the defaults of their reference implementations.

NPO  (Zhang et al. 2024; open-unlearning ``npo.py``):
     L_f = -(2/beta) * mean_i log sigmoid(beta * (NLL_theta(i) - NLL_ref(i))), NLL summed over
     answer tokens, reference = theta_0 (NLLs cached once); beta = 0.1;
     total = gamma*L_f + alpha*NLL_retain.
SimNPO (Fan et al. 2024; open-unlearning ``simnpo.py``):
     L_f = -(2/beta) * mean_i log sigmoid(beta * (NLL_theta(i)/|y_i| - delta)); beta = 4.5,
     delta = 0, gamma = 0.125, alpha = 1.
GradDiff: gamma*(-NLL_forget) + alpha*NLL_retain, mean-token NLL, gamma = alpha = 1.
GA:       -NLL_forget.
Minimising each loss raises the forget NLL.

This module holds the settings (declared once, with their ranges) and the registry, and imports no
torch, so that objectives list and check fast; the formulas are in ``losses``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from supportbench._options import check_declared, declared, option
from supportbench._registry import Registry
from supportbench.errors import SpecError, UnknownObjectiveError

if TYPE_CHECKING:  # the settings list and check without torch; the losses need it (``losses``)
    import torch

    from supportbench.unlearning.data import TokenizedSet


@dataclass(frozen=True)
class Objective:
    """An objective and its settings; ``options`` are the settings it reads (the only ones a user
    may set: ``objective.<name>`` in ``--set`` or ``[hyperparameters]``), each declared once
    below."""

    name: str
    forget_coef: option(float, gt=0, doc="gamma, the forget term's weight") = 1.0
    retain_coef: option(float, ge=0, doc="alpha, the retain NLL's weight (0: no retain term)") = 1.0
    beta: option(
        float,
        gt=0,
        le=1000,
        unit="1/nat",
        doc="inverse temperature of the log-sigmoid (NPO, SimNPO)",
    ) = 1.0
    delta: option(
        float, ge=0, le=1000, unit="nat/token", doc="SimNPO's margin on the mean token NLL"
    ) = 0.0
    options: tuple[str, ...] = field(default=(), repr=False, compare=False)
    # how the NLLs are computed, not what is optimised: the run setting ``chunked_loss``
    # (``unlearning.chunked_loss``; ``harness.resolve`` sets it from the spec)
    chunked_loss: bool = field(default=False, repr=False)

    @property
    def needs_reference(self) -> bool:
        return self.name == "npo"

    @property
    def uses_retain(self) -> bool:
        return self.retain_coef != 0.0

    def forget_term(self, nll_sum, n_tok, ref_nll=None) -> torch.Tensor:
        from supportbench.unlearning.losses import (
            mean_token_nll,
            npo_forget_loss,
            simnpo_forget_loss,
        )

        if self.name == "npo":
            if ref_nll is None:
                raise SpecError(
                    "NPO needs reference NLLs computed once at theta_0 (ref_nll is None)"
                )
            return npo_forget_loss(nll_sum, ref_nll.to(nll_sum.device), self.beta)
        n_tok = n_tok.to(nll_sum.device)
        if self.name == "simnpo":
            return simnpo_forget_loss(nll_sum, n_tok, self.beta, self.delta)
        return -mean_token_nll(nll_sum, n_tok)  # graddiff, ga

    def loss(
        self,
        model,
        forget: TokenizedSet,
        retain: TokenizedSet | None = None,
        ref_nll: torch.Tensor | None = None,
    ) -> torch.Tensor:
        from supportbench.unlearning.losses import mean_token_nll

        if self.chunked_loss:
            from supportbench.unlearning.chunked_loss import chunked_sequence_nll as sequence_nll
        else:
            from supportbench.unlearning.data import sequence_nll
        nll, n = sequence_nll(model, forget)
        total = self.forget_coef * self.forget_term(nll, n, ref_nll)
        if self.uses_retain and retain is not None:
            rn, rc = sequence_nll(model, retain)
            total = total + self.retain_coef * mean_token_nll(rn, rc)
        return total

    def hyperparameters(self) -> dict:
        return {k: getattr(self, k) for k in self.options}


OBJECTIVES: Registry[Objective] = Registry("objective", error=UnknownObjectiveError)
OBJECTIVES.register(
    "npo",
    Objective(
        "npo",
        forget_coef=1.0,
        retain_coef=1.0,
        beta=0.1,
        options=("forget_coef", "retain_coef", "beta"),
    ),
)
OBJECTIVES.register(
    "simnpo",
    Objective(
        "simnpo",
        forget_coef=0.125,
        retain_coef=1.0,
        beta=4.5,
        delta=0.0,
        options=("forget_coef", "retain_coef", "beta", "delta"),
    ),
)
OBJECTIVES.register(
    "graddiff",
    Objective("graddiff", forget_coef=1.0, retain_coef=1.0, options=("forget_coef", "retain_coef")),
)
OBJECTIVES.register(
    "ga", Objective("ga", forget_coef=1.0, retain_coef=0.0, options=("forget_coef",))
)


def objective_options(name: str) -> dict[str, tuple]:
    """The options objective ``name`` reads: option -> (declaration, its default for this
    objective)."""
    base = OBJECTIVES.get(name)
    decl = declared(Objective)
    return {k: (decl[k][0], getattr(base, k)) for k in base.options}


def get_objective(name: str, **overrides) -> Objective:
    """The named objective with its reference defaults, optionally overridden (e.g. beta=0.2); an
    option it does not read, or a value outside its declaration, is refused naming it and what is
    allowed."""
    base = OBJECTIVES.get(name)
    checked = check_declared(
        f"objective '{name}'", overrides, objective_options(name), "objective.", bare=True
    )
    return replace(base, **checked) if checked else base
