"""A small sweep through a real Slurm cluster (scripts/slurm-single-node.sh starts a one-node one;
CI does): submit, collect, ingest, audit clean; then a task killed mid-run becomes failed cells of
its group, the others are still collected, and a rerun submits exactly the missing runs."""

import shutil
import subprocess
import threading
import time

import pytest

from supportbench.experiments.plan import ExperimentSpec
from supportbench.harness.sweep import run_sweep
from supportbench.registry.audit import audit
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _slurm_answers() -> bool:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mixed", "allocated"))


if not _slurm_answers():
    pytest.skip(
        "no Slurm cluster answers (sbatch/sinfo): run "
        "scripts/slurm-single-node.sh to test the Slurm executor for real",
        allow_module_level=True,
    )


def spec(name, final, T=6):
    return ExperimentSpec.from_dict(
        {
            "experiment": {
                "name": name,
                "benchmarks": ["tofu"],
                "fields": ["forget01"],
                "objectives": ["npo"],
                "methods": ["intervention_score", "random"],
                "T": T,
                "t": T - 2,
                "d": 1,
                "budget": 0.1,
                "rho_p": 0.05,
                "seeds": {"calibration": [1, 2], "final": final},
            },
            "hyperparameters": {"lr": 0.01},
            "dirr": {"admissible_range": [0.0, 1.0]},
        }
    )


def executor(tmp_path):
    from supportbench.harness.executors.slurm import SlurmExecutor

    return SlurmExecutor(
        tmp_path / "slurm", partition="cpu", timeout_min=20, poll_s=1, grace_s=3, wait_s=900
    )


def test_sweep_on_real_slurm_survives_a_killed_task(tofu, cache, tmp_path):
    res = tmp_path / "res"
    s = run_sweep(spec("slurm", [3, 4]), res, executor(tmp_path), cache_dir=str(cache))
    assert not s.failed and s.ok == s.runs == 2 + 2 * 3, s
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    rep = audit(con, "slurm", spec("slurm", [3, 4]))
    assert rep.ok and not rep.missing, rep.text()
    con.close()

    # fault: kill one array task of the final phase while
    # it runs (SIGKILL: KillWait cannot let it finish)
    fault = spec(
        "slurm-fault", [5, 6, 7], T=100
    )  # long enough that a task is killed before it finishes
    ex = executor(tmp_path)
    killed = {}

    def killer():
        deadline = time.time() + 600
        while time.time() < deadline and not killed:
            jobs = [j for j in ex.jobs if j.job_id]
            if len(jobs) == 3:  # the final phase's array (three seeds), not the calibration's two
                out = subprocess.run(
                    ["squeue", "-h", "-r", "-t", "R", "-o", "%i"], capture_output=True, text=True
                )
                running = [line.strip() for line in out.stdout.splitlines() if line.strip()]
                target = next((r for r in running if r in {str(j.job_id) for j in jobs}), None)
                if target:  # kill at once: a task that finished first would leave nothing to test
                    subprocess.run(["scancel", "--signal=KILL", target], check=True)
                    killed["id"] = target
            time.sleep(0.5)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    first = run_sweep(fault, res, ex, cache_dir=str(cache))
    t.join(timeout=5)
    assert killed, "no final task was seen running"
    dead = [f for f in first.failed if killed["id"] in (f.get("error") or "")]
    assert dead, (killed, first.failed)
    assert all("ended without a result" in f["error"] for f in dead)
    assert first.ok == first.runs - len(first.failed)  # the other tasks were collected
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    missing = audit(con, "slurm-fault", fault).missing
    assert len(missing) == len(dead)
    con.close()
    again = run_sweep(fault, res, executor(tmp_path), cache_dir=str(cache))
    assert (
        again.runs - again.skipped == len(dead) and not again.failed
    )  # exactly the missing runs ran
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    assert audit(con, "slurm-fault", fault).ok
