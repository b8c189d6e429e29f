"""The controlled separation's runs (paper §5.2, Table 1): every target through each of the benchmark's
interfaces, recorded and ingested. The table's quantities are computed by ``reports`` from the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supportbench.benchmarks.base import BENCHMARKS
from supportbench.errors import SpecError
from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect


@dataclass(frozen=True)
class ControlledRuns:
    results: ResultsDir
    runs: int
    not_ok: int


def controlled_specs(benchmark: str, *, objective: str, seed: int, split: str, experiment: str, budget: float,
                     T: int, model: str, hyperparameters: dict[str, Any]) -> list[RunSpec]:
    """One run per (target, interface) of ``benchmark``'s declared interfaces."""
    cls = BENCHMARKS.get(benchmark)
    if not cls.INTERFACES:
        raise SpecError(f"benchmark '{benchmark}' declares no interfaces to compare")
    options = {k[len("benchmark."):]: v for k, v in hyperparameters.items() if k.startswith("benchmark.")}
    return [RunSpec(benchmark, f, objective, m, seed=seed, split=split, experiment=experiment, budget=budget, T=T,
                    model=model, hyperparameters=hyperparameters)
            for f in cls.field_names(options) for m in cls.INTERFACES]


def run_controlled(results_dir: str | Path, *, benchmark: str = "controlled", cache_dir: str | None = None,
                   force: bool = False, device: str | None = "auto", reuse_stale: bool = False,
                   **spec_items) -> ControlledRuns:
    """Run every (target, interface) of the controlled benchmark, then ingest the records into the results
    directory's registry."""
    specs = controlled_specs(benchmark, **spec_items)
    runner = Runner(results_dir, cache_dir=cache_dir, force=force, device=device, reuse_stale=reuse_stale)
    bad = sum(runner.run(spec).record.status != "ok" for spec in specs)
    con = connect(runner.results.registry)
    try:
        ingest(con, runner.results.root)
    finally:
        con.close()
    return ControlledRuns(runner.results, len(specs), bad)
