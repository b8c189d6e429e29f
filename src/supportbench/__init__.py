"""supportbench: a reference harness for localized LLM unlearning.

Layers (imports point down only; docs/architecture.md): experiments (plain data) -> unlearning (torch
primitives) -> methods | benchmarks -> registry -> harness | reports -> cli. This module stays light:
it never imports torch, so ``supportbench report``/``audit`` start fast.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("supportbench")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+src"

from supportbench.errors import SupportbenchError  # noqa: E402

__all__ = ["SupportbenchError", "__version__", "register_method", "list_methods", "get_method"]


def __getattr__(name: str):
    # Lazy re-exports: importing these pulls in torch, so only on first use.
    if name in {"register_method", "list_methods", "get_method"}:
        from supportbench.methods import base

        return getattr(base, name)
    raise AttributeError(name)
