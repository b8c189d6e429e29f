"""Run groups of RunSpecs as a Slurm job array through submitit (one group per array task, one CPU
thread each unless ``cpus_per_task`` says otherwise). Every task writes its own record files; ingest
them afterwards with ``supportbench registry ingest``. ``cluster="debug"`` runs in-process (tests)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from supportbench.errors import SupportbenchError
from supportbench.harness.executors.local import run_group


class SlurmExecutor:
    def __init__(self, folder: str | Path, cluster: str | None = None, **slurm_parameters):
        try:
            import submitit
        except ImportError:
            raise SupportbenchError("the Slurm executor needs submitit: pip install 'supportbench[slurm]'") from None
        self.executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
        params = {"timeout_min": 60, "cpus_per_task": 1, **slurm_parameters}
        if cluster != "debug":
            params = {k if k in ("timeout_min", "cpus_per_task", "mem_gb", "gpus_per_node", "nodes", "name")
                      else f"slurm_{k}": v for k, v in params.items()}
        self.executor.update_parameters(**params)

    def map_groups(self, tasks: Iterable[tuple]) -> Iterator[list[dict]]:
        tasks = list(tasks)
        if not tasks:
            return
        jobs = self.executor.map_array(run_group, *zip(*tasks))
        for job in jobs:
            yield job.result()
