"""Check a run (or a whole experiment) before any expensive work. ``harness/resolve.py`` has
checked every name against its registry ("did you mean") and every option against what its owner
declares; ``validate_spec`` then checks the model folder and the budget against the model's
geometry (read from its config on the meta device). A failure raises a ``SupportbenchError`` naming
the bad value and what is allowed: the CLI exits 2, and nothing is recorded or trained — a user's
mistake is never stored as a failed run.
"""

from __future__ import annotations

from functools import cache

from supportbench.benchmarks.base import BENCHMARKS
from supportbench.errors import SpecError
from supportbench.experiments.plan import ExperimentSpec
from supportbench.experiments.spec import RunSpec
from supportbench.harness.resolve import ResolvedRun, resolve
from supportbench.methods.base import METHODS
from supportbench.unlearning.models import PRESETS, check_model_dir, geometry_shape, is_model_dir


@cache
def _shape(model: str) -> tuple[int, int]:
    return geometry_shape(model)


def _check_model(model: str) -> None:
    if model in PRESETS:
        return
    if is_model_dir(model):
        check_model_dir(model)
        return
    from supportbench.errors import UnknownNameError

    raise UnknownNameError(
        "model preset or local model directory (with config.json)", model, PRESETS
    )


def _check_budget(spec: RunSpec) -> None:
    group, total = _shape(spec.model_path())
    scalars = spec.budget if spec.budget >= 1 else spec.budget * total
    if scalars < group:
        raise SpecError(
            f"budget {spec.budget!r} = {int(scalars)} editable scalars is below one group of "
            f"'{spec.model}' ({group} scalars; {total} in all): allowed is >= {group} scalars or a "
            f"fraction >= {group / total:.3g}"
        )
    if spec.budget >= 1 and spec.budget > total:
        raise SpecError(
            f"budget {int(spec.budget)} scalars exceeds "
            f"the {total} editable scalars of '{spec.model}'"
        )


def validate_spec(resolved: ResolvedRun) -> None:
    """Raise on anything that would make the resolved run fail for a reason other than the run
    itself and that ``resolve`` did not check already: the model and the budget."""
    _check_model(resolved.spec.model_path())
    _check_budget(resolved.spec)


def validate_experiment(exp: ExperimentSpec) -> None:
    """Every distinct run of an experiment, resolved and checked up front; the methods an
    experiment names are looked up once each first."""
    for b in exp.benchmarks:
        st = exp.settings(b)
        if not BENCHMARKS.get(b).INTERFACES:
            for m in (*st["methods"], *st["dirr_methods"]):
                METHODS.get(m)
    seen = set()
    for spec in exp.all_runs():
        key = (
            spec.benchmark,
            spec.field,
            spec.objective,
            spec.method,
            spec.model,
            spec.budget,
            spec.hyperparameters,
        )
        if key not in seen:
            seen.add(key)
            validate_spec(resolve(spec))
