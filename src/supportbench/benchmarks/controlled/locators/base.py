"""The storage-locator contract, its registry and what every locator shares (paper §5.2:
"localization is evaluated without access to intervention outcomes").

A locator answers, per target, *which interface stores it*:
``locate(model, itf, inputs) -> {target: score}``, a signed float (> 0: storage localizes the target
in the backbone block; < 0: in the LoRA). It is outcome-blind by construction: it receives theta_0,
the ``Interfaces`` and a ``LocatorInputs`` (each target's diagnostic phrasings and the background
subjects' phrasings) and nothing else — ``check_inputs`` refuses any other type, so an evaluation
split, a ``Roles``, a run record or an outcome cannot be passed in. It must leave the model bitwise
as it found it. Register one with ``@register_locator("name")``, or from another package through the
entry-point group ``supportbench.locators``::

    [project.entry-points."supportbench.locators"]
    my_locator = "my_pkg.my_module:MyLocator"
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from supportbench._registry import Registry, package_modules
from supportbench.benchmarks.controlled.interfaces import (
    Interfaces,
    TargetProbes,
    _base_weight,
    down_proj_module,
)
from supportbench.errors import LocatorOutputError, UnknownLocatorError
from supportbench.unlearning.data import TokenizedSet, answer_positions, sequence_nll

# every other file of this package is a built-in locator (the registry scans the package)


@dataclass(frozen=True)
class LocatorInputs:
    """A locator's entire view of the data: each target's diagnostic phrasings (``TargetProbes``)
    and the background subjects' diagnostic phrasings (never a target; the resample
    distribution)."""

    probes: TargetProbes
    background: TokenizedSet

    def __post_init__(self):
        if type(self.probes) is not TargetProbes:
            raise TypeError(
                f"LocatorInputs.probes must be TargetProbes (diagnostic phrasings per target), got "
                f"{type(self.probes).__name__}: a locator never reads outcomes or evaluation data"
            )
        if type(self.background) is not TokenizedSet:
            raise TypeError(
                "LocatorInputs.background must be a TokenizedSet of background subjects' "
                f"phrasings, got {type(self.background).__name__}: "
                "a locator never reads outcomes or evaluation data"
            )

    @property
    def targets(self) -> list[str]:
        return list(self.probes.sets)


@runtime_checkable
class Locator(Protocol):
    name: str
    provenance: str

    def locate(self, model, itf: Interfaces, inputs: LocatorInputs) -> dict[str, float]: ...


def check_inputs(model, itf, inputs) -> None:
    """TypeError unless the arguments are theta_0 (a torch module), the ``Interfaces`` and
    ``LocatorInputs``."""
    for what, value, want in (
        ("model", model, torch.nn.Module),
        ("itf", itf, Interfaces),
        ("inputs", inputs, LocatorInputs),
    ):
        if not isinstance(value, want):
            raise TypeError(
                f"a locator reads only theta_0, the Interfaces and LocatorInputs; its {what} must "
                f"be {want.__name__}, got {type(value).__name__}"
            )


def check_locator_class(name: str, cls) -> None:
    """Refuse, at registration, a class that cannot be a locator: not a class, no callable
    ``locate``, or no ``provenance`` string (a source, or "defined here")."""
    if not isinstance(cls, type):
        raise TypeError(f"@register_locator({name!r}) decorates a class, got {type(cls).__name__}")
    if not callable(getattr(cls, "locate", None)):
        raise TypeError(
            f"locator {name!r} ({cls.__qualname__}) has no locate(model, itf, inputs) method"
        )
    if not isinstance(getattr(cls, "provenance", None), str):
        raise TypeError(
            f'locator {name!r} ({cls.__qualname__}) needs a class attribute provenance = "<source '
            "repository and file, or 'defined here'>\""
        )


LOCATORS: Registry = Registry(
    "storage locator",
    builtin_modules=package_modules(
        "supportbench.benchmarks.controlled.locators", exclude=("base",)
    ),
    entry_point_group="supportbench.locators",
    error=UnknownLocatorError,
    check=check_locator_class,
)


def register_locator(name: str):
    """Class decorator: ``@register_locator("zero_ablation_std")``; the class is checked first."""
    return LOCATORS.register(name)


def get_locator(name: str) -> Locator:
    return LOCATORS.get(name)()


def list_locators() -> list[str]:
    return LOCATORS.names()


def compute_locator_scores(
    locator: Locator, model, itf: Interfaces, inputs: LocatorInputs
) -> dict[str, float]:
    """Run ``locator.locate`` on checked inputs and check its output: one finite float per
    target."""
    check_inputs(model, itf, inputs)
    name = getattr(locator, "name", type(locator).__name__)
    out = locator.locate(model, itf, inputs)
    if not isinstance(out, dict) or set(out) != set(inputs.targets):
        got = sorted(out) if isinstance(out, dict) else type(out).__name__
        raise LocatorOutputError(
            f"locator '{name}' must return {{target: float}} for the targets "
            f"{', '.join(inputs.targets)}; got {got}"
        )
    bad = [k for k, v in out.items() if not isinstance(v, int | float) or not math.isfinite(v)]
    if bad:
        raise LocatorOutputError(
            f"locator '{name}' returned non-finite or non-float scores for {', '.join(bad)}"
        )
    return {k: float(out[k]) for k in inputs.targets}


def locate_all(
    model, itf: Interfaces, inputs: LocatorInputs, names: list[str] | None = None
) -> dict[str, dict]:
    """{locator name: {target: score}} for every registered locator (or ``names``)."""
    return {
        n: compute_locator_scores(get_locator(n), model, itf, inputs)
        for n in (names or list_locators())
    }


# ---- shared pieces -------------------------------------------------------------------------------
def standardise(effects: dict[str, float]) -> dict[str, float]:
    """z-score across targets, (e - mean) / std (population std); all zeros when the effects do not
    vary. Per interface, so that the two interfaces' effects are compared on the same scale."""
    v = torch.tensor(list(effects.values()), dtype=torch.float64)
    mu, sd = v.mean(), v.std(unbiased=False)
    z = (v - mu) / sd if sd > 0 else torch.zeros_like(v)
    return dict(zip(effects, z.tolist()))


def signed(effects: dict[str, dict[str, float]]) -> dict[str, float]:
    """z(backbone effect) - z(LoRA effect) per target: > 0 when the backbone stands out more."""
    zb, zl = standardise(effects["backbone"]), standardise(effects["lora"])
    return {k: zb[k] - zl[k] for k in zb}


def signed_effects(self, model, itf, inputs) -> dict[str, float]:
    """``locate`` for a locator that measures per-interface ``effects``: ``signed`` of them. A
    locator class takes it as its method (``locate = signed_effects``): a shared function, not a
    base class."""
    return signed(self.effects(model, itf, inputs))


@torch.no_grad()
def mean_token_nll(model, data: TokenizedSet) -> float:
    """Mean over the set's items of (summed answer NLL / answer tokens)."""
    nll, n = sequence_nll(model, data)
    return float((nll.double() / n.double().clamp(min=1)).mean())


def lora_parts(model, itf: Interfaces) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(A [r, d_ff], B [d_model, r], scaling) of the LoRA on the interface's down-projection."""
    m = down_proj_module(model, itf)
    key = next(iter(m.lora_A))
    return m.lora_A[key].weight, m.lora_B[key].weight, float(m.scaling[key])


def contributions(model, itf: Interfaces, h: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each interface's additive term in the down-projection's output for its input ``h`` [...,
    d_ff]: backbone W[:, I_B] h[I_B]; LoRA scaling * B A h (dropout 0)."""
    W = _base_weight(model, itf).detach().to(h.dtype)
    cols = torch.tensor(itf.columns, device=W.device)
    A, B, s = (
        t.detach().to(h.dtype) if isinstance(t, torch.Tensor) else t for t in lora_parts(model, itf)
    )
    return {"backbone": h[..., cols] @ W[:, cols].T, "lora": s * ((h @ A.T) @ B.T)}


def answer_index(batch: TokenizedSet) -> torch.Tensor:
    """[B, L] int: k for the k-th answer-predicting position of each row (0, 1, ...), -1
    elsewhere."""
    pos = answer_positions(batch)
    return torch.where(pos, pos.long().cumsum(1) - 1, torch.full_like(pos, -1, dtype=torch.long))


@contextmanager
def hooked(module: torch.nn.Module, hook, pre: bool = False) -> Iterator[None]:
    """A forward (or forward-pre) hook on ``module`` for the duration of the block, removed
    afterwards."""
    handle = module.register_forward_pre_hook(hook) if pre else module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()
