"""Outcome-blind storage locators of the controlled separation (paper §5.2): a registry like the
selection methods' (``base.py``) and one file per locator."""

from supportbench.benchmarks.controlled.locators.base import (
    LOCATORS,
    Locator,
    LocatorInputs,
    check_inputs,
    compute_locator_scores,
    get_locator,
    list_locators,
    locate_all,
    register_locator,
)

__all__ = [
    "LOCATORS",
    "Locator",
    "LocatorInputs",
    "check_inputs",
    "compute_locator_scores",
    "get_locator",
    "list_locators",
    "locate_all",
    "register_locator",
]
