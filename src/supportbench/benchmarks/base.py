"""The benchmark protocol: data roles, the prepared base model theta_0 and the evaluator J.

A benchmark (paper §5) supplies
  fields()                      the data fields it can unlearn (e.g. forget10, Email_Address)
  prepare(preset, seed)         theta_0: generated/read data injected into a base model, cached on disk
                                by a content hash of data + preset + training config + seed
  roles(field, seed)            DiagnosticRecords (F/R/P/N) for selection methods, the unlearning train
                                sets, and development / evaluation splits disjoint from the diagnostics
  attach_baseline(theta_0, roles) theta_0's per-item NLLs on the dev/eval splits, before unlearning
  evaluate(model, roles, which) Outcome(J, G_F, D_coll, components), paper Eq. 19
Benchmarks register like methods: ``@register_benchmark("name")`` or the entry-point group
``supportbench.benchmarks``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from supportbench._registry import Registry
from supportbench.errors import UnknownBenchmarkError
from supportbench.unlearning.data import DiagnosticRecords, TokenizedSet


@dataclass(frozen=True)
class Outcome:
    """J = G_F - D_coll (paper Eq. 19, eq:terminal-score-metric); larger is better."""

    J: float
    G_F: float
    D_coll: float
    components: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"J": self.J, "G_F": self.G_F, "D_coll": self.D_coll, "components": self.components}


@dataclass
class EvalSplit:
    """Held-out records for evaluation or development. Deliberately *not* a TokenizedSet: it cannot be
    passed where diagnostic records are expected."""

    name: str
    data: TokenizedSet
    rows: list[dict]                  # the source rows (question, answer, perturbed answers, source, ...)
    prompts: list[str]

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class Roles:
    field: str
    seed: int
    diagnostics: DiagnosticRecords
    forget: TokenizedSet              # unlearning train sets
    retain: TokenizedSet
    splits: dict[str, dict[str, EvalSplit]]   # {"dev": {"forget":..., "retain":..., "protected":...}, "eval": {...}}
    theta0_nll: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)  # filled by attach_baseline
    data_hash: str = ""
    notes: dict[str, Any] = field(default_factory=dict)  # facts about the roles a record should carry


@dataclass
class Prepared:
    model: Any
    tokenizer: Any
    path: str
    model_hash: str
    data_hash: str
    from_cache: bool


class Benchmark(Protocol):
    name: str

    def fields(self) -> list[str]: ...

    def prepare(self, model_preset: str, seed: int = 0) -> Prepared: ...

    def roles(self, field: str, seed: int) -> Roles: ...

    def attach_baseline(self, model, roles: Roles) -> None:
        """Record theta_0's per-item NLLs on every dev/eval split of ``roles`` (J is measured against them)."""
        ...

    def evaluate(self, model, roles: Roles, which: str = "eval", full: bool = False) -> Outcome: ...

    # Optional: a benchmark that defines its own interventions (the controlled separation) lists them in
    # ``INTERFACES``; a run whose method is one of them calls ``intervene(spec, model, roles, objective, data,
    # config) -> support dict`` instead of scoring and training a support.


BENCHMARKS: Registry = Registry(
    "benchmark",
    builtin_modules=["supportbench.benchmarks.tofu.adapter", "supportbench.benchmarks.lacuna.adapter",
                     "supportbench.benchmarks.controlled.adapter"],
    entry_point_group="supportbench.benchmarks",
    error=UnknownBenchmarkError,
)


def register_benchmark(name: str):
    return BENCHMARKS.register(name)


def get_benchmark(name: str, **options) -> Benchmark:
    return BENCHMARKS.get(name)(**options)


def default_cache_dir() -> Path:
    """Where prepared models and generated data are cached: ``$SUPPORTBENCH_CACHE`` or ``./.cache/supportbench``."""
    return Path(os.environ.get("SUPPORTBENCH_CACHE", Path.cwd() / ".cache" / "supportbench"))


def publish(tmp: Path, final: Path) -> None:
    """Atomically move a finished cache entry into place; if another worker got there first (its content
    is identical: same inputs, seeded), keep theirs."""
    try:
        tmp.replace(final)
    except OSError:
        if not final.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def record_theta0_nll(model, roles: Roles) -> None:
    """The usual ``attach_baseline``: theta_0's per-item summed answer NLL on every split of ``roles``."""
    from supportbench.unlearning.data import dataset_nll

    for which, parts in roles.splits.items():
        roles.theta0_nll[which] = {k: dataset_nll(model, s.data)[0] for k, s in parts.items()}
