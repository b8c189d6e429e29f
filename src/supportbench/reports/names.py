"""How reports name a method: the ``display_name`` its class declares, read without importing torch.

The names come from the plugin catalog (``catalog.entries("method")``): built-in methods read from
their source files, a plugin method from the file its entry point names, never imported -- a report
must start fast and must not depend on a plugin's heavy imports. A method that declares no name, or
whose value cannot be read from source, is shown under its registered name. Built-ins win over a
plugin of the same name, as in the method registry. The paper's tables keep the names the paper
fixes (``catalog.PAPER_METHODS``: e.g. Static-IV); these names serve the per-method tables and
figures that describe the user's own experiment.
"""

from __future__ import annotations

from functools import lru_cache

from supportbench import catalog

# what J is, printed wherever a report or `run` shows it (issue 36: J with its direction)
J_MEANING = (
    "J = G_F − D_coll (paper Eq. 19): forgetting gain minus collateral damage, in the benchmark's "
    "units; higher = better"
)
VARIANT_NAMES = {
    "dirr": "DIR-R"
}  # a variant's suffix in an arm's name: "Intervention Score + DIR-R"


@lru_cache(maxsize=1)
def display_names() -> dict[str, str]:
    """``{registered name: display name}`` of every method that declares a readable
    ``display_name``."""
    return {
        name: entry.display_name
        for name, entry in catalog.entries("method").items()
        if entry.display_name != name
    }


def method_display(method: str) -> str:
    """The display name of a method, or its registered name when it declares none."""
    return display_names().get(method, method)


def arm_display(method: str, variant: str = "static") -> str:
    """A method run as a variant: ``Intervention Score`` (static),
    ``Intervention Score + DIR-R``."""
    name = method_display(method)
    return name if variant == "static" else f"{name} + {VARIANT_NAMES.get(variant, variant)}"
