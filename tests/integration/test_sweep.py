"""An experiment spec end to end: calibration, frozen decision, final runs, audit against the
spec."""

import pytest

from supportbench.experiments.plan import ExperimentSpec
from supportbench.experiments.results import ResultsDir
from supportbench.harness.executors.local import LocalExecutor
from supportbench.harness.sweep import run_sweep
from supportbench.registry.audit import audit
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect, scalar

pytestmark = pytest.mark.slow

SPEC = {
    "experiment": {
        "name": "tiny",
        "benchmarks": ["tofu"],
        "fields": ["forget01"],
        "objectives": ["npo"],
        "methods": ["intervention_score", "random"],
        "T": 8,
        "t": 6,
        "d": 1,
        "budget": 0.1,
        "rho_p": 0.05,
        "seeds": {"calibration": [1, 2], "final": [3, 4]},
    },
    "hyperparameters": {"lr": 0.01},
    "dirr": {"admissible_range": [0.0, 1.0]},
}


def test_sweep_freezes_before_final_runs_and_audits_clean(tofu, cache, tmp_path):
    spec = ExperimentSpec.from_dict(SPEC)
    res = tmp_path / "res"
    s = run_sweep(spec, res, LocalExecutor(1), cache_dir=str(cache), post_hoc=True)
    assert (
        s.runs == 2 + 2 * 3
        and s.ok == s.runs
        and not s.failed
        and list(s.decisions) == ["tofu/npo"]
    )
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    rep = audit(con, "tiny", spec)
    assert rep.ok, rep.text()
    frozen = scalar(con, "SELECT frozen_at FROM decisions")
    first_final = scalar(
        con,
        "SELECT min(p.started_at) FROM provenance p JOIN runs r USING (run_key) "
        "WHERE r.split = 'final'",
    )
    assert frozen.replace(tzinfo=None) < first_final.replace(tzinfo=None)
    assert scalar(con, "SELECT count(*) FROM gate_events WHERE decision_hash IS NOT NULL") == 2
    # post hoc: every final DIR-R run now has a complete candidate set and an available gain
    assert (
        scalar(
            con,
            "SELECT count(*) FROM gate_events g JOIN runs r USING (run_key) WHERE "
            "r.split = 'final' AND g.complete AND g.available_gain IS NOT NULL",
        )
        == 2
    )
    assert scalar(con, "SELECT count(*) FROM gate_events WHERE post_hoc") == 2 - scalar(
        con,
        "SELECT count(*) FROM gate_events g JOIN runs r USING "
        "(run_key) WHERE r.split = 'final' AND triggered",
    )
    # a second sweep reuses the frozen decision and skips recorded runs
    s2 = run_sweep(spec, res, LocalExecutor(1), cache_dir=str(cache))
    assert s2.skipped == s2.runs and s2.decisions == s.decisions
    # a rule of the decision changed (the admissible range): same
    # calibration records, a new decision, and the final DIR-R runs
    # recorded under the old one rerun under it (the static runs stand)
    wider = ExperimentSpec.from_dict({**SPEC, "dirr": {"admissible_range": [0.0, 0.9]}})
    s3 = run_sweep(wider, res, LocalExecutor(1), cache_dir=str(cache))
    assert s3.decisions["tofu/npo"] != s.decisions["tofu/npo"]
    assert s3.runs - s3.skipped == 2 and s3.ok == s3.runs
    # a setting of the calibration runs changed (the learning rate): new records, so a new decision
    faster = ExperimentSpec.from_dict({**SPEC, "hyperparameters": {"lr": 0.02}})
    s4 = run_sweep(faster, res, LocalExecutor(1), cache_dir=str(cache))
    assert s4.skipped == 0 and s4.decisions["tofu/npo"] not in (
        s.decisions["tofu/npo"],
        s3.decisions["tofu/npo"],
    )


def test_slurm_executor_debug_cluster(tofu, cache, tmp_path):
    pytest.importorskip("submitit")
    from supportbench.harness.executors.slurm import SlurmExecutor
    from supportbench.harness.sweep import _groups

    spec = ExperimentSpec.from_dict(SPEC)
    static = [r for r in spec.runs("final") if r.variant == "static"]
    ex = SlurmExecutor(tmp_path / "slurm", cluster="debug")
    out = [
        r
        for group in ex.map_groups(_groups(static, {}, tmp_path / "res", str(cache)))
        for r in group
    ]
    assert len(out) == len(static) and all(r["status"] == "ok" for r in out)
    assert len(ResultsDir(tmp_path / "res").record_files()) == len(static)
