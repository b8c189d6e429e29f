"""The benchmark protocol: data roles, the prepared base model theta_0 and the evaluator J.

A benchmark (paper §5) is a class that declares
  DEFAULT_MODEL, DEFAULT_FIELD  the model preset and the field a run uses when it names none
  INTERFACES                    the interventions it defines itself (() when runs score and train a
                                support)
  field_names(options)          the fields a run may name, given the ``benchmark.*`` options (a
                                classmethod: checked before any work)
and whose instances provide
  prepare(preset)               theta_0: generated/read data injected into a base model, cached on
                                disk by a content hash of data + preset + training config + build +
                                CPU mode
  roles(field, seed)            DiagnosticRecords (F/R/P/N) for selection methods, the unlearning
                                train sets, and development / evaluation splits disjoint from the
                                diagnostics
  evaluate(model, roles, which) Outcome(J, G_F, D_coll, components), paper Eq. 19, against theta_0's
                                per-item NLLs that ``record_theta0_nll(theta_0, roles)`` stored
                                first
A benchmark with INTERFACES also provides ``intervene`` and ``allowed`` (``InterfaceBenchmark``: the
intervention, and what it may change, for the enforcement count); one that also
freezes its own decision from calibration runs before its final runs (the controlled separation's
primary locator and learning rates, ``harness.controlled``) declares ``Calibrated``'s members, which
registration checks and records (``is_calibrated``): the harness asks the registry, never the class.
Benchmarks register like methods: ``@register_benchmark("name")`` or the entry-point group
``supportbench.benchmarks``; registration checks the declared members (``check_benchmark_class``).

The shared steps are free functions here, not a base class: ``j_components`` + ``to_outcome`` (J),
``check_disjoint`` (roles), ``content_key`` + ``building`` (caches), ``require_prepared`` (call
order).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from supportbench._registry import Registry
from supportbench.benchmarks import evaluators as ev
from supportbench.errors import SpecError, StateError, UnknownBenchmarkError
from supportbench.experiments.identity import source_hash
from supportbench.experiments.paths import cache_root
from supportbench.experiments.record import (
    Outcome,
)  # the record's type: what evaluate returns is stored
from supportbench.experiments.spec import register_default_model, register_path_options
from supportbench.unlearning.data import DiagnosticRecords, TokenizedSet, dataset_nll
from supportbench.unlearning.relearn import RelearnSet


@dataclass
class EvalSplit:
    """Held-out records for evaluation or development. Deliberately *not* a TokenizedSet: it cannot
    be passed where diagnostic records are expected."""

    name: str
    data: TokenizedSet
    rows: list[dict]  # the source rows (question, answer, perturbed answers, source, ...)
    prompts: list[str]

    def __len__(self) -> int:
        return len(self.rows)

    def head(self, n: int) -> EvalSplit:
        """The first ``n`` records (all of them when there are fewer)."""
        k = min(n, len(self.rows))
        return EvalSplit(self.name, self.data.take(range(k)), self.rows[:k], self.prompts[:k])


@dataclass
class Roles:
    field: str
    seed: int
    diagnostics: DiagnosticRecords
    forget: TokenizedSet  # unlearning train sets
    retain: TokenizedSet
    # {"dev": {"forget":..., "retain":..., "protected":...}, "eval": {...}}
    splits: dict[str, dict[str, EvalSplit]]
    # record_theta0_nll
    theta0_nll: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    data_hash: str = ""
    # facts about the roles a record should carry
    notes: dict[str, Any] = field(default_factory=dict)

    def head(self, n: int) -> Roles:
        """These roles with every evaluation split cut to the first ``n`` records of each part,
        theta_0's NLLs alike: a curve's fixed slice, on which a benchmark's ``evaluate`` runs
        unchanged. The training sets, diagnostics and notes are shared, not copied."""
        return dataclasses.replace(
            self,
            splits={w: {k: s.head(n) for k, s in ps.items()} for w, ps in self.splits.items()},
            theta0_nll={
                w: {k: b[: min(n, len(b))] for k, b in ps.items()}
                for w, ps in self.theta0_nll.items()
            },
        )


@dataclass
class Prepared:
    model: Any
    tokenizer: Any
    path: str
    model_hash: str
    data_hash: str
    from_cache: bool


@runtime_checkable
class Benchmark(Protocol):
    """What the runner, the CLI and the validator rely on; every member is declared, none is probed.

    Constructor: ``cls(cache_dir=None, progress=True, device=None, build=0, **options)`` -- every
    benchmark accepts these four keywords (the runner always passes them; ``device`` is where its
    own models train and run, None = the first GPU or the CPU; ``build`` is the run's theta_0 build,
    the seed of every random choice of the construction: generated data, initialisation, batch
    order, interfaces, masks) plus its own options, which come from a run's ``benchmark.*``
    hyperparameters.
    """

    name: str  # set by the registry: the registered name
    DEFAULT_MODEL: ClassVar[str]  # the model preset used when the user names no model
    DEFAULT_FIELD: ClassVar[str]  # the field used when the user names none; in field_names({})
    # interventions it defines itself; () = runs train a support
    INTERFACES: ClassVar[tuple[str, ...]]
    # optional: PATH_OPTIONS: ClassVar[tuple[str, ...]], options whose values are paths (identified
    # by content)

    @classmethod
    def field_names(cls, options: dict) -> tuple[str, ...]:
        """The fields a run may name, given the benchmark's options (``benchmark.*`` without the
        prefix)."""
        ...

    @classmethod
    def check_inputs(cls, options: dict, field: str, settings: dict) -> None:
        """Read what a run of these options needs from disk -- data files, model folders -- and
        refuse (a ``SupportbenchError`` naming the file and what is wrong) what is missing, empty or
        truncated, or a combination the run could not finish (``settings``: the run's resolved
        settings, e.g. eval_full); before any model is built (``harness.resolve``). A benchmark
        that reads nothing checks nothing."""
        ...

    def prepare(self, model_preset: str) -> Prepared: ...

    def roles(self, field: str, seed: int) -> Roles: ...

    def evaluate(self, model, roles: Roles, which: str = "eval", full: bool = False) -> Outcome: ...


@runtime_checkable
class InterfaceBenchmark(Benchmark, Protocol):
    """A benchmark that defines its own interventions (the controlled separation): a run whose
    method is one of ``INTERFACES`` calls ``intervene`` instead of scoring and training a
    support."""

    def intervene(self, spec, model, roles: Roles, objective, data, config, on_step=None) -> dict:
        """Unlearn ``roles``' forget set through the interface ``spec.method``; returns the support
        record. ``on_step``: None, or called with the step number after every step (the run's
        curve, ``eval_every``; it only reads the model)."""
        ...

    def allowed(self, model, method: str) -> Mapping[str, torch.Tensor]:
        """The coordinates of ``model`` the interface ``method`` may change, by tensor name (a
        boolean mask of the tensor's shape; a name left out may not change): the run's enforcement
        count compares the trained model with theta_0 against it (``unlearning.enforcement``)."""
        ...


@runtime_checkable
class Calibrated(InterfaceBenchmark, Protocol):
    """An interface benchmark that freezes its own decision before its final runs
    (``harness.controlled``): the calibration fields are run through every interface on a grid of
    learning rates, the locators are scored on them, and the decision is frozen before any final
    field runs. Registration records a class that declares these members (``is_calibrated``); one
    that declares some of them but not all is refused."""

    # field -> how well theta_0 learned it (construction data), set by prepare()
    recall: dict[str, float]

    @classmethod
    def calibration_fields(cls, options: dict) -> tuple[str, ...]:
        """The fields the decision is frozen from: in ``field_names(options)``, never a final run's
        field."""
        ...

    def calibration_aurocs(self) -> dict[str, float | None]:
        """Every locator's AUROC on the calibration fields, computed by ``prepare`` (construction
        data)."""
        ...


@runtime_checkable
class Relearnable(Benchmark, Protocol):
    """A benchmark the relearning attack (``relearn_steps`` > 0; ``unlearning.relearn``) runs on:
    it names, for one run's roles, the records outside every role the attacker trains on, its
    forget units with their probes and targets, and its greedy generation. A benchmark without
    ``relearn_set`` refuses the attack before anything runs (``harness.resolve``)."""

    def relearn_set(self, roles: Roles) -> RelearnSet: ...


def _takes(fn, keyword: str) -> bool:
    """Whether ``fn`` accepts ``keyword`` (by name or through **kwargs); True when its signature
    cannot be read (the call will tell)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in params)


def is_relearnable(cls) -> bool:
    return callable(getattr(cls, "relearn_set", None))


_INTERFACE_METHODS = (
    "intervene(self, spec, model, roles, objective, data, config, on_step=None) -> dict",
    "allowed(self, model, method) -> Mapping[str, Tensor]",
)
# the constructor keywords the runner passes every benchmark: never a user's benchmark.* option
SHARED_KEYWORDS = ("cache_dir", "progress", "device", "build")
_MISSING = object()
_CLASS_ATTRS = (
    ("DEFAULT_MODEL", "the model preset used when a run names no model"),
    ("DEFAULT_FIELD", "the field used when a run names none"),
)
_METHODS = (
    "field_names(cls, options) -> tuple[str, ...]",
    "check_inputs(cls, options, field, settings)",
    "prepare(self, model_preset) -> Prepared",
    "roles(self, field, seed) -> Roles",
    "evaluate(self, model, roles, which='eval', full=False) -> Outcome",
)


def check_benchmark_class(name: str, cls) -> None:
    """Refuse (TypeError) a class registered as benchmark ``name`` that lacks a declared member of
    ``Benchmark``, declares one with the wrong type, has a DEFAULT_FIELD outside
    ``field_names({})``, INTERFACES without ``intervene``, or a constructor without the shared
    keywords; the message names the class, the member and what is expected."""

    def refuse(what: str):
        where = f"{cls.__module__}.{cls.__qualname__}" if isinstance(cls, type) else repr(cls)
        raise TypeError(
            f"benchmark '{name}' ({where}) {what} (see supportbench.benchmarks.base.Benchmark)"
        )

    if not isinstance(cls, type):
        refuse(
            "is not a class: register the class, it is constructed once per run's benchmark options"
        )
    for attr, meaning in _CLASS_ATTRS:
        value = getattr(cls, attr, _MISSING)
        if value is _MISSING:
            refuse(f"lacks {attr}: declare `{attr}: ClassVar[str]`, {meaning}")
        if not isinstance(value, str):
            refuse(f"{attr} must be a str, got {type(value).__name__} {value!r}")
    interfaces = getattr(cls, "INTERFACES", _MISSING)
    if interfaces is _MISSING:
        refuse(
            "lacks INTERFACES: declare `INTERFACES = ()`, or the names of the interventions it "
            "defines (with intervene())"
        )
    if not isinstance(interfaces, tuple) or not all(isinstance(i, str) for i in interfaces):
        refuse(f"INTERFACES must be a tuple of str, got {interfaces!r}")
    for signature in _METHODS:
        method = signature.split("(")[0]
        if not callable(getattr(cls, method, None)):
            refuse(f"lacks the method {signature}")
    for member in ("field_names", "check_inputs"):
        if not isinstance(inspect.getattr_static(cls, member), (classmethod, staticmethod)):
            refuse(f"{member} must be a classmethod: it is checked before any benchmark is built")
    for signature in _INTERFACE_METHODS if interfaces else ():
        if not callable(getattr(cls, signature.split("(")[0], None)):
            refuse(f"declares INTERFACES {interfaces!r} but lacks the method {signature}")
    if interfaces and not _takes(cls.intervene, "on_step"):
        refuse(f"intervene must accept on_step=None (a run's curve hook): {_INTERFACE_METHODS[0]}")
    try:
        inspect.signature(cls).bind_partial(cache_dir=None, progress=True, device=None, build=0)
    except ValueError:  # no introspectable signature: the runner's call will tell
        pass
    except TypeError:
        refuse(
            f"constructor {cls.__name__}{inspect.signature(cls)} must accept the keywords "
            "cache_dir=None, progress=True, device=None and build=0 (the runner passes all four)"
        )
    try:
        fields = cls.field_names({})
    except Exception as exc:
        refuse(
            f"field_names({{}}) raised {type(exc).__name__}: "
            f"{exc}; it must give the fields of the default options"
        )
    if not isinstance(fields, tuple) or not all(isinstance(f, str) for f in fields):
        refuse(f"field_names({{}}) must return a tuple of str, got {fields!r}")
    if cls.DEFAULT_FIELD not in fields:
        refuse(
            f"DEFAULT_FIELD {cls.DEFAULT_FIELD!r} is not "
            f"one of field_names({{}}): {', '.join(fields)}"
        )
    path_options = getattr(cls, "PATH_OPTIONS", ())
    if not isinstance(path_options, tuple) or not all(isinstance(o, str) for o in path_options):
        refuse(f"PATH_OPTIONS must be a tuple of option names (str), got {path_options!r}")
    calibrated = _check_calibrated(cls, refuse)
    try:  # RunSpec resolves a run that names no model from this table (it cannot import benchmarks)
        register_default_model(name, cls.DEFAULT_MODEL)
    except SpecError as exc:
        refuse(str(exc))
    register_path_options(path_options)
    if calibrated:
        _CALIBRATED.add(cls)


# the registered classes that declare Calibrated (check_benchmark_class)
_CALIBRATED: set[type] = set()
_CALIBRATION_MEMBERS = ("calibration_fields", "calibration_aurocs")


def _check_calibrated(cls, refuse) -> bool:
    """Whether ``cls`` declares ``Calibrated``'s members; refuses a partial declaration or one
    without interfaces to calibrate."""
    declared = [m for m in _CALIBRATION_MEMBERS if callable(getattr(cls, m, None))]
    if not declared:
        return False
    if len(declared) < len(_CALIBRATION_MEMBERS):
        missing = sorted(set(_CALIBRATION_MEMBERS) - set(declared))
        refuse(
            f"declares {', '.join(declared)} but lacks {', '.join(missing)}: a benchmark that "
            "freezes its own decision declares every member of Calibrated"
        )
    if not cls.INTERFACES:
        refuse(
            "declares Calibrated's members but no INTERFACES: "
            "the calibration runs go through its interfaces"
        )
    if not isinstance(
        inspect.getattr_static(cls, "calibration_fields"), (classmethod, staticmethod)
    ):
        refuse(
            "calibration_fields must be a classmethod: the calibration runs are planned before any "
            "benchmark is built"
        )
    return True


def is_calibrated(cls) -> bool:
    """Whether the registered benchmark class ``cls`` freezes its own decision (``Calibrated``)."""
    return cls in _CALIBRATED


def calibration_fields(cls, options: dict) -> tuple[str, ...]:
    """The calibration fields of a registered benchmark class under ``options``; () when it
    calibrates nothing (every field is a final one)."""
    return tuple(cls.calibration_fields(options)) if is_calibrated(cls) else ()


BENCHMARKS: Registry = Registry(
    "benchmark",
    builtin_modules=[
        "supportbench.benchmarks.tofu.adapter",
        "supportbench.benchmarks.lacuna.adapter",
        "supportbench.benchmarks.controlled.adapter",
    ],
    entry_point_group="supportbench.benchmarks",
    error=UnknownBenchmarkError,
    check=check_benchmark_class,
)


def register_benchmark(name: str):
    """Class decorator: ``@register_benchmark("tofu")``; refuses a class that does not declare the
    protocol."""
    return BENCHMARKS.register(name)


def get_benchmark(name: str, **options) -> Benchmark:
    return BENCHMARKS.get(name)(**options)


def default_cache_dir() -> Path:
    """Where prepared models and generated data are cached when no cache is given
    (``experiments.paths``): ``$SUPPORTBENCH_CACHE``, else the user's cache directory — never the
    current folder."""
    return cache_root()


def build_code(cls) -> str:
    """What builds a benchmark's cached theta_0 and data: the code (``source_hash``: syntax trees,
    so comments, docstrings and layout do not count) of the torch primitives that train it and of
    the benchmark's own package, and the CPU kernels this process computes with
    (``models.cpu_mode``). Part of every cache key, so changed code, or a process under other
    kernels, builds its own entry instead of reusing a model it would not produce."""
    from supportbench.unlearning.models import cpu_mode

    package = Path(inspect.getsourcefile(cls)).resolve().parent
    code = source_hash(
        "unlearning/models.py",
        "unlearning/train.py",
        "unlearning/data.py",
        "unlearning/formats.py",
        package,
    )
    return f"{code}:{cpu_mode()}"


def content_key(*parts) -> str:
    """The cache key of everything that determines a cached artifact: 16 hex digits of the SHA-256
    of the parts as canonical JSON. Changing this changes every cached theta_0's path (and a rebuild
    takes the demo's better part), so it stays byte-identical to the keys already on disk."""
    return hashlib.sha256(
        json.dumps(list(parts), sort_keys=True, default=str).encode()
    ).hexdigest()[:16]


def publish(tmp: Path, final: Path) -> None:
    """Atomically move a finished cache entry into place; if another worker got there first (its
    content is identical: same inputs, seeded), keep theirs."""
    try:
        tmp.replace(final)
    except OSError:
        if not final.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def building(final: Path) -> Iterator[Path]:
    """``with building(final) as tmp:`` write a cache entry into ``tmp`` (this process's own sibling
    of ``final``; nothing is created until the body writes it), then ``publish`` it; on an exception
    ``tmp`` is removed and the exception propagates, so no half-built entry is left behind."""
    tmp = final.with_name(final.name + f".tmp{os.getpid()}")
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final.parent.mkdir(parents=True, exist_ok=True)
    publish(tmp, final)


def require_prepared(prepared, what: str) -> None:
    """StateError "call prepare() before {what}" while ``prepared`` is None."""
    if prepared is None:
        raise StateError(f"call prepare() before {what}")


def check_disjoint(
    field: str, diagnostic_rows: Iterable[dict], splits: dict[str, dict[str, EvalSplit]]
) -> None:
    """SpecError when a row of ``splits`` ({which: {name: EvalSplit}}, the dev and eval splits) has
    the (question, answer) pair of a diagnostic row: selection methods must never see an evaluated
    item."""
    diag = {(r["question"], r["answer"]) for r in diagnostic_rows}
    for which, parts in splits.items():
        for name, s in parts.items():
            clash = [r["question"] for r in s.rows if (r["question"], r["answer"]) in diag]
            if clash:
                raise SpecError(
                    f"{field}: {which}/{name} overlaps the diagnostic records ({clash[0]!r})"
                )


EVAL_ROLES = ("forget", "retain", "protected")


def role_splits(
    split: Callable[[str, list[dict]], EvalSplit], **parts: tuple[list[dict], ...]
) -> dict[str, dict[str, EvalSplit]]:
    """``Roles.splits`` from rows: each keyword names a split (``dev=``, ``eval=``, ...) and gives
    its rows role by role in the order of ``EVAL_ROLES`` (a shorter tuple leaves the last roles
    out); ``split(role, rows)`` is the benchmark's own ``EvalSplit`` builder."""
    return {
        which: {role: split(role, rows) for role, rows in zip(EVAL_ROLES, by_role)}
        for which, by_role in parts.items()
    }


def record_theta0_nll(model, roles: Roles) -> None:
    """theta_0's per-item summed answer NLL on every split of ``roles``; ``evaluate`` measures J
    against it, so call it once per roles object with theta_0, before any unlearning."""
    for which in roles.splits:
        roles.theta0_nll[which] = theta0_nll(model, roles, which)


def theta0_nll(model, roles: Roles, which: str) -> dict[str, torch.Tensor]:
    """``model``'s (theta_0's) per-item summed answer NLL on each part of a split."""
    return {k: dataset_nll(model, s.data)[0] for k, s in roles.splits[which].items()}


@torch.no_grad()
def j_components(
    model, roles: Roles, which: str, allowed: Iterable[str] | None = None
) -> tuple[dict, dict]:
    """Paper Eq. 19 on ``roles.splits[which]`` (parts forget, retain, protected): each part's
    per-item summed answer NLL under ``model`` minus theta_0's (``roles.theta0_nll[which]``) gives
    G_F, D_coll and J (``evaluators.terminal_score``); each part's mean probability is added as
    ``{part}_prob``. ``allowed``: the splits this benchmark evaluates (default: all of
    ``roles.splits``). Returns (components with J, G_F, D_coll; {part: (summed NLL, tokens)} for
    metrics that reuse it)."""
    allowed = tuple(roles.splits if allowed is None else allowed)
    if which not in allowed or which not in roles.splits:
        raise SpecError(f"unknown split {which!r}; allowed: {', '.join(allowed)}")
    if which not in roles.theta0_nll:
        raise StateError("record_theta0_nll(theta_0, roles) must run before evaluate()")
    parts = roles.splits[which]
    nll = {k: dataset_nll(model, s.data) for k, s in parts.items()}
    deltas = {k: s - roles.theta0_nll[which][k] for k, (s, _) in nll.items()}
    comp = ev.terminal_score(deltas["forget"], deltas["retain"], deltas["protected"])
    for k, (s, n) in nll.items():
        comp[f"{k}_prob"] = float(ev.probability(s, n).mean())
    return comp, nll


@torch.no_grad()
def curve_point(model, roles: Roles, items: int | None = None) -> dict:
    """``j_components`` on the curve's slice: the first ``items`` records of each part of the
    evaluation split (None: ``roles`` is the slice already, ``roles.head``), against theta_0's
    NLLs of the same records (J, G_F, D_coll and each part's mean probability). The slice is fixed
    for the run, so its points are comparable step to step; the terminal model is scored on the
    whole split as always."""
    return j_components(model, roles if items is None else roles.head(items), "eval")[0]


class Evaluated(Outcome):
    """An Outcome with the per-item values it was computed from (``name -> one float per item``,
    names as in ``j_items``). The runner keeps them beside the record (``ResultsDir.items``: NLLs,
    truth ratios, from which an aggregate such as forget quality can be computed again) and records
    the plain Outcome."""

    items: dict[str, list[float]] = {}

    def outcome(self) -> Outcome:
        return Outcome(J=self.J, G_F=self.G_F, D_coll=self.D_coll, components=self.components)


def j_items(roles: Roles, which: str, nll: dict) -> dict[str, list[float]]:
    """The per-item values behind ``j_components``: for each part, the summed answer NLL under the
    model (``nll:<part>``) and under theta_0 (``nll_theta0:<part>``), and its answer-token count
    (``tokens:<part>``)."""
    base = roles.theta0_nll[which]
    out = {}
    for k, (s, n) in nll.items():
        out.update(
            {f"nll:{k}": s.tolist(), f"nll_theta0:{k}": base[k].tolist(), f"tokens:{k}": n.tolist()}
        )
    return out


def to_outcome(components: dict, items: dict[str, list[float]] | None = None) -> Outcome:
    """The Outcome of ``j_components``' dict (plus any benchmark components): J, G_F and D_coll are
    taken out, everything else stays a component; with ``items``, an ``Evaluated`` carrying them."""
    J, G, D = components.pop("J"), components.pop("G_F"), components.pop("D_coll")
    if items:
        return Evaluated(J=J, G_F=G, D_coll=D, components=components, items=items)
    return Outcome(J=J, G_F=G, D_coll=D, components=components)
