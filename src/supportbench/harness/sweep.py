"""Run an experiment spec end to end in the protocol's order (paper §5.1, App. B):

1. calibration seeds: DIR-R runs with every candidate evaluated;
2. per (benchmark, objective): calibrate tau* on those runs only and freeze the decision (an
   existing frozen decision for the same settings is reused, never re-frozen);
3. the controlled separation's decision (``harness.controlled``: primary locator and per-interface
   learning rates, from its calibration targets), frozen per (objective, seed) before its final
   runs;
4. final and replication seeds: every method statically, DIR-R under the frozen decision, and each
   controlled run under its frozen controlled decision (its interface's lr, the primary locator, the
   decision's hash).

Runs are grouped by (benchmark, field, objective, seed) so that a worker scores all methods of a
cell from one Diagnostics. Nothing here imports torch: workers do.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from supportbench.errors import CalibrationError, DecisionError
from supportbench.experiments.claims import freeze_claims
from supportbench.experiments.claims import load as load_claims
from supportbench.experiments.decisions import load_decision, runs_identity
from supportbench.experiments.plan import ExperimentSpec
from supportbench.experiments.record import RecordError, RunRecord
from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec


@dataclass
class SweepSummary:
    runs: int = 0
    ok: int = 0
    skipped: int = 0
    failed: list[dict] = field(default_factory=list)
    decisions: dict = field(default_factory=dict)  # "benchmark/objective" -> decision hash
    claims: str = ""  # the registered claims decision's hash
    calibration_errors: dict = field(default_factory=dict)
    post_hoc: int = 0  # DIR-R runs completed post hoc
    corrupt: list[str] = field(
        default_factory=list
    )  # unreadable record files found (their runs redone)


def _groups(
    specs: list[RunSpec],
    decisions: dict,
    results_dir: str | Path,
    cache_dir,
    complete: bool = False,
    reuse_stale: bool = False,
) -> list[tuple]:
    """Executor tasks: one per (benchmark, build, field, objective, seed), so a worker scores every
    method of a cell from one Diagnostics; specs travel as plain dicts (any executor can pickle
    them)."""
    root = str(ResultsDir(results_dir).root)
    by = defaultdict(list)
    for s in specs:
        by[(s.benchmark, s.build, s.field, s.objective, s.seed)].append(s)
    tasks = []
    for group in by.values():
        decs = [
            decisions.get((s.benchmark, s.objective))
            if s.variant == "dirr" and s.split != "calibration"
            else None
            for s in group
        ]
        tasks.append(
            (root, cache_dir, [s.canonical_full() for s in group], decs, complete, reuse_stale)
        )
    return tasks


@dataclass
class _Sweep:
    """What every phase of one sweep shares."""

    spec: ExperimentSpec
    results: ResultsDir
    executor: object
    cache_dir: str | None
    reuse_stale: bool
    claims_hash: str = ""  # the claims registered for the experiment (experiments.claims)
    summary: SweepSummary = field(default_factory=SweepSummary)

    def read(self, spec: RunSpec) -> RunRecord | None:
        """The stored record of ``spec``; None when there is none or it cannot be read (noted)."""
        if not self.results.has_record(spec.run_key):
            return None
        try:
            return self.results.read_record(spec.run_key)
        except RecordError as exc:
            self.summary.corrupt.append(str(exc))
            return None


def _run_phase(
    sw: _Sweep,
    specs: list[RunSpec],
    decisions: dict,
    desc: str,
    summary: SweepSummary | None = None,
    complete: bool = False,
    elsewhere: tuple[ResultsDir, list[RunSpec]] | None = None,
) -> None:
    """Run ``specs`` through the executor, counting into ``summary`` (default: the sweep's).
    Recorded runs are counted here and never submitted (no job starts only to skip). ``elsewhere``:
    runs recorded in another results folder (the controlled calibration runs), submitted in the same
    pool, counted apart."""
    summary = summary or sw.summary
    if not complete:
        specs = _drop_recorded(sw, specs, decisions, summary)
    tasks = _groups(specs, decisions, sw.results.root, sw.cache_dir, complete, sw.reuse_stale)
    apart: set[str] = set()
    if elsewhere is not None:
        other = _drop_recorded(sw, elsewhere[1], {}, SweepSummary(), elsewhere[0])
        tasks += _groups(other, {}, elsewhere[0].root, sw.cache_dir, False, sw.reuse_stale)
        apart = {s.run_key for s in other}
    with tqdm(total=len(specs) + len(apart), desc=desc, unit="run") as bar:
        for results in sw.executor.map_groups(tasks):
            for r in results:
                bar.update(1)
                if r["run_key"] in apart:
                    continue
                summary.runs += 1
                summary.skipped += r["skipped"]
                if r.get("corrupt"):
                    summary.corrupt.append(r["corrupt"])
                if r["status"] == "ok":
                    summary.ok += 1
                else:
                    summary.failed.append(r)


def _drop_recorded(
    sw: _Sweep,
    specs: list[RunSpec],
    decisions: dict,
    summary: SweepSummary,
    results: ResultsDir | None = None,
) -> list[RunSpec]:
    from supportbench.harness.resolve import resolve
    from supportbench.harness.runner import Runner

    probe = Runner(
        (results or sw.results).root,
        cache_dir=sw.cache_dir,
        progress=False,
        reuse_stale=sw.reuse_stale,
    )
    todo = []
    for s in specs:
        decision = decisions.get((s.benchmark, s.objective)) if s.variant == "dirr" else None
        rec = probe.reusable(resolve(s, read_inputs=False), decision)
        if rec is None:
            todo.append(s)
            continue
        summary.runs += 1
        summary.skipped += 1
        if rec.status == "ok":
            summary.ok += 1
        else:
            summary.failed.append(
                {"run_key": rec.run_key, "status": rec.status, "error": rec.error_line}
            )
    summary.corrupt += list(probe.corrupt.values())
    return todo


def _build_theta0(sw: _Sweep, specs: list[RunSpec]) -> None:
    """Build every theta_0 the sweep's runs need (one per benchmark, options, model and build)
    before any run starts, one task each, in parallel: no two workers ever train the same one, and
    the runs then only load it from the cache."""
    from supportbench.harness.runner import Runner

    first = {}
    for s in specs:
        first.setdefault(Runner.bench_key(s), s)
    tasks = [
        (
            str(sw.results.root),
            sw.cache_dir,
            [s.canonical_full()],
            [None],
            False,
            sw.reuse_stale,
            True,
        )
        for s in first.values()
    ]
    with tqdm(total=len(tasks), desc="theta_0 builds", unit="model") as bar:
        for _ in sw.executor.map_groups(tasks):
            bar.update(1)


def _calibration_records(sw: _Sweep, benchmark: str, objective: str) -> list:
    return [
        r
        for s in sw.spec.runs("calibration")
        if s.benchmark == benchmark and s.objective == objective
        if (r := sw.read(s)) is not None
    ]


def _existing_decision(
    sw: _Sweep, benchmark: str, objective: str, records: list, baselines: list[str]
) -> dict | None:
    """A decision frozen from exactly these calibration records (same run keys: every setting, the
    model's content; same code fingerprints) under the same rules; any change to them freezes a new
    one."""
    want = (
        benchmark,
        objective,
        sw.spec.name,
        runs_identity(records),
        list(map(float, sw.spec.admissible_range)),
        sorted(baselines),
        sw.claims_hash,
    )
    for f in sw.results.decision_files():
        try:
            d = load_decision(f)
        except DecisionError:
            # not a DIR-R decision of this kind (a controlled one, or one frozen by older code)
            continue
        if (
            d["benchmark"],
            d["objective"],
            d.get("experiment"),
            d["calibration_runs"],
            list(map(float, d["admissible_range"])),
            sorted(d["baselines"]),
            d.get("claims_hash"),
        ) == want:
            return d
    return None


def _freeze_decisions(sw: _Sweep) -> dict:
    """One frozen decision per (benchmark, objective) that runs DIR-R, from the calibration records
    only; a decision frozen from the same calibration records (``_existing_decision``) is reused,
    never re-frozen."""
    from supportbench.harness.calibration import calibrate_and_freeze

    decisions = {}
    for b in sw.spec.benchmarks:
        st = sw.spec.settings(b)
        if not st["dirr_methods"]:
            continue  # nothing to calibrate: this benchmark runs no DIR-R
        baselines = [m for m in st["methods"] if m not in st["dirr_methods"]]
        for o in dict.fromkeys((*st["objectives"], *(st["replication_objectives"] or ()))):
            recs = _calibration_records(sw, b, o)
            dec = _existing_decision(sw, b, o, recs, baselines)
            if dec is None:
                try:
                    _, dec = calibrate_and_freeze(
                        recs,
                        sw.results.decisions,
                        baselines=baselines,
                        admissible=tuple(sw.spec.admissible_range),
                        experiment=sw.spec.name,
                        claims_hash=sw.claims_hash,
                    )
                except CalibrationError as exc:
                    sw.summary.calibration_errors[f"{b}/{o}"] = str(exc)
                    continue
            decisions[(b, o)] = dec
            sw.summary.decisions[f"{b}/{o}"] = dec["hash"]
    return decisions


def _complete_post_hoc(sw: _Sweep, final: list[RunSpec], decisions: dict) -> None:
    """Complete the candidate sets of non-triggered final DIR-R runs (flagged post hoc)."""
    todo = [
        s
        for s in final
        if s.variant == "dirr"
        if (r := sw.read(s)) is not None and r.dirr is not None and not r.dirr.complete
    ]
    done = SweepSummary()
    _run_phase(sw, todo, decisions, "post-hoc completion", summary=done, complete=True)
    sw.summary.post_hoc = done.runs


def _controlled_settings(final: list[RunSpec]) -> dict[tuple, RunSpec]:
    """One final run per controlled decision to freeze (benchmark that compares interfaces,
    objective, seed, build, budget, T, model, hyperparameters but lr), keyed by what the decision
    depends on."""
    from supportbench.benchmarks.base import BENCHMARKS, is_calibrated

    out = {}
    for s in final:
        if is_calibrated(BENCHMARKS.get(s.benchmark)):
            out.setdefault(_setting_key(s), s)
    return out


def _setting_key(s: RunSpec) -> tuple:
    """The controlled setting a run belongs to: everything but its interface, field and learning
    rate (the decision chooses those)."""
    hp = {k: v for k, v in s.hyperparameters if k != "lr"}
    return (
        *(s.benchmark, s.objective, s.seed, s.build, s.budget, s.T, s.model),
        json.dumps(hp, sort_keys=True, default=str),
    )


def _controlled_calibration(final: list[RunSpec]) -> list[RunSpec]:
    """The calibration runs of every controlled decision the final runs need
    (``harness.controlled``)."""
    from supportbench.harness.controlled import calibration_grid

    return [g for s in _controlled_settings(final).values() for g in calibration_grid(s).values()]


def _freeze_controlled(sw: _Sweep, final: list[RunSpec]) -> list[RunSpec]:
    """``final`` with every run of a benchmark that compares interfaces under its frozen controlled
    decision (frozen here from the recorded calibration runs; reused when it exists)."""
    from supportbench.harness.controlled import apply_decision, freeze_controlled_decision

    decs = {}
    for key, s in _controlled_settings(final).items():
        decs[key] = freeze_controlled_decision(
            sw.results.root,
            s,
            cache_dir=sw.cache_dir,
            reuse_stale=sw.reuse_stale,
            claims_hash=sw.claims_hash,
        )
        sw.summary.decisions[f"{s.benchmark}/{s.objective}/seed {s.seed}/build {s.build}"] = decs[
            key
        ].hash
    out = []
    for s in final:
        key = _setting_key(s)
        out.append(apply_decision(s, decs[key]) if key in decs else s)
    return out


def run_sweep(
    spec: ExperimentSpec,
    results_dir: str | Path,
    executor,
    *,
    cache_dir: str | None = None,
    post_hoc: bool = False,
    reuse_stale: bool = False,
) -> SweepSummary:
    """Run the experiment; ``post_hoc`` then completes the candidate sets of non-triggered final
    DIR-R runs (for the available-gain denominator, flagged post hoc; decisions are never changed).
    Do it before ingesting: a completed record differs from the one ingested earlier (a reported
    conflict). ``reuse_stale`` keeps records computed by older code (see
    ``harness.fingerprint``)."""
    from supportbench.benchmarks.base import default_cache_dir
    from supportbench.harness.validate import validate_experiment

    validate_experiment(
        spec
    )  # every name and option, before any model is trained or record written
    # tasks in other processes (and on other nodes) must find the same cache
    cache_dir = str(Path(cache_dir or default_cache_dir()).resolve())
    sw = _Sweep(spec, ResultsDir(results_dir), executor, cache_dir, reuse_stale)
    # the claims the experiment will be judged on, registered before its first run
    # (experiments.claims)
    claims = freeze_claims(sw.results.decisions, load_claims(spec.claims), spec.name)
    sw.claims_hash = claims["claims_hash"]
    sw.summary.claims = claims["hash"]
    planned = [s for split in ("final", "replication") for s in spec.runs(split)]
    controlled = _controlled_calibration(planned)
    _build_theta0(sw, [*spec.runs("calibration"), *planned])
    _run_phase(
        sw,
        spec.runs("calibration"),
        {},
        "calibration runs",
        elsewhere=(sw.results.controlled_calibration, controlled),
    )
    decisions = _freeze_decisions(sw)
    # final and replication seeds (DIR-R only where a decision was frozen)
    final = [s for s in planned if s.variant != "dirr" or (s.benchmark, s.objective) in decisions]
    final = _freeze_controlled(sw, final)
    _run_phase(sw, final, decisions, "final runs")
    if post_hoc:
        _complete_post_hoc(sw, final, decisions)
    return sw.summary
