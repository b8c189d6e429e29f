"""The controlled separation's runs (paper §5.2, Table 1), in the protocol's order:

1. the frozen decision (``experiments.controlled_decision``), from the calibration targets only:
   every locator's AUROC on them (construction data) and, per interface, the learning rate of the
   grid with the highest mean J on them; the calibration runs are recorded in their own results
   directory (``<results>/calibration/
   controlled``), never among the final runs; the decision is written to ``<results>/decisions``
   before any final run starts (a decision taken from the same calibration runs -- run keys and
   code fingerprints -- on the same theta_0 is reused, never re-frozen);
2. every final target through each interface, with that interface's frozen lr and the frozen primary
   locator, recorded and ingested. The table's quantities are computed by ``reports`` from the
   registry.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from supportbench._io import read_json_object
from supportbench.benchmarks.base import BENCHMARKS, calibration_fields
from supportbench.errors import SpecError
from supportbench.experiments.controlled_decision import (
    LR_GRID,
    RECALL_THRESHOLD,
    choose_lr,
    choose_primary,
    freeze_controlled,
    is_controlled,
)
from supportbench.experiments.decisions import runs_identity
from supportbench.experiments.record import ControlledDecision
from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec
from supportbench.harness.fingerprint import fingerprint
from supportbench.harness.resolve import resolve
from supportbench.harness.runner import Runner
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect

# what a frozen decision sets in every final run (``apply_decision``), never a template's own
DECIDED = ("benchmark.primary_locator", "benchmark.decision")


@dataclass(frozen=True)
class ControlledRuns:
    results: ResultsDir
    runs: int
    not_ok: int
    decision: ControlledDecision | None = None


def _options(hyperparameters: dict[str, Any]) -> dict[str, Any]:
    return {
        k[len("benchmark.") :]: v for k, v in hyperparameters.items() if k.startswith("benchmark.")
    }


def _undecided(template: RunSpec) -> dict[str, Any]:
    """The template's settings without what a decision sets (its primary locator and hash)."""
    return {k: v for k, v in template.hyperparameters if k not in DECIDED}


def _like(template: RunSpec, field: str, method: str, split: str, hp: dict[str, Any]) -> RunSpec:
    """A run like ``template`` (its benchmark, objective, seed, experiment, budget, T, model and
    theta_0 build) on ``field`` through ``method``."""
    t = template
    return RunSpec(
        t.benchmark,
        field,
        t.objective,
        method,
        seed=t.seed,
        split=split,
        experiment=t.experiment,
        budget=t.budget,
        T=t.T,
        model=t.model,
        hyperparameters=hp,
        build=t.build,
    )


def final_fields(cls, options: dict) -> tuple[str, ...]:
    cal = set(calibration_fields(cls, options))
    return tuple(f for f in cls.field_names(options) if f not in cal)


def controlled_specs(
    template: RunSpec, decision: ControlledDecision | None = None
) -> list[RunSpec]:
    """One run per (final target, interface) of the template's benchmark, like ``template`` (whose
    own field and method are not used); under a frozen ``decision`` each interface's run takes its
    frozen lr and the frozen primary locator (``apply_decision``)."""
    cls = BENCHMARKS.get(template.benchmark)
    if not cls.INTERFACES:
        raise SpecError(f"benchmark '{template.benchmark}' declares no interfaces to compare")
    hp = dict(template.hyperparameters)
    specs = [
        _like(template, f, m, template.split, hp)
        for f in final_fields(cls, _options(hp))
        for m in cls.INTERFACES
    ]
    return [apply_decision(s, decision) for s in specs] if decision is not None else specs


def apply_decision(spec: RunSpec, decision: ControlledDecision) -> RunSpec:
    """``spec`` with the frozen decision's lr for its interface, primary locator and hash (all in
    the run key)."""
    hp = {
        **dict(spec.hyperparameters),
        "lr": decision.lr[spec.method],
        "benchmark.primary_locator": decision.primary_locator,
        "benchmark.decision": decision.hash,
    }
    # every setting kept as resolved (``spec.replace`` would resolve the defaults again)
    return dataclasses.replace(spec, hyperparameters=hp)


def _settings(template: RunSpec) -> dict:
    """The calibration's settings as the decision records them (informational)."""
    t, hp = template, _undecided(template)
    return {
        "experiment": t.experiment,
        "benchmark": t.benchmark,
        "objective": t.objective,
        "model": t.model,
        "T": t.T,
        "seed": t.seed,
        "budget": t.budget,
        "build": t.build,
        "options": dict(sorted(_options(hp).items())),
        "hyperparameters": {
            k: v for k, v in sorted(hp.items()) if k != "lr" and not k.startswith("benchmark.")
        },
    }


def existing_decision(
    results_dir: str | Path,
    calibration_runs: list[str],
    theta0_hash: str,
    claims_hash: str | None = None,
) -> ControlledDecision | None:
    """A frozen controlled decision in ``<results>/decisions`` taken from exactly these calibration
    runs (run keys: every setting and the model's content; code fingerprints) on the same theta_0,
    under the same registered claims."""
    for f in ResultsDir(results_dir).decision_files():
        dec = read_json_object(Path(f), SpecError, "decision file")
        if (
            is_controlled(dec)
            and dec.get("calibration_runs") == calibration_runs
            and dec.get("theta0_hash") == theta0_hash
            and dec.get("claims_hash") == claims_hash
        ):
            return ControlledDecision.from_dict(dec, source=str(f))
    return None


def calibration_grid(
    template: RunSpec, lr_grid: tuple[float, ...] = LR_GRID
) -> dict[tuple, RunSpec]:
    """The calibration runs a controlled decision is frozen from: every (interface, lr of the grid,
    calibration target) of the template's benchmark and theta_0 build, like ``template``, recorded
    in ``<results>/calibration/controlled``."""
    cls = BENCHMARKS.get(template.benchmark)
    hp = _undecided(template)
    fields = calibration_fields(cls, _options(hp))
    if not fields:
        raise SpecError(
            f"benchmark '{template.benchmark}' has no calibration targets "
            "(benchmark.n_calibration_targets = 0): the primary locator and the learning rates "
            "cannot be frozen before the final runs"
        )
    return {
        (m, lr, f): _like(template, f, m, "calibration", {**hp, "lr": lr})
        for m in cls.INTERFACES
        for lr in lr_grid
        for f in fields
    }


def freeze_controlled_decision(
    results_dir: str | Path,
    template: RunSpec,
    *,
    cache_dir: str | None = None,
    device: str | None = "auto",
    force: bool = False,
    reuse_stale: bool = False,
    lr_grid: tuple[float, ...] = LR_GRID,
    claims_hash: str | None = None,
    progress: bool = False,
) -> ControlledDecision:
    """The controlled decision (module docstring) for runs like ``template``, frozen from the
    calibration targets, or the existing one. The calibration runs that are recorded already (e.g.
    run by a sweep's executor) are read, not rerun."""
    grid = calibration_grid(template, lr_grid)
    fields = tuple(dict.fromkeys(f for _, _, f in grid))
    runner = Runner(
        ResultsDir(results_dir).controlled_calibration,
        cache_dir=cache_dir,
        force=force,
        device=device,
        reuse_stale=reuse_stale,
        progress=progress,
    )
    first = next(iter(grid.values()))
    theta0_hash = runner.theta0_hash(first)
    bench = runner.benchmark(first)
    interfaces = type(bench).INTERFACES  # the registered class the runner built it from

    def identity(spec: RunSpec) -> str:
        # as the decision will record it: the record a run would reuse, if any
        resolved = resolve(spec, read_inputs=False)
        rec = runner.reusable(resolved)
        fp = (
            rec.fingerprint.hash
            if rec is not None and rec.fingerprint
            else fingerprint(resolved).hash
        )
        return f"{spec.run_key}:{fp}"

    current = sorted(identity(s) for s in grid.values())
    old = None if force else existing_decision(results_dir, current, theta0_hash, claims_hash)
    if old is not None:
        return old
    aurocs = bench.calibration_aurocs()
    per: dict[str, dict[str, dict[str, float]]] = {
        m: {repr(lr): {} for lr in lr_grid} for m in interfaces
    }
    records = []
    for (m, lr, f), spec in tqdm(
        grid.items(), desc="controlled calibration runs", unit="run", disable=not progress
    ):
        rec = runner.run(spec).record
        records.append(rec)
        if rec.status == "ok":
            per[m][repr(lr)][f] = rec.outcome.J
    # a failed or diverged calibration run counts against its lr: only an lr every calibration run
    # finished with can be chosen
    mean_J = {
        m: {
            float(lr): sum(js.values()) / len(js)
            for lr, js in per[m].items()
            if len(js) == len(fields)
        }
        for m in interfaces
    }
    lr = {m: choose_lr(mean_J[m]) for m in interfaces}
    t = template
    frozen = freeze_controlled(
        ResultsDir(results_dir).decisions,
        experiment=t.experiment,
        benchmark=t.benchmark,
        objective=t.objective,
        model=t.model,
        T=t.T,
        seed=t.seed,
        theta0_hash=theta0_hash,
        calibration_targets=list(fields),
        locator_aurocs=aurocs,
        primary_locator=choose_primary(aurocs),
        lr_grid=[float(x) for x in lr_grid],
        mean_J={m: {repr(k): v for k, v in d.items()} for m, d in mean_J.items()},
        lr=lr,
        recall_threshold=RECALL_THRESHOLD,
        calibration_runs=runs_identity(records),
        settings=_settings(template),
        calibration_J=per,
        calibration_recall={f: bench.recall.get(f) for f in fields},
        claims_hash=claims_hash,
    )
    return ControlledDecision.from_dict(frozen)


def run_controlled(
    results_dir: str | Path,
    template: RunSpec,
    *,
    cache_dir: str | None = None,
    force: bool = False,
    device: str | None = "auto",
    reuse_stale: bool = False,
    tracker: str | None = None,
) -> ControlledRuns:
    """Freeze (or reuse) the controlled decision for runs like ``template``, run every (final
    target, interface) under it, then ingest the records and the decision into the results
    directory's registry. ``tracker``: the final runs' optional live logging
    (``harness.tracking``)."""
    decision = freeze_controlled_decision(
        results_dir,
        template,
        cache_dir=cache_dir,
        device=device,
        reuse_stale=reuse_stale,
        progress=True,
    )
    specs = controlled_specs(template, decision)
    runner = Runner(
        results_dir,
        cache_dir=cache_dir,
        force=force,
        device=device,
        reuse_stale=reuse_stale,
        tracker=tracker,
    )
    bad = sum(
        runner.run(spec).record.status != "ok"
        for spec in tqdm(specs, desc="controlled final runs", unit="run")
    )
    con = connect(runner.results.registry)
    try:
        ingest(con, runner.results.root)
    finally:
        con.close()
    return ControlledRuns(runner.results, len(specs), bad, decision)
