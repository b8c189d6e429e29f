"""The demo's extras (issue 35: one cell per benchmark, not all): curves and the relearning attack.

For each benchmark of an experiment, its first final static run -- of a selection method where the
benchmark has one, else of the benchmark's own intervention -- runs again with a curve
(``eval_every`` = T/10, carrying the benchmark's own metrics: ``curve_metrics``) and the relearning
attack (``relearn_steps`` = ``RELEARN_STEPS`` where the benchmark names relearning data) as the
experiment ``<name>-extras``: its own cells, so the paper's tables never see a run twice. A cell
whose final run ran under a frozen controlled decision (the controlled separation's) takes that
decision's settings from the final run's record (``as_ran``): the paper's cell plus the attack,
never a cell at settings no decision chose.
"""

from __future__ import annotations

from pathlib import Path

from supportbench.benchmarks.base import BENCHMARKS, is_relearnable
from supportbench.experiments.plan import ExperimentSpec
from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner

# LACUNA's mini attack length before the attack became every benchmark's (docs/benchmarks.md)
RELEARN_STEPS = 10
# what a frozen controlled decision sets in a final run (harness.controlled.apply_decision)
DECIDED = ("lr", "benchmark.primary_locator", "benchmark.decision")


def extras_cells(spec: ExperimentSpec) -> list[RunSpec]:
    """One run per benchmark, with the extras its benchmark supports (see the module's doc)."""
    chosen: dict[str, RunSpec] = {}
    for r in spec.runs("final"):
        cur = chosen.get(r.benchmark)
        # the first, unless a selection method's run comes after an own intervention's
        if r.variant == "static" and (
            cur is None or (cur.method in _own(cur) and r.method not in _own(r))
        ):
            chosen[r.benchmark] = r
    out = []
    for r in chosen.values():
        hp = dict(r.hyperparameters)
        hp["eval_every"] = max(1, r.T // 10)
        hp["curve_metrics"] = True  # and the benchmark's own metrics at each point
        if is_relearnable(BENCHMARKS.get(r.benchmark)):
            hp["relearn_steps"] = RELEARN_STEPS
        if hp != dict(r.hyperparameters):
            out.append(r.replace(experiment=f"{spec.name}-extras", hyperparameters=hp))
    return out


def _own(r: RunSpec) -> tuple[str, ...]:
    return BENCHMARKS.get(r.benchmark).INTERFACES


def run_extras(spec: ExperimentSpec, root: Path, cache) -> tuple[str | None, list[str]]:
    """Run ``extras_cells``; returns the experiment's name (None: no cell) and one line per run."""
    cells = extras_cells(spec)
    if not cells:
        return None, []
    runner = Runner(root, cache_dir=cache, progress=False)
    cells = as_ran(cells, ResultsDir(root), spec.name)
    lines = []
    for r in cells:
        rec = runner.run(r).record
        c = rec.outcome.components if rec.outcome else {}
        points = len(rec.outcome.curve or []) if rec.outcome else 0
        lines.append(
            f"extras: {r.benchmark}/{r.field}/{r.objective}/{r.method}/seed {r.seed}: {rec.status}"
            + (f", curve {points} points" if r.hp("eval_every") else "")
            + (
                f", relearning {r.hp('relearn_steps')} steps: "
                f"{c.get('resurfaced_after_relearn', float('nan')):.0f} of "
                f"{c.get('forgotten_by_unlearn', float('nan')):.0f} forgotten resurfaced"
                if r.hp("relearn_steps")
                else ""
            )
        )
    return cells[0].experiment, lines


def as_ran(cells: list[RunSpec], results: ResultsDir, experiment: str) -> list[RunSpec]:
    """``cells`` with the settings a frozen controlled decision gave their final runs (``DECIDED``),
    read from those runs' records in ``results`` (experiment ``experiment``); a cell whose benchmark
    freezes no such decision, or whose final run has no record yet, is left as it is."""
    if not any(r.method in _own(r) for r in cells):
        return cells
    ran: dict[tuple, dict] = {}
    for rec in results.records():
        s = rec.spec
        hp = s.get("hyperparameters", {})
        if s.get("experiment") == experiment and "benchmark.decision" in hp:
            # a record's spec leaves build 0 out (RunSpec.canonical keeps older keys)
            key = (
                s["benchmark"],
                s["field"],
                s["objective"],
                s["method"],
                s["seed"],
                s.get("build", 0),
            )
            ran[key] = hp
    out = []
    for r in cells:
        hp = ran.get((r.benchmark, r.field, r.objective, r.method, r.seed, r.build))
        if hp is not None:
            r = r.replace(
                hyperparameters={**dict(r.hyperparameters), **{k: hp[k] for k in DECIDED}}
            )
        out.append(r)
    return out
