"""Every error supportbench raises on purpose: each names the bad value and what is allowed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SupportbenchError(Exception):
    """Base class: catch this to handle any user-facing supportbench failure."""


class UnknownNameError(SupportbenchError, KeyError):
    """A name not found in one of the registries (methods, benchmarks, objectives)."""

    def __init__(self, kind: str, name: str, available: Iterable[str], plugins: Iterable[str] = ()):
        self.kind, self.name = kind, name
        available = sorted(available)
        plugins = sorted(plugins)
        close = difflib.get_close_matches(name, available + plugins, n=1, cutoff=0.6)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        listing = ", ".join(a for a in available if a not in plugins) or "(none)"
        if plugins:
            listing += f" (and plugins: {', '.join(plugins)})"
        super().__init__(f"no {kind} '{name}'.{hint}\nAvailable: {listing}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


class UnknownMethodError(UnknownNameError):
    pass


class UnknownObjectiveError(UnknownNameError):
    pass


class UnknownBenchmarkError(UnknownNameError):
    pass


class UnknownLocatorError(UnknownNameError):
    pass


class DuplicateNameError(SupportbenchError):
    pass


class PluginError(SupportbenchError):
    pass


class BudgetError(SupportbenchError, ValueError):
    pass


class GeometryError(SupportbenchError):
    pass


class DivergenceError(SupportbenchError, FloatingPointError):
    """Training produced a non-finite loss (carries the step so the run record can say where), or
    the evaluation a non-finite outcome (``message``)."""

    def __init__(
        self, step: int | None = None, loss: float | None = None, message: str | None = None
    ):
        self.step, self.loss = step, loss
        super().__init__(
            message
            or f"non-finite loss {loss} at step {step}; training stopped (record status 'diverged')"
        )


class MethodOutputError(SupportbenchError):
    pass


class LocatorOutputError(SupportbenchError):
    """A storage locator returned something other than one finite float per target."""


class CheckpointError(SupportbenchError):
    pass


class DataFormatError(SupportbenchError, ValueError):
    """Bad benchmark data on disk; the message names file and line."""


class SpecError(SupportbenchError, ValueError):
    pass


class StateError(SupportbenchError):
    """A call made out of order on a stateful object, e.g. ``roles()`` before ``prepare()``; the
    message names the call that must come first."""


class DecisionError(SupportbenchError):
    pass


class CalibrationError(SupportbenchError):
    pass


class RegistryError(SupportbenchError):
    pass


class ReportError(SupportbenchError):
    """A report that cannot be written where it was asked to be (nothing is written)."""
