"""Experiment specs (TOML) -> the grid of RunSpecs, in the order the protocol needs.

    [experiment]
    name = "mini-paper"
    benchmarks = ["natural_tofu"]
    model = "tiny-llama"
    fields = ["forget10"]
    objectives = ["npo", "simnpo"]
    methods = ["intervention_score", "random", ...]     # Static runs for every method
    dirr_methods = ["intervention_score"]               # DIR-R runs (the paper's method)
    budget = 0.1
    T = 40
    t = 32
    d = 4
    rho_p = 0.01
    [experiment.seeds]
    calibration = [73, 311]
    final = [4099, 8191]
    [hyperparameters]
    lr = 0.01
    [dirr]
    admissible_range = [0.2, 0.8]
    selection = "evaluation"

Calibration seeds run DIR-R only (to calibrate tau*); final and replication seeds run every method
statically plus DIR-R. No torch here: the audit reads the same grid.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from supportbench.errors import SpecError
from supportbench.experiments.spec import SPLITS, RunSpec


def shipped_specs() -> dict[str, Path]:
    """The experiment specs shipped inside the package (``supportbench/experiments/*.toml``), by name."""
    here = Path(__file__).parent
    return {p.stem: p for p in sorted(here.glob("*.toml"))}


def resolve_spec_path(spec: str | Path) -> Path:
    """A spec file's path: the file itself when it exists, else the shipped spec of that name."""
    path = Path(spec)
    if path.exists():
        return path
    shipped = shipped_specs()
    name = path.name[:-5] if path.name.endswith(".toml") else path.name
    if name in shipped and path.parent == Path("."):
        return shipped[name]
    raise SpecError(f"no experiment spec '{spec}': not a file, and not a shipped spec "
                    f"(shipped: {', '.join(shipped) or 'none'})")


CELL = ("experiment", "benchmark", "field", "objective", "method", "variant", "seed", "split")


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    benchmarks: tuple[str, ...]
    fields: tuple[str, ...]
    objectives: tuple[str, ...]
    methods: tuple[str, ...]
    dirr_methods: tuple[str, ...]
    seeds: dict[str, tuple[int, ...]]
    model: str = "tiny-llama"
    budget: float = 0.1
    T: int = 200
    t: int = 160
    d: int = 20
    rho_p: float = 0.01
    hyperparameters: dict = field(default_factory=dict)
    admissible_range: tuple[float, float] = (0.2, 0.8)
    selection: str = "evaluation"

    @classmethod
    def from_toml(cls, path: str | Path) -> ExperimentSpec:
        """Load a spec from a TOML file, or from a shipped spec's name (``mini-paper``; see ``shipped_specs``)."""
        path = resolve_spec_path(path)
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SpecError(f"cannot read experiment spec '{path}': {exc}") from None
        return cls.from_dict(raw, source=str(path))

    @classmethod
    def from_dict(cls, raw: dict, source: str = "experiment spec") -> ExperimentSpec:
        e = dict(raw.get("experiment", {}))
        need = ["name", "fields", "objectives", "methods", "seeds"]
        missing = [k for k in need if k not in e] + ([] if ("benchmarks" in e or "benchmark" in e) else ["benchmarks"])
        if missing:
            raise SpecError(f"{source}: [experiment] lacks {missing}")
        seeds = {k: tuple(int(s) for s in v) for k, v in e.pop("seeds").items()}
        bad = set(seeds) - set(SPLITS)
        if bad:
            raise SpecError(f"{source}: unknown seed split(s) {sorted(bad)}; allowed: {', '.join(SPLITS)}")
        overlap = set(seeds.get("calibration", ())) & (set(seeds.get("final", ())) | set(seeds.get("replication", ())))
        if overlap:
            raise SpecError(f"{source}: calibration seeds {sorted(overlap)} also appear among final/replication seeds")
        benchmarks = e.pop("benchmarks", None) or [e.pop("benchmark")]
        e.pop("benchmark", None)
        dirr = raw.get("dirr", {})
        known = {"name", "fields", "objectives", "methods", "dirr_methods", "model", "budget", "T", "t", "d", "rho_p"}
        unknown = set(e) - known
        if unknown:
            raise SpecError(f"{source}: unknown [experiment] key(s) {sorted(unknown)}; allowed: {sorted(known)}")
        return cls(name=e["name"], benchmarks=tuple(benchmarks), fields=tuple(e["fields"]),
                   objectives=tuple(e["objectives"]), methods=tuple(e["methods"]),
                   dirr_methods=tuple(e.get("dirr_methods", ("intervention_score",))), seeds=seeds,
                   model=e.get("model", "tiny-llama"), budget=e.get("budget", 0.1), T=e.get("T", 200),
                   t=e.get("t", 160), d=e.get("d", 20), rho_p=e.get("rho_p", 0.01),
                   hyperparameters=dict(raw.get("hyperparameters", {})),
                   admissible_range=tuple(dirr.get("admissible_range", (0.2, 0.8))),
                   selection=dirr.get("selection", "evaluation"))

    def _spec(self, benchmark, field_, objective, method, variant, seed, split) -> RunSpec:
        hp = dict(self.hyperparameters)
        if variant == "dirr":
            hp["selection"] = self.selection
        return RunSpec(benchmark, field_, objective, method, seed=seed, variant=variant, split=split,
                       experiment=self.name, budget=self.budget, T=self.T, t=self.t, d=self.d, rho_p=self.rho_p,
                       model=self.model, hyperparameters=hp)

    def runs(self, split: str, variant: str | None = None) -> list[RunSpec]:
        """Every RunSpec of one split, grouped so that runs sharing diagnostics are adjacent."""
        out = []
        for b in self.benchmarks:
            for f in self.fields:
                for o in self.objectives:
                    for s in self.seeds.get(split, ()):
                        if split != "calibration" and variant in (None, "static"):
                            out += [self._spec(b, f, o, m, "static", s, split) for m in self.methods]
                        if variant in (None, "dirr"):
                            out += [self._spec(b, f, o, m, "dirr", s, split) for m in self.dirr_methods]
        return out

    def all_runs(self) -> list[RunSpec]:
        return [r for split in SPLITS for r in self.runs(split)]

    def expected_cells(self) -> list[tuple]:
        return [tuple(getattr(r, k) for k in CELL) for r in self.all_runs()]
