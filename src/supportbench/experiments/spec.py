"""RunSpec: the frozen identity of one run (HELM-style). Its canonical JSON's sha256 is the run key.

A RunSpec is *resolved* when it is built: every setting left out is filled from the one table of
defaults below (``DEFAULT_HYPERPARAMETERS`` and the per-kind-of-model ``MODEL_DEFAULTS``), so the
CLI, the Python API and experiment TOMLs that leave a setting out all name the same run, and the
record stores (and the run key hashes) every setting the run used. A local model is identified by
the content of its files (``experiments.identity``), never by its path.

No torch here: the registry and reports import this module.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from dataclasses import dataclass, fields
from typing import Any, Literal

from supportbench._io import CONTROL
from supportbench._options import check, option
from supportbench.errors import SpecError
from supportbench.experiments import hub
from supportbench.experiments.decisions import ACTIONS

VARIANTS = ("static", "dirr")
SPLITS = ("calibration", "final", "replication")
PREFIXES = (
    "objective.",
    "method.",
    "benchmark.",
)  # options of the objective, the method, the benchmark
SCHEMA = 1
MAX_STEPS = 1_000_000  # T beyond this is a typo, not an experiment (2^63-1 would run forever)
MAX_SEED = 2**63 - 1  # the registry stores seeds as BIGINT

# The model a run uses when it names none, per benchmark: the one table the CLI, Python and TOML
# resolve from (each built-in benchmark's DEFAULT_MODEL is read from here; a plugin's is added when
# it registers).
DEFAULT_MODELS: dict[str, str] = {
    "tofu": "tiny-llama",
    "natural_tofu": "tiny-llama",
    "lacuna": "tiny-olmo3",
    "controlled": "tiny-qwen2",
}
DEFAULT_BUDGET = 0.1
# Settings that do not depend on the model (open-unlearning's batch and weight decay; the rest
# defined here).
DEFAULT_HYPERPARAMETERS: dict[str, Any] = {
    "lr": None,  # by kind of model: MODEL_DEFAULTS
    "batch_size": 8,
    "weight_decay": 0.01,
    "warmup_steps": 0,
    "diag_batch_size": 16,
    # DIR-R selects on development records: on the evaluation split, over a candidate set holding
    # rho = 0, it could never lose to Static-IV (docs/dirr.md)
    "eval_full": False,
    "selection": "development",
    "tau": None,
    # the weights' dtype during a run (frozen coordinates stay in it; the support trains in fp32)
    # and activation checkpointing
    "dtype": "float32",
    "activation_checkpointing": False,
    # the support's gradients by per-column contractions (no whole-tensor gradient buffers: memory)
    "column_grads": False,
    # the answer tokens' logits a chunk at a time, recomputed in backward (no whole-batch logits)
    "chunked_loss": False,
    # curves: J's components on the first curve_items records of each evaluation part every
    # eval_every steps (0: none); shown beside the terminal score, never used to pick a checkpoint;
    # 4 records a part for the curve's cost (docs/reports.md, "Curves": 8 cost 19.5 % of a T = 40
    # TOFU run, 4 cost 13.7 %; chosen 2026-11-27 on cost, no verdict reads a curve)
    "eval_every": 0,
    "curve_items": 4,
    # and the benchmark's own metrics on the slice at each point (evaluate(full=True): TOFU's
    # ROUGE, truth ratios and forget quality, LACUNA's EM, ES and precision; it generates: costly)
    "curve_metrics": False,
    # the relearning attack after the terminal score (0 steps: none; unlearning/relearn.py):
    # LACUNA's mini attack settings (docs/benchmarks.md, "Relearning": at 1e-3 the attack damaged
    # theta_0's own facts instead of relearning; at 1e-4 theta_0 keeps them)
    "relearn_steps": 0,
    "relearn_lr": 1e-4,
    "relearn_batch_size": 8,
}
# A benchmark whose full evaluation (eval_full) is on by default when the option naming its input
# is given (a spec resolved before this default keyed such runs with eval_full = false: pass
# --set eval_full=false to keep those keys): TOFU's forget quality and model utility need a
# retain model, and with a ready one they cost no extra training (without one, eval_full = true
# trains it first: off by default).
FULL_EVALUATION_INPUT = {
    "tofu": "benchmark.retain_model",
    "natural_tofu": "benchmark.retain_model",  # TOFU's evaluation on its natural forget sets
}
# Settings that depend on the kind of model (docs/sweeps.md, "Defaults"):
#   preset  the tiny CPU presets, trained here from scratch: lr 1e-2 (their weights are O(1e-1) and
#           they unlearn in tens of steps); T = 40 (the paper's 200 scaled by 1/5 for the CPU);
#           rho_p = 0.05, because their supports have tens of columns and the paper's 0.01 would
#           swap floor(0.01 M) = 0 of them (a probe that compares S0 with itself).
#   local   a local Hugging Face model (the paper's 2-8B models): open-unlearning's lr 1e-5 and the
#           paper's T = 200, rho_p = 0.01.
# t and d follow T when a spec leaves them out (``checkpoint_of``): the paper's 160 and 20 of 200.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "preset": {"T": 40, "rho_p": 0.05, "lr": 1e-2},
    "local": {"T": 200, "rho_p": 0.01, "lr": 1e-5},
}


def checkpoint_of(T: int) -> tuple[int, int]:
    """(t, d) of a run that names only T: t = floor(0.8 T), d = max(1, floor(0.1 T)) -- the paper's
    160 and 20 of 200, and the presets' 32 and 4 of 40."""
    return T * 4 // 5, max(1, T // 10)


def model_kind(model: str) -> str:
    """``local`` for a model directory (a path: it contains a separator or starts with '.' or '~')
    or a local model's content identity as a record stores it (``local:<hash>``), else ``preset`` (a
    name, checked against the presets before any work)."""
    if model.startswith("local:") or "/" in model or "\\" in model or model.startswith((".", "~")):
        return "local"
    return "preset"


def default_model(benchmark: str) -> str:
    """The model a run of ``benchmark`` uses when it names none (``DEFAULT_MODELS``)."""
    try:
        return DEFAULT_MODELS[benchmark]
    except KeyError:
        known = ", ".join(f"{b} -> {m}" for b, m in sorted(DEFAULT_MODELS.items()))
        raise SpecError(
            f"benchmark {benchmark!r} has no default model ({known}): name "
            "the model, or import the plugin that registers the benchmark first"
        ) from None


_BUILTIN_DEFAULT_MODELS = dict(DEFAULT_MODELS)
# Options that name a file or folder: a run's identity holds their content's hash, not the path (a
# benchmark declares its own in PATH_OPTIONS; they are added here when it registers).
PATH_OPTIONS: set[str] = {"benchmark.data_dir", "benchmark.mask", "benchmark.adapter"}


def register_default_model(benchmark: str, model: str) -> None:
    """Record a registered benchmark's DEFAULT_MODEL (a plugin's; a built-in's must equal the
    table's)."""
    have = _BUILTIN_DEFAULT_MODELS.get(benchmark, model)
    if have != model:
        raise SpecError(
            f"benchmark {benchmark!r} declares DEFAULT_MODEL {model!r}, but its default model is "
            f"{have!r} (experiments.spec.DEFAULT_MODELS)"
        )
    DEFAULT_MODELS[benchmark] = model


def register_path_options(names) -> None:
    """Benchmark options (without the ``benchmark.`` prefix) whose values are paths: identified by
    content."""
    PATH_OPTIONS.update(f"benchmark.{n}" for n in names)


def model_defaults(model: str) -> dict[str, Any]:
    return MODEL_DEFAULTS[model_kind(model)]


DTYPES = ("float32", "bfloat16", "float16")


FLOAT_HYPERPARAMETERS = ("lr", "weight_decay", "tau")


def _normal(key: str, value):
    """One JSON form per number: the float settings as floats (``0`` -> ``0.0``); an option of an
    objective, method or benchmark that is a whole float as an int (``2.0`` -> ``2``: its owner's
    type is not known here)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return value
    if key in FLOAT_HYPERPARAMETERS:
        return float(value)
    if key.startswith(PREFIXES) and isinstance(value, float) and value == int(value):
        return int(value)
    return value


def spec_key(canonical: dict) -> str:
    """The run key of a canonical spec (``RunSpec.canonical()``, as every record stores it)."""
    blob = json.dumps({"schema": SCHEMA, **canonical}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _num(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x)


# Every run setting's one declaration (``_options``): read by RunSpec, the CLI's --help and the
# docs.
RUN_SETTINGS: dict[str, Any] = {
    "lr": option(
        float, gt=0, le=1, doc="the support's AdamW learning rate (default: by kind of model)"
    ),
    "batch_size": option(
        int, ge=1, le=65_536, unit="rows", doc="forget (and retain) rows per step"
    ),
    "weight_decay": option(float, ge=0, le=1, doc="AdamW's decoupled weight decay on the support"),
    "warmup_steps": option(
        int, ge=0, le=MAX_STEPS, unit="steps", doc="linear warm-up (must be < T)"
    ),
    "diag_batch_size": option(int, ge=1, le=65_536, unit="rows", doc="rows per diagnostics pass"),
    "eval_full": option(
        bool, doc="also TOFU's forget quality and model utility (needs a retain model)"
    ),
    "selection": option(
        Literal["evaluation", "development"],
        doc="the records DIR-R picks its candidate on (evaluation: it cannot lose to Static-IV)",
    ),
    "tau": option(
        float | None, ge=-1e12, le=1e12, doc="an unfrozen DIR-R threshold (below 0: always trigger)"
    ),
    "dtype": option(
        Literal["float32", "bfloat16", "float16"],
        doc="the frozen weights' dtype (the support trains in float32)",
    ),
    "activation_checkpointing": option(
        bool, doc="recompute activations in the backward pass (memory)"
    ),
    "column_grads": option(
        bool,
        doc="the support's gradients by per-column contractions, without whole-tensor gradient "
        "buffers (memory; the same gradients to summation order)",
    ),
    "chunked_loss": option(
        bool,
        doc="the answer tokens' NLLs a chunk of logits at a time, recomputed in backward, without "
        "the whole batch's logits (memory; the same NLLs to summation order)",
    ),
    "eval_every": option(
        int,
        ge=0,
        le=10**9,
        doc="a curve: J's components on a fixed evaluation slice every K steps (0: none); the "
        "terminal model is scored as always, no checkpoint is chosen by the curve",
    ),
    "curve_items": option(
        int, ge=1, le=10**6, doc="the curve's slice: the first N records of each evaluation part"
    ),
    "curve_metrics": option(
        bool,
        doc="a curve point also carries the benchmark's own metrics on the slice (its full "
        "evaluation: ROUGE, forget quality, EM/ES, precision...; generates, so it costs more)",
    ),
    "relearn_steps": option(
        int,
        ge=0,
        le=10**6,
        doc="the relearning attack: steps of fine-tuning on data outside every role after the "
        "terminal score, then LACUNA's resurfacing counts (0: none)",
    ),
    "relearn_lr": option(float, gt=0, le=1, doc="the relearning attack's peak learning rate"),
    "relearn_batch_size": option(int, ge=1, le=65_536, doc="the relearning attack's batch size"),
}


# Settings left out of a run's key while their switch is off, so every run keeps the key it had
# before the setting existed: (switch, the settings it takes out).
_LEFT_OUT_WHEN_OFF = (
    ("column_grads", ("column_grads",)),  # the default gradients
    ("chunked_loss", ("chunked_loss",)),  # and loss
    ("eval_every", ("eval_every", "curve_items", "curve_metrics")),  # a run without a curve
    ("curve_metrics", ("curve_metrics",)),  # a curve of J's components alone
    ("relearn_steps", ("relearn_steps", "relearn_lr", "relearn_batch_size")),  # no relearning
)


@dataclass(frozen=True)
class RunSpec:
    benchmark: str
    field: str
    objective: str
    method: str
    seed: int = 0
    variant: str = "static"
    split: str = "final"
    experiment: str = "adhoc"
    budget: float = (
        DEFAULT_BUDGET  # editable scalars (>= 1) or a fraction of the geometry's total cost (< 1)
    )
    T: int | None = (
        None  # None: the model's default (MODEL_DEFAULTS), filled in when the spec is built
    )
    t: int | None = None  # DIR-R decision checkpoint
    d: int | None = None  # DIR-R probe length
    rho_p: float | None = None  # DIR-R probe action
    model: str | None = (
        None  # preset name or local model directory; None: the benchmark's DEFAULT_MODELS
    )
    hyperparameters: tuple[tuple[str, Any], ...] = ()
    # the theta_0 build: the seed of every random choice the benchmark's construction makes
    # (generated data, initialisation, batch order, interfaces, masks); runs of different builds are
    # never paired or pooled except as replications (docs/findings.md)
    build: int = 0

    def __post_init__(self):
        hp = self.hyperparameters
        if isinstance(hp, dict):
            hp = tuple(hp.items())
        if not isinstance(hp, tuple | list) or not all(
            isinstance(kv, tuple | list) and len(kv) == 2 for kv in hp
        ):
            raise SpecError(
                f"hyperparameters must be a mapping of setting names to values, got {hp!r:.80}"
            )
        self._record_given(hp)
        # the benchmark's default model, a name like the others
        if self.model is None and isinstance(self.benchmark, str):
            object.__setattr__(self, "model", default_model(self.benchmark))
        self._check_names()
        self._resolve(hp)
        self._check_numbers()
        self._check_dirr_settings()
        self._check_hyperparameters()

    def _record_given(self, hp: tuple) -> None:
        """Keep what the caller named (``replace`` re-resolves everything else under the changed
        fields)."""
        object.__setattr__(
            self,
            "_given",
            {
                **{
                    n: getattr(self, n)
                    for n in ("T", "t", "d", "rho_p", "model")
                    if getattr(self, n) is not None
                },
                "hyperparameters": {k: v for k, v in hp if v is not None or k != "lr"},
            },
        )

    def _check_names(self) -> None:
        """Every name is a non-empty string of printable text."""
        for name in ("benchmark", "field", "objective", "method", "experiment", "model"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise SpecError(f"{name} must be a non-empty string, got {v!r}")
            if bad := CONTROL.findall(v):  # prints as another name, or reorders what follows it
                raise SpecError(
                    f"{name} {v!r} holds a control character (U+{ord(bad[0]):04X}); "
                    "names are printable text"
                )

    def _resolve(self, hp: tuple) -> None:
        """Every setting left out takes its one default, and every number its one form."""
        defaults = model_defaults(self.model)
        for name in ("T", "rho_p"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, defaults[name])
        if isinstance(self.T, int) and not isinstance(self.T, bool):
            t, d = checkpoint_of(self.T)
            object.__setattr__(self, "t", t if self.t is None else self.t)
            object.__setattr__(self, "d", d if self.d is None else self.d)
        given = dict(hp)
        if given.get("lr", 0) is None:
            given.pop("lr")
        resolved = {**DEFAULT_HYPERPARAMETERS, "lr": defaults["lr"], **given}
        if "eval_full" not in given and given.get(FULL_EVALUATION_INPUT.get(self.benchmark, "")):
            resolved["eval_full"] = True  # its input exists: forget quality costs no extra training
        object.__setattr__(
            self, "hyperparameters", tuple(sorted((k, _normal(k, v)) for k, v in resolved.items()))
        )
        # one number, one key: 64 and 64.0 name the same budget, 0 and 0.0 the same weight decay
        if _num(self.budget) and self.budget >= 1 and self.budget == int(self.budget):
            object.__setattr__(self, "budget", int(self.budget))
        elif _num(self.budget):
            object.__setattr__(self, "budget", float(self.budget))
        if _num(self.rho_p):
            object.__setattr__(self, "rho_p", float(self.rho_p))

    def _check_numbers(self) -> None:
        """seed, build, T, t and d are whole numbers (seed, build and T in range), the budget a
        fraction or a whole number of scalars, and variant and split allowed ones."""
        for name in ("seed", "build", "T", "t", "d"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise SpecError(f"{name} must be a whole number, got {v!r}")
        b = self.budget
        if isinstance(b, bool) or not isinstance(b, int | float) or not math.isfinite(b) or b <= 0:
            raise SpecError(
                f"budget must be > 0 and finite: a fraction of the editable scalars (0 < b < 1) "
                f"or a whole number of scalars (>= 1); got {b!r}"
            )
        if b > 1 and b != int(b):
            raise SpecError(
                f"budget {b!r} is neither a fraction "
                "(0 < b < 1) nor a whole number of scalars (>= 1)"
            )
        if self.variant not in VARIANTS:
            raise SpecError(
                f"variant {self.variant!r} is not allowed; allowed: {', '.join(VARIANTS)}"
            )
        if self.split not in SPLITS:
            raise SpecError(f"split {self.split!r} is not allowed; allowed: {', '.join(SPLITS)}")
        if not 0 < self.T <= MAX_STEPS:
            raise SpecError(
                f"T must be a whole number in 1..{MAX_STEPS:,} (unlearning steps), got {self.T!r}"
            )
        if not 0 <= self.seed <= MAX_SEED:
            raise SpecError(f"seed must be a whole number in 0..2^63-1, got {self.seed!r}")
        if not 0 <= self.build <= MAX_SEED:
            raise SpecError(f"build must be a whole number in 0..2^63-1, got {self.build!r}")

    def _check_dirr_settings(self) -> None:
        """DIR-R's probe action, checkpoint t and probe length d."""
        # a static run never reads them, but one given (and so in the run key) must still be one
        # DIR-R could run with: a value that would be refused for DIR-R is not silently recorded for
        # a static run
        if self.variant == "dirr" or any(k in self._given for k in ("rho_p", "t", "d")):
            if isinstance(self.rho_p, bool) or self.rho_p not in ACTIONS or self.rho_p == 0:
                raise SpecError(
                    f"rho_p {self.rho_p!r} is not a probe action; allowed: "
                    f"{', '.join(str(a) for a in ACTIONS if a > 0)} (the action set A without 0)"
                )
            if not 0 < self.t < self.T:
                raise SpecError(f"DIR-R checkpoint t must satisfy 0 < t < T={self.T}, got {self.t}")
            if self.d <= 0 or self.t + self.d > self.T:
                raise SpecError(
                    "DIR-R probe length d must satisfy "
                    f"0 < d <= T - t = {self.T - self.t}, got {self.d}"
                )

    def _check_hyperparameters(self) -> None:
        """Every hyperparameter is a known one (or an option of the objective, method or benchmark)
        with a value in its range, and warm-up ends before T."""
        unknown = (
            {k for k, _ in self.hyperparameters}
            - set(DEFAULT_HYPERPARAMETERS)
            - {k for k, _ in self.hyperparameters if k.startswith(PREFIXES)}
        )
        if unknown:
            k = sorted(unknown)[0]
            close = difflib.get_close_matches(k, list(DEFAULT_HYPERPARAMETERS), n=1)
            prefixed = " or ".join(repr(f"{p}{k}") for p in PREFIXES)
            raise SpecError(
                f"unknown hyperparameter {k!r}"
                + (
                    f" (did you mean {close[0]!r}?)"
                    if close
                    else f" (an objective's, method's or benchmark's option is named with its "
                    f"prefix: {prefixed})"
                )
                + f"; allowed: {', '.join(sorted(DEFAULT_HYPERPARAMETERS))}, "
                + ", ".join(f"{p}<name>" for p in PREFIXES)
            )
        hp = dict(self.hyperparameters)
        for key, hint in RUN_SETTINGS.items():
            if key in hp and hp[key] is not None:
                check(f"hyperparameter {key}", hp[key], hint)
        if hp["warmup_steps"] >= self.T:
            raise SpecError(
                f"hyperparameter warmup_steps = {hp['warmup_steps']} "
                f"must be < T = {self.T} (a run that never leaves warm-up)"
            )

    def hp(self, key: str) -> Any:
        """A resolved hyperparameter (options of the objective, method or benchmark:
        ``prefixed``)."""
        return dict(self.hyperparameters).get(key)

    def prefixed(self, prefix: str) -> dict[str, Any]:
        return {k[len(prefix) :]: v for k, v in self.hyperparameters if k.startswith(prefix)}

    def benchmark_options(self) -> dict[str, Any]:
        """Constructor options of the benchmark (``benchmark.data_dir=...``,
        ``benchmark.finetune.epochs=2``); dotted names nest. They are hyperparameters, so they are
        part of the run's identity."""
        out: dict[str, Any] = {}
        for k, v in sorted(self.prefixed("benchmark.").items()):
            *path, leaf = k.split(".")
            node = out
            for part in path:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise SpecError(
                        f"benchmark option 'benchmark.{k}' conflicts with 'benchmark.{part}'"
                    )
            node[leaf] = hub.local_path(v, hub.repo_type_of(k)) if k in self._paths() else v
        return out

    def _paths(self) -> set[str]:
        """This spec's benchmark options that name a file or folder (``PATH_OPTIONS``), by their
        name without ``benchmark.``."""
        return {k.removeprefix("benchmark.") for k in PATH_OPTIONS}

    def model_path(self) -> str:
        """The model as a loader reads it: a hub id's snapshot folder (experiments.hub), anything
        else unchanged (a folder, a preset name)."""
        return hub.local_path(self.model)

    def sources(self) -> dict[str, dict]:
        """Where the model and every path option came from, for the record (the identity holds
        their content hashes): a hub id's id, commit and snapshot, a folder's absolute path."""
        out = {"model": hub.source(self.model)}
        for k, v in self.prefixed("benchmark.").items():
            if k in self._paths():
                out[f"benchmark.{k}"] = hub.source(v, hub.repo_type_of(k))
        return {k: v for k, v in out.items() if v is not None}

    def canonical(self) -> dict:
        """The run's identity: every resolved setting; a local model, and every option that names a
        file or folder (``PATH_OPTIONS``), by the content of its files."""
        from supportbench.experiments.identity import content_identity, model_identity

        d = self.canonical_full()
        if model_kind(self.model) == "local" and not self.model.startswith("local:"):
            d["model"] = model_identity(self.model_path())
        for k, v in d["hyperparameters"].items():
            if k in PATH_OPTIONS and isinstance(v, str) and not v.startswith("content:"):
                d["hyperparameters"][k] = content_identity(
                    hub.local_path(v, hub.repo_type_of(k)), option=k
                )
        if self.variant == "static":  # checkpoint settings do not change a static run
            for k in ("t", "d", "rho_p"):
                d.pop(k)
        if not self.build:  # build 0 is the identity every run had before builds: key unchanged
            d.pop("build")
        hp = d["hyperparameters"]
        for switch, keys in _LEFT_OUT_WHEN_OFF:
            if not hp.get(switch):
                for k in keys:
                    hp.pop(k, None)
        return d

    @property
    def run_key(self) -> str:
        return spec_key(self.canonical())

    @classmethod
    def from_dict(cls, d: dict) -> RunSpec:
        names = {f.name for f in fields(cls)}
        bad = set(d) - names
        if bad:
            raise SpecError(
                f"unknown RunSpec field(s) {sorted(bad)}; allowed: {', '.join(sorted(names))}"
            )
        d = dict(d)
        if isinstance(d.get("hyperparameters"), dict):
            d["hyperparameters"] = tuple(sorted(d["hyperparameters"].items()))
        return cls(**d)

    def replace(self, **changes) -> RunSpec:
        """A new spec with ``changes``; every setting this one left to its defaults is resolved
        again under them (another model gets its own lr and T, another benchmark its own default
        model)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("T", "t", "d", "rho_p", "model"):
            if name not in self._given:
                d[name] = None
        d["hyperparameters"] = dict(
            self._given["hyperparameters"]
        )  # a new dict replaces them, as a field
        return RunSpec.from_dict({**d, **changes})

    def canonical_full(self) -> dict:
        """Every field as given and resolved (the model as named: a runnable spec, e.g. for a
        worker)."""
        # not dataclasses.asdict: its deep copy of fields that are scalars (and of hyperparameters,
        # replaced here anyway) was a third of checking a record at ingest (issue 39); the dict is
        # the same
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["hyperparameters"] = dict(self.hyperparameters)
        return d
