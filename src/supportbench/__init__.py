"""supportbench: a reference harness for localized LLM unlearning.

Layers (imports point down only; docs/architecture.md): experiments (plain data) -> unlearning
(torch primitives) -> methods | benchmarks -> registry -> harness | reports -> cli. This module
stays light: it never imports torch, so ``supportbench report``/``audit`` start fast.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("supportbench")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+src"

from supportbench import _cpumode  # noqa: E402

_cpumode.on_import()  # before anything loads torch: the CPU kernels every process computes with

from supportbench.errors import SupportbenchError  # noqa: E402

__all__ = [
    "RunSpec",
    "SupportbenchError",
    "__version__",
    "get_method",
    "list_methods",
    "open_registry",
    "register_method",
    "run",
    "sweep",
]


def __getattr__(name: str):
    # Lazy re-exports: importing these may pull in torch, so only on first use (docs/api.md).
    if name in {"register_method", "list_methods", "get_method"}:
        from supportbench.methods import base

        return getattr(base, name)
    if name in {"run", "sweep", "open_registry"}:
        # the API is the top layer; the root package is imported by every layer (for __version__),
        # so the top layer is loaded by name, only when asked for, and no lower layer ever depends
        # on it
        import importlib

        return getattr(importlib.import_module("supportbench.api"), name)
    if name == "RunSpec":
        from supportbench.experiments.spec import RunSpec

        return RunSpec
    raise AttributeError(name)
