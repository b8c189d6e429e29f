"""Check a run (or a whole experiment) before any expensive work: every name against its registry
("did you mean"), every option against what its owner accepts, the model folder, and the budget against
the model's geometry (read from its config on the meta device). A failure raises a ``SupportbenchError``
naming the bad value and what is allowed: the CLI exits 2, and nothing is recorded or trained — a
user's mistake is never stored as a failed run.
"""

from __future__ import annotations

import dataclasses
import inspect
from functools import cache
from pathlib import Path

from supportbench.benchmarks.base import BENCHMARKS
from supportbench.errors import SpecError
from supportbench.experiments.plan import ExperimentSpec
from supportbench.experiments.spec import RunSpec
from supportbench.methods.base import METHODS, get_method
from supportbench.methods.diagnostics import _cache_key
from supportbench.unlearning.models import PRESETS, check_model_dir, geometry_shape, is_model_dir
from supportbench.unlearning.objectives import get_objective


def _fits(value, hint) -> bool:
    """Does ``value`` (from TOML or ``--set``) have the type ``hint`` declares? Unknown hints pass (the owner
    checks them); an int passes for a float, a bool never for a number."""
    import types
    import typing

    if hint is typing.Any or hint is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint in (str, Path):
        return isinstance(value, str)
    if origin in (tuple, list) or hint in (tuple, list):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return isinstance(value, list | tuple) and (not args or all(_fits(v, args[0]) for v in value))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True


def _describe(hint) -> str:
    """A type hint in words: ``Literal['a', 'b']`` -> "one of 'a', 'b'"."""
    import typing

    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _hints(target) -> dict:
    import typing

    try:
        return typing.get_type_hints(target if dataclasses.is_dataclass(target) else target.__init__)
    except Exception:  # unresolvable annotations: the owner's own checks apply
        return {}


def check_types(owner: str, target, options: dict, prefix: str) -> None:
    """Every option the user set has the type ``target`` (a dataclass or a class's constructor) declares;
    checked before any model is trained, naming the option, its value and the expected type."""
    hints = _hints(target)
    for k, v in options.items():
        if k in hints and not _fits(v, hints[k]):
            want = _describe(hints[k])
            raise SpecError(f"{owner}: {prefix}{k} = {v!r} must be {want}")
        nested = getattr(target, f"{k}_config", None)   # e.g. benchmark.finetune.epochs -> FinetuneConfig
        if isinstance(v, dict) and dataclasses.is_dataclass(nested):
            allowed = {f.name for f in dataclasses.fields(nested)}
            bad = sorted(set(v) - allowed)
            if bad:
                raise SpecError(f"{owner}: unknown option(s) {', '.join(prefix + k + '.' + b for b in bad)}; allowed: "
                                f"{', '.join(sorted(allowed))}")
            check_types(owner, type(nested) if not isinstance(nested, type) else nested, v, f"{prefix}{k}.")


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

    raise UnknownNameError("model preset or local model directory (with config.json)", model, PRESETS)


def _check_budget(spec: RunSpec) -> None:
    group, total = _shape(spec.model)
    scalars = spec.budget if spec.budget >= 1 else spec.budget * total
    if scalars < group:
        raise SpecError(f"budget {spec.budget!r} = {int(scalars)} editable scalars is below one group of "
                        f"'{spec.model}' ({group} scalars; {total} in all): allowed is >= {group} scalars or a "
                        f"fraction >= {group / total:.3g}")
    if spec.budget >= 1 and spec.budget > total:
        raise SpecError(f"budget {int(spec.budget)} scalars exceeds the {total} editable scalars of '{spec.model}'")


def _check_benchmark(spec: RunSpec) -> None:
    cls = BENCHMARKS.get(spec.benchmark)
    fields = cls.field_names(spec.benchmark_options())
    if spec.field not in fields:
        from supportbench.errors import UnknownNameError

        raise UnknownNameError(f"{spec.benchmark} field", spec.field, fields)
    options = spec.benchmark_options()
    shared = sorted(set(options) & {"cache_dir", "progress", "device", "build", "seed"})
    if shared:
        k = shared[0]
        where = {"build": "the run's own setting: build = N (RunSpec.build, --build N)",
                 "seed": "the construction's seed is the run's theta_0 build: build = N (--build N)",
                 "cache_dir": "--cache / $SUPPORTBENCH_CACHE", "device": "--device", "progress": "not a setting"}[k]
        raise SpecError(f"benchmark.{k} is not a benchmark option: {where}")
    try:
        inspect.signature(cls).bind_partial(**options)
    except TypeError as exc:
        raise SpecError(f"benchmark '{spec.benchmark}' rejects its options {options}: {exc}") from None
    check_types(f"benchmark '{spec.benchmark}'", cls, options, "benchmark.")
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
            raise SpecError(f"benchmark '{spec.benchmark}' runs its interfaces statically; variant "
                            f"{spec.variant!r} is not allowed")
        return
    check_types(f"method '{spec.method}'", METHODS.get(spec.method), spec.prefixed("method."), "method.")
    try:
        m = get_method(spec.method, **spec.prefixed("method."))
    except Exception as exc:  # a constructor's own check: report it as the user's input
        raise SpecError(f"method '{spec.method}' rejects its options {spec.prefixed('method.')}: {exc}") from None
    for key in getattr(m, "requires", ()):
        _cache_key(key)


def validate_spec(spec: RunSpec) -> None:
    """Raise on anything that would make ``spec`` fail for a reason other than the run itself."""
    _check_benchmark(spec)
    objective = get_objective(spec.objective)
    check_types(f"objective '{spec.objective}'", type(objective), spec.prefixed("objective."), "objective.")
    get_objective(spec.objective, **spec.prefixed("objective."))
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
        key = (spec.benchmark, spec.field, spec.objective, spec.method, spec.model, spec.budget, spec.hyperparameters)
        if key not in seen:
            seen.add(key)
            validate_spec(spec)
