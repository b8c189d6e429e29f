"""A run resolved once: the names of a ``RunSpec`` looked up in their registries, every option
checked against what its owner declares, and the objective and the method built, so that
validation, the runner and the code fingerprint read the same objects instead of each looking the
names up again (as torchtune's recipe ``setup()`` builds each component once).

``resolve`` reports a mistake in the order the up-front validation always has: the benchmark (its
name, its options, the field, then the files its options name), the objective (name, options and
their ranges), the method (or the benchmark's own interface). The model folder and the budget
against the model's geometry are checked after it (``harness/validate.py: validate_spec``). A
failure raises a ``SupportbenchError`` naming the bad value and what is allowed.

A ``ResolvedRun`` belongs to one run: its method is an instance of its own, as each run's has
always been (a method object may keep state); the objective is a frozen settings object. This file
is not part of a run's code fingerprint: what it builds is (the method's effective hyperparameters
and ``requires``, the objective's settings; ``harness/fingerprint.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from pathlib import Path

from supportbench._options import check, declared, refuse_undeclared
from supportbench.benchmarks.base import BENCHMARKS, SHARED_KEYWORDS, is_relearnable
from supportbench.errors import SpecError, UnknownNameError
from supportbench.experiments.spec import RunSpec
from supportbench.methods.base import SelectionMethod, get_method
from supportbench.methods.diagnostics import _cache_key
from supportbench.unlearning.models import check_model_dir
from supportbench.unlearning.objectives import Objective, get_objective


@dataclass(frozen=True)
class ResolvedRun:
    """What ``spec`` names, built: the registered benchmark class (instantiated by the runner, once
    per benchmark, options, model and build: a benchmark holds its prepared theta_0), the objective
    with its effective settings, the method instance (None when ``spec.method`` is one of the
    benchmark's own ``INTERFACES``). The options each was given are read from the spec
    (``spec.benchmark_options()``, ``spec.prefixed("objective.")``, ``"method."``)."""

    spec: RunSpec
    benchmark_cls: type
    objective: Objective
    method: SelectionMethod | None

    @property
    def interface(self) -> bool:
        """Whether the run goes through one of the benchmark's own interventions."""
        return self.method is None


def resolve(spec: RunSpec, *, read_inputs: bool = True) -> ResolvedRun:
    """``spec`` resolved (module docstring). ``read_inputs`` also reads what the benchmark's
    options name on disk (``check_inputs``, a retain model folder, ``data_dir``): every run does
    before it starts; a caller that only needs the objects (a code fingerprint, a plan) leaves it
    out."""
    benchmark_cls = BENCHMARKS.get(spec.benchmark)
    _check_benchmark(spec, benchmark_cls, spec.benchmark_options(), read_inputs)
    # name, options, their ranges
    objective = get_objective(spec.objective, **spec.prefixed("objective."))
    if spec.hp("chunked_loss"):  # how its NLLs are computed (``unlearning.chunked_loss``)
        objective = replace(objective, chunked_loss=True)
    method = _method(spec, benchmark_cls, spec.prefixed("method."))
    if method is None and spec.hp("column_grads"):
        raise SpecError(
            f"column_grads = true applies to a support of the down-projection geometry; "
            f"{spec.method!r} is one of {spec.benchmark}'s own interventions, which train "
            "their own parameters (allowed for them: column_grads = false)"
        )
    if spec.hp("eval_every") and spec.variant != "static":
        raise SpecError(
            f"eval_every = {spec.hp('eval_every')}: curves are built for static runs (of a "
            "selection method or a benchmark's own intervention); a DIR-R run trains several "
            "branches after its checkpoint, not one path (allowed for it: eval_every = 0)"
        )
    if spec.hp("curve_metrics") and not spec.hp("eval_every"):
        raise SpecError(
            "curve_metrics = true adds the benchmark's metrics to a curve's points, and this run "
            "has no curve (eval_every = 0); set eval_every = K > 0 or curve_metrics = false"
        )
    if spec.hp("relearn_steps") and not is_relearnable(benchmark_cls):
        have = sorted(n for n in BENCHMARKS.names() if is_relearnable(BENCHMARKS.get(n)))
        raise SpecError(
            f"relearn_steps = {spec.hp('relearn_steps')}: {spec.benchmark} names no data outside "
            f"its roles for the relearning attack (no relearn_set); benchmarks that do: "
            f"{', '.join(have)} (allowed for {spec.benchmark}: relearn_steps = 0)"
        )
    return ResolvedRun(spec=spec, benchmark_cls=benchmark_cls, objective=objective, method=method)


def check_options(owner: str, target, options: dict, prefix: str) -> None:
    """Every option the user set is one ``target`` (a dataclass or a class's constructor) declares,
    with a value its declaration allows (``_options``); a nested table
    (``benchmark.finetune.epochs``) is checked against the dataclass it configures. Before any model
    loads; the error names the option, the value and what is allowed, or the options there are. The
    names at every depth are checked before any value: an undeclared option is named first."""
    for pre, allowed, values in _tables(owner, target, options, prefix):
        for k, v in values.items():
            check(f"{pre}{k}", v, allowed[k][0])


def _tables(owner: str, target, options: dict, prefix: str) -> list[tuple[str, dict, dict]]:
    """(prefix, declarations, values) of ``options``' own values and of each nested table's, depth
    first; an undeclared name at any depth is refused here (``refuse_undeclared``)."""
    allowed = {k: v for k, v in declared(target).items() if k not in SHARED_KEYWORDS}
    refuse_undeclared(owner, options, allowed, prefix)
    values, nested = {}, []
    for k, v in options.items():
        of = getattr(target, f"{k}_config", None) if isinstance(v, dict) else None
        if dataclasses.is_dataclass(of):
            of = of if isinstance(of, type) else type(of)
            nested += _tables(owner, of, v, f"{prefix}{k}.")
        else:
            values[k] = v
    return [(prefix, allowed, values), *nested]


def _check_benchmark(spec: RunSpec, cls, options: dict, read_inputs: bool) -> None:
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
        raise UnknownNameError(f"{spec.benchmark} field", spec.field, fields)
    if not read_inputs:
        return
    cls.check_inputs(
        options, spec.field, {**dict(spec.hyperparameters), "model": spec.model_path()}
    )
    retain = options.get("retain_model")
    # a folder (not a record's content id), loaded after unlearning: checked now
    if isinstance(retain, str) and not retain.startswith("content:"):
        check_model_dir(retain)
    data_dir = options.get("data_dir")
    if data_dir is not None and not Path(data_dir).is_dir():
        raise SpecError(f"benchmark.data_dir '{data_dir}' does not exist or is not a directory")


def _method(spec: RunSpec, cls, options: dict) -> SelectionMethod | None:
    """The run's method instance, or None for one of the benchmark's own interfaces (which it runs
    statically)."""
    interfaces = cls.INTERFACES
    if interfaces:
        if spec.method not in interfaces:
            raise UnknownNameError(f"{spec.benchmark} interface", spec.method, interfaces)
        if spec.variant != "static":
            raise SpecError(
                f"benchmark '{spec.benchmark}' runs its interfaces statically; variant "
                f"{spec.variant!r} is not allowed"
            )
        return None
    try:
        method = get_method(spec.method, **options)
    except (SpecError, UnknownNameError):  # already names what is wrong
        raise
    except Exception as exc:  # a constructor's own check: report it as the user's input
        raise SpecError(f"method '{spec.method}' rejects its options {options}: {exc}") from None
    for key in getattr(method, "requires", ()):
        _cache_key(key)
    return method
