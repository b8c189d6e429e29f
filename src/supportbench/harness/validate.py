"""Check a run (or a whole experiment) before any expensive work: every name against its registry
("did you mean"), every option against what its owner accepts, the model folder, and the budget
against the model's geometry (read from its config on the meta device). A failure raises a
``SupportbenchError`` naming the bad value and what is allowed: the CLI exits 2, and nothing is
recorded or trained — a user's mistake is never stored as a failed run.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

from supportbench._options import allowed_list, check, declared, did_you_mean
from supportbench.benchmarks.base import BENCHMARKS, SHARED_KEYWORDS
from supportbench.errors import SpecError
from supportbench.experiments.plan import ExperimentSpec
from supportbench.experiments.spec import RunSpec
from supportbench.methods.base import METHODS, get_method
from supportbench.methods.diagnostics import _cache_key
from supportbench.unlearning.models import PRESETS, check_model_dir, geometry_shape, is_model_dir
from supportbench.unlearning.objectives import get_objective


def check_options(owner: str, target, options: dict, prefix: str) -> None:
    """Every option the user set is one ``target`` (a dataclass or a class's constructor) declares,
    with a value its declaration allows (``_options``); a nested table
    (``benchmark.finetune.epochs``) is checked against the dataclass it configures. Before any model
    loads; the error names the option, the value and what is allowed, or the options there are."""
    allowed = {k: v for k, v in declared(target).items() if k not in SHARED_KEYWORDS}
    for k, v in options.items():
        if k not in allowed:
            raise SpecError(
                f"{owner} has no option '{prefix}{k}'{did_you_mean(k, allowed, prefix)}; "
                + allowed_list(allowed, prefix)
            )
        nested = getattr(target, f"{k}_config", None)
        if isinstance(v, dict) and dataclasses.is_dataclass(nested):
            check_options(
                owner, type(nested) if not isinstance(nested, type) else nested, v, f"{prefix}{k}."
            )
        else:
            check(f"{prefix}{k}", v, allowed[k][0])


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
    group, total = _shape(spec.model)
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


def _check_benchmark(spec: RunSpec) -> None:
    cls = BENCHMARKS.get(spec.benchmark)
    options = spec.benchmark_options()
    shared = sorted(set(options) & {*SHARED_KEYWORDS, "seed"})
    if shared:
        k = shared[0]
        where = {
            "build": "the run's own setting: build = N (RunSpec.build, --build N)",
            "seed": "the construction's seed is the run's theta_0 build: build = N (--build N)",
            "cache_dir": "--cache / $SUPPORTBENCH_CACHE",
            "device": "--device",
            "progress": "not a setting",
        }[k]
        raise SpecError(f"benchmark.{k} is not a benchmark option: {where}")
    check_options(f"benchmark '{spec.benchmark}'", cls, options, "benchmark.")
    # the fields after the options: they may follow from an option (controlled: n_targets), which
    # must be in its range first (n_targets = 0 read as "no field t00", 10^8 ran out of memory
    # listing them)
    fields = cls.field_names(options)
    if spec.field not in fields:
        from supportbench.errors import UnknownNameError

        raise UnknownNameError(f"{spec.benchmark} field", spec.field, fields)
    cls.check_inputs(options, spec.field, {**dict(spec.hyperparameters), "model": spec.model})
    retain = options.get("retain_model")
    if isinstance(retain, str) and not retain.startswith(
        "content:"
    ):  # a folder (not a record's content id),
        check_model_dir(retain)  # loaded after unlearning: checked now
    data_dir = options.get("data_dir")
    if data_dir is not None and not Path(data_dir).is_dir():
        raise SpecError(f"benchmark.data_dir '{data_dir}' does not exist or is not a directory")


def _check_method(spec: RunSpec) -> None:
    interfaces = BENCHMARKS.get(spec.benchmark).INTERFACES
    if interfaces:
        if spec.method not in interfaces:
            from supportbench.errors import UnknownNameError

            raise UnknownNameError(f"{spec.benchmark} interface", spec.method, interfaces)
        if spec.variant != "static":
            raise SpecError(
                f"benchmark '{spec.benchmark}' runs its interfaces statically; variant "
                f"{spec.variant!r} is not allowed"
            )
        return
    try:
        m = get_method(spec.method, **spec.prefixed("method."))
    except SpecError:
        raise
    except Exception as exc:  # a constructor's own check: report it as the user's input
        raise SpecError(
            f"method '{spec.method}' rejects its options {spec.prefixed('method.')}: {exc}"
        ) from None
    for key in getattr(m, "requires", ()):
        _cache_key(key)


def validate_spec(spec: RunSpec) -> None:
    """Raise on anything that would make ``spec`` fail for a reason other than the run itself."""
    _check_benchmark(spec)
    get_objective(
        spec.objective, **spec.prefixed("objective.")
    )  # its name, options and their ranges
    _check_method(spec)
    _check_model(spec.model)
    _check_budget(spec)


def validate_experiment(exp: ExperimentSpec) -> None:
    """Every distinct run of an experiment, checked up front; names are checked once each."""
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
            validate_spec(spec)
