"""RunSpec: the frozen identity of one run (HELM-style). Its canonical JSON's sha256 is the run key.

No torch here: the registry and reports import this module.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from supportbench.errors import SpecError

VARIANTS = ("static", "dirr")
SPLITS = ("calibration", "final", "replication")
PREFIXES = ("objective.", "method.", "benchmark.")  # options of the objective, the method, the benchmark
SCHEMA = 1

# Defaults for the tiny CPU presets; real models set their own (open-unlearning: lr 1e-5).
DEFAULT_HYPERPARAMETERS: dict[str, Any] = {
    "lr": 1e-2, "batch_size": 8, "weight_decay": 0.01, "warmup_steps": 0, "diag_batch_size": 16,
    "eval_full": False, "selection": "evaluation", "tau": None,
}


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
    budget: float = 0.1          # editable scalars (>= 1) or a fraction of the geometry's total cost (< 1)
    T: int = 200
    t: int = 160                 # DIR-R decision checkpoint
    d: int = 20                  # DIR-R probe length
    rho_p: float = 0.01          # DIR-R probe action
    model: str = "tiny-llama"    # preset name or local model directory
    hyperparameters: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        if isinstance(self.hyperparameters, dict):
            object.__setattr__(self, "hyperparameters", tuple(sorted(self.hyperparameters.items())))
        if self.variant not in VARIANTS:
            raise SpecError(f"variant {self.variant!r} is not allowed; allowed: {', '.join(VARIANTS)}")
        if self.split not in SPLITS:
            raise SpecError(f"split {self.split!r} is not allowed; allowed: {', '.join(SPLITS)}")
        if not isinstance(self.T, int) or self.T <= 0:
            raise SpecError(f"T must be a positive integer, got {self.T!r}")
        if not self.budget or self.budget <= 0:
            raise SpecError(f"budget must be > 0 (scalars, or a fraction < 1), got {self.budget!r}")
        if self.variant == "dirr":
            if not 0 < self.t < self.T:
                raise SpecError(f"DIR-R checkpoint t must satisfy 0 < t < T={self.T}, got {self.t}")
            if self.d <= 0 or self.t + self.d > self.T:
                raise SpecError(f"DIR-R probe length d must satisfy 0 < d <= T - t = {self.T - self.t}, got {self.d}")
        unknown = {k for k, _ in self.hyperparameters} - set(DEFAULT_HYPERPARAMETERS) - {
            k for k, _ in self.hyperparameters if k.startswith(PREFIXES)}
        if unknown:
            raise SpecError(f"unknown hyperparameter(s) {sorted(unknown)}; allowed: "
                            f"{', '.join(sorted(DEFAULT_HYPERPARAMETERS))}, "
                            + ", ".join(f"{p}<name>" for p in PREFIXES))

    def hp(self, key: str) -> Any:
        return dict(self.hyperparameters).get(key, DEFAULT_HYPERPARAMETERS.get(key))

    def prefixed(self, prefix: str) -> dict[str, Any]:
        return {k[len(prefix):]: v for k, v in self.hyperparameters if k.startswith(prefix)}

    def benchmark_options(self) -> dict[str, Any]:
        """Constructor options of the benchmark (``benchmark.data_dir=...``, ``benchmark.finetune.epochs=2``);
        dotted names nest. They are hyperparameters, so they are part of the run's identity."""
        out: dict[str, Any] = {}
        for k, v in sorted(self.prefixed("benchmark.").items()):
            *path, leaf = k.split(".")
            node = out
            for part in path:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise SpecError(f"benchmark option 'benchmark.{k}' conflicts with 'benchmark.{part}'")
            node[leaf] = v
        return out

    def canonical(self) -> dict:
        d = asdict(self)
        d["hyperparameters"] = {k: v for k, v in self.hyperparameters}
        if self.variant == "static":  # checkpoint settings do not change a static run
            for k in ("t", "d", "rho_p"):
                d.pop(k)
        return d

    @property
    def run_key(self) -> str:
        blob = json.dumps({"schema": SCHEMA, **self.canonical()}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    @classmethod
    def from_dict(cls, d: dict) -> RunSpec:
        names = {f.name for f in fields(cls)}
        bad = set(d) - names
        if bad:
            raise SpecError(f"unknown RunSpec field(s) {sorted(bad)}; allowed: {', '.join(sorted(names))}")
        d = dict(d)
        if isinstance(d.get("hyperparameters"), dict):
            d["hyperparameters"] = tuple(sorted(d["hyperparameters"].items()))
        return cls(**d)

    def replace(self, **changes) -> RunSpec:
        return RunSpec.from_dict({**self.canonical_full(), **changes})

    def canonical_full(self) -> dict:
        d = asdict(self)
        d["hyperparameters"] = {k: v for k, v in self.hyperparameters}
        return d
