"""Run groups of RunSpecs as a Slurm job array through submitit (one group per array task, one CPU
thread each unless ``cpus_per_task`` says otherwise). Every task writes its own record files; ingest
them afterwards with ``supportbench registry ingest``. ``cluster="debug"`` runs in-process (tests).

Results are awaited as they finish, whatever the order: a task is done when submitit's result file
appears; a task that leaves the queue without one (cancelled, killed, out of time) turns into failed
cells of its group after ``grace_s``, and collection goes on with the others. Every wait is bounded
(``wait_s`` in all). Neither needs ``sacct``: the liveness check is ``squeue``.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from supportbench.errors import SupportbenchError
from supportbench.harness.executors.local import run_group


def failed_cells(task: tuple, why: str) -> list[dict]:
    """A dead task's cells: the runs it recorded before dying keep their records' status; the others
    are failed cells (nothing is written for them: the audit lists them as missing, and a rerun of
    the sweep runs exactly them)."""
    from supportbench.experiments.record import RecordError
    from supportbench.experiments.results import ResultsDir
    from supportbench.experiments.spec import RunSpec

    out = []
    results = ResultsDir(task[0])
    for s in task[2]:
        key = RunSpec.from_dict(s).run_key
        try:
            rec = results.read_record(key)
            out.append(
                {
                    "run_key": key,
                    "status": rec.status,
                    "skipped": False,
                    "error": rec.error,
                    "corrupt": None,
                }
            )
        except (FileNotFoundError, RecordError):
            out.append(
                {
                    "run_key": key,
                    "status": "failed",
                    "skipped": False,
                    "error": why,
                    "corrupt": None,
                }
            )
    return out


class SlurmExecutor:
    def __init__(
        self,
        folder: str | Path,
        cluster: str | None = None,
        *,
        poll_s: float = 2.0,
        grace_s: float = 20.0,
        wait_s: float = 24 * 3600.0,
        **slurm_parameters,
    ):
        try:
            import submitit
        except ImportError:
            raise SupportbenchError(
                "the Slurm executor needs submitit: pip install 'supportbench[slurm]'"
            ) from None
        if cluster is None:  # submitit would quietly fall back to running here
            import shutil

            if shutil.which("sbatch") is None:
                raise SupportbenchError(
                    "--executor slurm: no Slurm on this machine (sbatch is not on PATH); use "
                    "--executor local, or --slurm cluster=debug to try the Slurm path in-process"
                )
            cluster = "slurm"
        self.cluster, self.poll_s, self.grace_s, self.wait_s = cluster, poll_s, grace_s, wait_s
        self.executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
        params = {"timeout_min": 60, "cpus_per_task": 1, **slurm_parameters}
        if cluster != "debug":
            params = {
                k
                if k in ("timeout_min", "cpus_per_task", "mem_gb", "gpus_per_node", "nodes", "name")
                else f"slurm_{k}": v
                for k, v in params.items()
            }
        self.executor.update_parameters(**params)
        self.jobs: list = []  # the last submission's jobs (tests cancel one)

    def map_groups(self, tasks: Iterable[tuple]) -> Iterator[list[dict]]:
        tasks = list(tasks)
        if not tasks:
            return
        self.jobs = jobs = self.executor.map_array(run_group, *zip(*tasks))
        if self.cluster == "debug":
            for job, task in zip(jobs, tasks):
                yield self._collect(job, task)
            return
        pending = dict(enumerate(jobs))
        gone: dict[int, float] = {}
        deadline = time.monotonic() + self.wait_s
        while pending:
            queued = self._queued()
            now = time.monotonic()
            for i, job in list(pending.items()):
                if job.paths.result_pickle.exists():
                    del pending[i]
                    yield self._collect(job, tasks[i])
                elif queued is not None and str(job.job_id) not in queued:
                    gone.setdefault(i, now)
                    if now - gone[i] > self.grace_s:  # left the queue without a result: dead
                        del pending[i]
                        yield failed_cells(
                            tasks[i],
                            f"Slurm task {job.job_id} ended without a result "
                            "(cancelled, killed or out of time); see its log in "
                            f"{job.paths.folder}",
                        )
            if pending and now > deadline:
                for i, job in pending.items():
                    subprocess.run(["scancel", str(job.job_id)], capture_output=True)
                    yield failed_cells(
                        tasks[i],
                        f"Slurm task {job.job_id} gave no result within {self.wait_s:.0f} s",
                    )
                return
            if pending:
                time.sleep(self.poll_s)

    @staticmethod
    def _collect(job, task: tuple) -> list[dict]:
        try:
            return job.result()
        except Exception as exc:  # the task raised: its cells failed, the others go on
            return failed_cells(
                task,
                f"Slurm task {job.job_id} failed: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}",
            )

    @staticmethod
    def _queued() -> set[str] | None:
        """Job ids ('123_4') still pending or running, from squeue; None when squeue does not
        answer."""
        try:
            out = subprocess.run(
                ["squeue", "-h", "-r", "-o", "%i"], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode != 0:
            return None
        return {line.strip() for line in out.stdout.splitlines() if line.strip()}
