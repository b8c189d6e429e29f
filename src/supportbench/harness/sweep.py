"""Run an experiment spec end to end in the protocol's order (paper §5.1, App. B):

1. calibration seeds: DIR-R runs with every candidate evaluated;
2. per (benchmark, objective): calibrate tau* on those runs only and freeze the decision (an existing
   frozen decision for the same settings is reused, never re-frozen);
3. final and replication seeds: every method statically, and DIR-R under the frozen decision.

Runs are grouped by (benchmark, field, objective, seed) so that a worker scores all methods of a cell
from one Diagnostics. Nothing here imports torch: workers do.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from supportbench.errors import CalibrationError
from supportbench.experiments.decisions import load_decision
from supportbench.experiments.plan import ExperimentSpec
from supportbench.experiments.spec import RunSpec


@dataclass
class SweepSummary:
    runs: int = 0
    ok: int = 0
    skipped: int = 0
    failed: list[dict] = field(default_factory=list)
    decisions: dict = field(default_factory=dict)       # "benchmark/objective" -> decision hash
    calibration_errors: dict = field(default_factory=dict)
    post_hoc: int = 0                                     # DIR-R runs completed post hoc
    corrupt: list[str] = field(default_factory=list)      # unreadable record files found (their runs redone)


def _groups(specs: list[RunSpec], decisions: dict, results_dir, cache_dir, complete: bool = False,
            reuse_stale: bool = False) -> list[tuple]:
    by = defaultdict(list)
    for s in specs:
        by[(s.benchmark, s.field, s.objective, s.seed)].append(s)
    tasks = []
    for group in by.values():
        decs = [decisions.get((s.benchmark, s.objective)) if s.variant == "dirr" and s.split != "calibration" else None
                for s in group]
        tasks.append((str(results_dir), cache_dir, [s.canonical_full() for s in group], decs, complete, reuse_stale))
    return tasks


def _execute(executor, specs, decisions, results_dir, cache_dir, summary: SweepSummary, desc: str,
             complete: bool = False, reuse_stale: bool = False) -> None:
    if not complete:  # recorded runs are counted here and never submitted (no job starts only to skip)
        from supportbench.harness.runner import Runner

        probe = Runner(results_dir, cache_dir=cache_dir, progress=False, reuse_stale=reuse_stale)
        todo = []
        for s in specs:
            rec = probe.reusable(s)
            if rec is None:
                todo.append(s)
                continue
            summary.runs += 1
            summary.skipped += 1
            if rec["status"] == "ok":
                summary.ok += 1
            else:
                summary.failed.append({"run_key": rec["run_key"], "status": rec["status"],
                                       "error": (rec.get("error") or "").splitlines()[0] or None})
        summary.corrupt += list(probe.corrupt.values())
        specs = todo
        if specs and getattr(executor, "prepare_first", False):
            _prepare_theta0(probe, specs)
    tasks = _groups(specs, decisions, results_dir, cache_dir, complete, reuse_stale)
    with tqdm(total=len(specs), desc=desc, unit="run") as bar:
        for results in executor.map_groups(tasks):
            for r in results:
                summary.runs += 1
                summary.skipped += r["skipped"]
                if r.get("corrupt"):
                    summary.corrupt.append(r["corrupt"])
                if r["status"] == "ok":
                    summary.ok += 1
                else:
                    summary.failed.append(r)
                bar.update(1)


def _prepare_theta0(runner, specs) -> None:
    """Build each (benchmark, options, model)'s theta_0 cache once, here, before jobs are submitted: array
    tasks then load it instead of each training it again."""
    seen = set()
    for s in specs:
        key = runner._bench_key(s)
        if key not in seen:
            seen.add(key)
            runner.theta0(s)


def _existing_decision(results_dir: Path, spec: ExperimentSpec, benchmark: str, objective: str) -> dict | None:
    for f in sorted((results_dir / "decisions").glob("*.json")):
        d = load_decision(f)
        st = spec.settings(benchmark)
        if (d["benchmark"], d["objective"], d["T"], d["t"], d["d"], d["rho_p"], d.get("experiment")) == \
                (benchmark, objective, st["T"], st["t"], st["d"], st["rho_p"], spec.name):
            return d
    return None


def run_sweep(spec: ExperimentSpec, results_dir: str | Path, executor, *, cache_dir: str | None = None,
              post_hoc: bool = False, reuse_stale: bool = False) -> SweepSummary:
    """Run the experiment; ``post_hoc`` then completes the candidate sets of non-triggered final DIR-R
    runs (for the available-gain denominator, flagged post hoc; decisions are never changed). Do it
    before ingesting: a completed record differs from the one ingested earlier (a reported conflict).
    ``reuse_stale`` keeps records computed by older code (see ``harness.fingerprint``)."""
    from supportbench.harness.calibration import calibrate_and_freeze
    from supportbench.harness.runner import CorruptRecord, read_record
    from supportbench.harness.validate import validate_experiment

    validate_experiment(spec)  # every name and option, before any model is trained or record written
    results_dir = Path(results_dir)
    if getattr(executor, "prepare_first", False):  # tasks on other processes/nodes must find the same cache
        from supportbench.benchmarks.base import default_cache_dir

        cache_dir = str(Path(cache_dir or default_cache_dir()).resolve())
    summary = SweepSummary()
    # phase 1: calibration
    _execute(executor, spec.runs("calibration"), {}, results_dir, cache_dir, summary, "calibration runs",
             reuse_stale=reuse_stale)
    # phase 2: freeze one decision per (benchmark, objective)
    decisions = {}
    for b in spec.benchmarks:
        st = spec.settings(b)
        if not st["dirr_methods"]:
            continue  # nothing to calibrate: this benchmark runs no DIR-R
        for o in dict.fromkeys((*st["objectives"], *(st["replication_objectives"] or ()))):
            dec = _existing_decision(results_dir, spec, b, o)
            if dec is None:
                recs = []
                for s in spec.runs("calibration"):
                    if s.benchmark == b and s.objective == o:
                        p = results_dir / "runs" / f"{s.run_key}.json"
                        if p.exists():
                            try:
                                recs.append(read_record(p))
                            except CorruptRecord as exc:
                                summary.corrupt.append(str(exc))
                try:
                    _, dec = calibrate_and_freeze(recs, results_dir / "decisions",
                                                  baselines=[m for m in st["methods"] if m not in st["dirr_methods"]],
                                                  admissible=tuple(spec.admissible_range),
                                                  experiment=spec.name)
                except CalibrationError as exc:
                    summary.calibration_errors[f"{b}/{o}"] = str(exc)
                    continue
            decisions[(b, o)] = dec
            summary.decisions[f"{b}/{o}"] = dec["hash"]
    # phase 3: final and replication seeds (DIR-R only where a decision was frozen)
    final = [s for split in ("final", "replication") for s in spec.runs(split)
             if s.variant != "dirr" or (s.benchmark, s.objective) in decisions]
    _execute(executor, final, decisions, results_dir, cache_dir, summary, "final runs", reuse_stale=reuse_stale)
    if post_hoc:
        todo = []
        for s in final:
            p = results_dir / "runs" / f"{s.run_key}.json"
            if s.variant == "dirr" and p.exists():
                try:
                    d = read_record(p).get("dirr") or {}
                except CorruptRecord as exc:
                    summary.corrupt.append(str(exc))
                    continue
                if not d.get("complete", True):
                    todo.append(s)
        done = SweepSummary()
        _execute(executor, todo, decisions, results_dir, cache_dir, done, "post-hoc completion", complete=True)
        summary.post_hoc = done.runs
    return summary
