"""The selection-method contract and registry.

A selection method ranks editable groups: ``score(diagnostics, geometry) -> Tensor[n_groups]``,
higher = select first. It declares the diagnostics it reads (``requires``) and where its formula
comes from (``provenance``). Register one with ``@register_method("name")`` in any module, or from
another package through the entry-point group ``supportbench.methods``::

    [project.entry-points."supportbench.methods"]
    my_method = "my_pkg.my_module:MyMethod"

Its hyperparameters are dataclass fields, each declared once with ``option`` (type, range, unit,
meaning): ``eps: option(float, gt=0, doc="stabiliser") = 1e-8``; ``--set method.eps=...`` is checked
against it before any work, and ``supportbench methods --options`` lists it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import torch

from supportbench._options import (
    check_declared,
    declared,
    option,  # noqa: F401 -- re-exported: a method file declares its options with it
)
from supportbench._registry import Registry, package_modules
from supportbench.errors import MethodOutputError, UnknownMethodError

# Every file of this package is a built-in but these (the registry scans the package,
# ``package_modules``, so a new method is one new file); the paper's eleven are listed in
# ``catalog.PAPER_METHODS``.
INFRASTRUCTURE = ("base", "diagnostics")  # modules of the package that define no method


@runtime_checkable
class SelectionMethod(Protocol):
    name: str
    provenance: str
    requires: tuple[str, ...]

    @property
    def hyperparameters(self) -> dict[str, Any]: ...

    def score(self, diagnostics, geometry) -> torch.Tensor: ...


class MethodBase:
    """Optional convenience base: dataclass fields are the hyperparameters."""

    name = "?"
    provenance = ""
    requires: tuple[str, ...] = ()

    @property
    def hyperparameters(self) -> dict[str, Any]:
        return dataclasses.asdict(self) if dataclasses.is_dataclass(self) else {}


METHODS: Registry = Registry(
    "selection method",
    builtin_modules=package_modules("supportbench.methods", exclude=INFRASTRUCTURE),
    entry_point_group="supportbench.methods",
    error=UnknownMethodError,
)


CLASS_ATTRIBUTES = (
    "provenance",
    "requires",
    "display_name",
)  # its description, never a hyperparameter


def check_method_class(name: str, cls) -> None:
    """Refuse, at registration, a class that cannot be a selection method (lm-eval's type check at
    registration): no callable ``score``, or ``provenance``/``requires`` annotated into dataclass
    fields (which would silently turn them into hyperparameters, part of every run's identity)."""
    if not isinstance(cls, type):
        raise TypeError(f"@register_method({name!r}) decorates a class, got {type(cls).__name__}")
    if not callable(getattr(cls, "score", None)):
        raise TypeError(
            f"selection method {name!r} ({cls.__qualname__}) "
            "has no score(diagnostics, geometry) method"
        )
    if dataclasses.is_dataclass(cls):
        bad = [f.name for f in dataclasses.fields(cls) if f.name in CLASS_ATTRIBUTES]
        if bad:
            raise TypeError(
                f"selection method {name!r} ({cls.__qualname__}) declares {', '.join(bad)} as a "
                "dataclass field (a hyperparameter); make it a plain class attribute without a "
                'type annotation, e.g. provenance = "..."'
            )


def register_method(name: str):
    """Class decorator: ``@register_method("wagle")`` (applied above ``@dataclass``). The class is
    checked first (``check_method_class``)."""

    def add(cls):
        check_method_class(name, cls)
        return METHODS.register(name, cls)

    return add


def method_options(name: str) -> dict[str, tuple]:
    """The options method ``name`` declares: option -> (declaration, default)
    (``_options.declared``)."""
    return declared(METHODS.get(name))


def get_method(name: str, **hyperparameters) -> SelectionMethod:
    """An instance of the named method with its source defaults, optionally overridden; an option it
    does not declare, or a value outside its declaration, is refused naming it and what is
    allowed."""
    cls = METHODS.get(name)
    # again here: @dataclass applied above @register_method adds its fields after the first check
    # ran
    try:
        check_method_class(name, cls)
    except TypeError as exc:
        raise MethodOutputError(str(exc)) from None
    checked = check_declared(
        f"method '{name}'", hyperparameters, declared(cls), "method.", bare=True
    )
    try:
        return cls(**checked)
    except TypeError as exc:
        raise MethodOutputError(
            f"method '{name}' rejected hyperparameters {hyperparameters}: {exc}"
        ) from None


def list_methods() -> list[str]:
    return METHODS.names()


def compute_scores(method: SelectionMethod, diagnostics) -> torch.Tensor:
    """Run ``method.score`` and check its output: one finite float per group."""
    name = getattr(method, "name", type(method).__name__)
    geo = diagnostics.geometry
    diagnostics.prepare(getattr(method, "requires", ()))
    out = method.score(diagnostics, geo)
    if not isinstance(out, torch.Tensor):
        raise MethodOutputError(
            f"method '{name}' returned {type(out).__name__}, expected a torch.Tensor"
        )
    if tuple(out.shape) != (geo.n_groups,):
        raise MethodOutputError(
            f"method '{name}' returned scores of shape {tuple(out.shape)}, "
            f"expected ({geo.n_groups},) = one per editable group"
        )
    out = out.detach().to("cpu", torch.float64)
    bad = ~torch.isfinite(out)
    if bad.any():
        raise MethodOutputError(
            f"method '{name}' returned {int(bad.sum())} non-finite scores "
            f"(first at group ids {bad.nonzero().squeeze(1)[:5].tolist()})"
        )
    return out


def demote(primary: torch.Tensor, demoted: torch.Tensor) -> torch.Tensor:
    """Rank every group in ``demoted`` after every other group, keeping ``primary`` order inside
    each part."""
    span = float(primary.max() - primary.min()) + 1.0
    return primary - demoted.to(primary.dtype) * span
