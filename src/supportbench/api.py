"""The Python API: run a cell, run an experiment, read a registry -- what a notebook needs, in three
calls.

    import supportbench as sb
    rec = sb.run("tofu", "forget01", method="random", T=4)          # one cell: its RunRecord
    summary = sb.sweep("my-experiment.toml", results="results/mine") # calibration, frozen
    decisions, finals reg = sb.open_registry("results/mine/registry.duckdb")
    reg.results()                                                    # a Polars frame, one row per
                                                                     run with J
    reg.metrics()                                                    # every metric beyond J, long
                                                                     (imports too)

Every setting a call leaves out resolves as on the command line and in TOML
(``experiments/spec.py``), so the three name the same runs. docs/api.md has runnable examples
(``tests/integration/test_api_docs.py`` runs them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supportbench.experiments.record import RunRecord
from supportbench.experiments.results import DEFAULT_RESULTS, ResultsDir
from supportbench.experiments.spec import RunSpec

__all__ = ["Registry", "open_registry", "run", "sweep"]


def run(
    benchmark: str,
    field: str | None = None,
    objective: str = "npo",
    method: str = "intervention_score",
    *,
    seed: int = 0,
    variant: str = "static",
    split: str = "final",
    experiment: str = "adhoc",
    model: str | None = None,
    budget: float | None = None,
    T: int | None = None,
    t: int | None = None,
    d: int | None = None,
    rho_p: float | None = None,
    hyperparameters: dict[str, Any] | None = None,
    decision: str | Path | None = None,
    results: str | Path = DEFAULT_RESULTS.root,
    cache: str | Path | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool = False,
    tracker: str | None = None,
) -> RunRecord:
    """Run one cell (or return its stored record when it stands) and return its ``RunRecord``.
    ``field`` left out is the benchmark's default; a DIR-R final run needs a frozen ``decision``
    file (or ``tau`` set in ``hyperparameters``, recorded as unfrozen). ``tracker``
    ("tensorboard" or "wandb", if installed) also logs the run live (``harness.tracking``).
    Invalid input raises before anything is trained."""
    from supportbench.benchmarks.base import BENCHMARKS
    from supportbench.experiments.decisions import load_decision_for
    from supportbench.harness.runner import Runner

    cls = BENCHMARKS.get(benchmark)
    extra = {"budget": budget} if budget is not None else {}
    spec = RunSpec(
        benchmark,
        field or cls.DEFAULT_FIELD,
        objective,
        method,
        seed=seed,
        variant=variant,
        split=split,
        experiment=experiment,
        model=model,
        T=T,
        t=t,
        d=d,
        rho_p=rho_p,
        hyperparameters=dict(hyperparameters or {}),
        **extra,
    )
    dec = (
        load_decision_for(spec, decision, allow_unfrozen=spec.hp("tau") is not None)
        if variant == "dirr"
        else None
    )
    runner = Runner(
        results, cache_dir=cache, progress=progress, force=force, device=device, tracker=tracker
    )
    return runner.run(spec, decision=dec).record


def sweep(
    spec,
    *,
    results: str | Path = DEFAULT_RESULTS.root,
    workers: int | None = None,
    cache: str | Path | None = None,
    post_hoc: bool = False,
    ingest: bool = True,
):
    """Run an experiment (a TOML path, a shipped spec's name, or an ``ExperimentSpec``) in the
    protocol's order and, with ``ingest``, load the records into ``<results>/registry.duckdb``;
    returns the ``SweepSummary``."""
    from supportbench.experiments.plan import ExperimentSpec
    from supportbench.harness.executors.local import LocalExecutor
    from supportbench.harness.sweep import run_sweep

    exp = spec if isinstance(spec, ExperimentSpec) else ExperimentSpec.from_toml(spec)
    summary = run_sweep(
        exp,
        results,
        LocalExecutor(workers),
        cache_dir=None if cache is None else str(cache),
        post_hoc=post_hoc,
    )
    if ingest:
        from supportbench.registry.ingest import ingest as load
        from supportbench.registry.store import connect

        con = connect(ResultsDir(results).registry)
        try:
            load(con, results)
        finally:
            con.close()
    return summary


@dataclass
class Registry:
    """A registry opened read-only: frames (Polars), the audit, read-only SQL."""

    path: Path

    def _con(self):
        from supportbench.registry.store import connect

        return connect(self.path, read_only=True)

    def query(self, sql: str, params: dict | list | None = None, *, experiment: str | None = None):
        """A Polars frame of a read query (the registry is opened read-only); ``experiment``, when
        given, must be one the registry holds (a ``RegistryError`` listing those it holds otherwise,
        as the command line says)."""
        from supportbench.registry.store import check_experiment

        con = self._con()
        try:
            if experiment is not None:
                check_experiment(con, experiment, "experiment")
            return con.sql(sql, params=params or None).pl()
        finally:
            con.close()

    def results(self, experiment: str | None = None):
        """One row per run that has a J (or failed): its cell, status, J, G_F, D_coll, DIR-R gate
        (the ``results`` view). An ok run without J (a metric-only import) is not here: see
        ``metrics``."""
        if experiment is None:
            return self.query(
                "SELECT * FROM results ORDER BY experiment, "
                "benchmark, field, objective, method, seed"
            )
        return self.query(
            "SELECT * FROM results WHERE experiment = ? ORDER BY benchmark, field, objective, "
            "method, seed",
            [experiment],
            experiment=experiment,
        )

    def components(self, experiment: str | None = None):
        """The terminal model's outcome components in long form (``run_key``, ``name``,
        ``value``), under the one metric vocabulary (open-unlearning's names where it has one:
        ``forget_Q_A_Prob``, not a record's ``forget_prob``; ``experiments.metric_names``) --
        ``metrics`` without the run's cell and curve points. The registry's ``components`` view
        keeps the names a record stores, for SQL that reads the stored layer."""
        import polars as pl

        m = self.metrics(experiment)
        return m.filter(pl.col("step").is_null()).select("run_key", "name", "value").sort(pl.all())

    def metrics(self, experiment: str | None = None):
        """Every metric beyond J of every run, J or not (imported runs included), long: the
        ``metrics`` view (``run_key``, ``name``, ``value``, under open-unlearning's names; ``step``:
        NULL for the terminal model, a curve's step otherwise) with the run's cell and ``origin``
        ('record' or 'import')."""
        from supportbench.registry.store import has_steps

        where = "WHERE r.experiment = ?" if experiment else ""
        # a registry whose view predates curves holds terminal rows only: step NULL
        con = self._con()
        try:
            step = "m.step" if has_steps(con) else "CAST(NULL AS INTEGER) AS step"
        finally:
            con.close()
        return self.query(
            "SELECT m.run_key, r.experiment, r.benchmark, r.field, r.objective, r.method, "
            f"r.variant, r.seed, r.split, r.origin, m.name, m.value, {step} FROM metrics m "
            f"JOIN runs r USING (run_key) {where} ORDER BY r.experiment, r.benchmark, r.field, "
            "r.objective, r.method, r.seed, step NULLS FIRST, m.name",
            [experiment] if experiment else [],
            experiment=experiment,
        )

    def items(self, run_key: str):
        """A run's per-item values (``metric``, ``index``, ``value``: per-item NLLs under the model
        and theta_0, token counts, TOFU's truth ratios), kept beside the registry in
        ``items/<run_key>.parquet``."""
        import re

        from supportbench.errors import RegistryError

        if not isinstance(run_key, str) or not re.fullmatch(r"[0-9a-f]{64}", run_key):
            raise RegistryError(
                f"run key {run_key!r:.80} is not a run key (64 hex digits, e.g. from results())"
            )
        if self.query("SELECT count(*) AS n FROM runs WHERE run_key = ?", [run_key])["n"][0] == 0:
            raise RegistryError(f"no run {run_key[:12]}... in registry '{self.path}'")
        return ResultsDir(self.path.parent).read_items(run_key)

    def audit(self, experiment: str | None = None, spec=None):
        """The audit's report (``.ok``, ``.text()``, ``.to_dict()``); ``spec``: an experiment TOML
        or name."""
        from supportbench.experiments.plan import ExperimentSpec
        from supportbench.registry.audit import audit

        exp = ExperimentSpec.from_toml(spec) if isinstance(spec, str | Path) else spec
        con = self._con()
        try:
            return audit(con, experiment or (exp.name if exp else None), exp)
        finally:
            con.close()


def open_registry(path: str | Path = DEFAULT_RESULTS.registry) -> Registry:
    """A registry file, opened read-only on each call (another process may ingest meanwhile)."""
    from supportbench.errors import RegistryError

    p = Path(path)
    if not p.is_file():
        raise RegistryError(
            f"no registry at '{p}' (create one with `supportbench registry ingest` or sweep())"
        )
    return Registry(p)
