"""Run groups of RunSpecs in worker processes on this machine: one torch thread per worker, as many
workers as cores. Each worker keeps one Runner (theta_0 in memory, shared Diagnostics per cell)."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed

_RUNNER = None


def _init_worker() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def run_group(results_dir: str, cache_dir: str | None, specs: list[dict], decisions: list[dict | None],
              complete: bool = False, reuse_stale: bool = False) -> list[dict]:
    """Worker entry point (also used by the Slurm executor): run specs in order, return brief statuses.
    ``complete``: post-hoc completion of already recorded, non-triggered DIR-R runs instead.
    ``reuse_stale``: keep records whose code fingerprint differs from the current code's."""
    global _RUNNER
    from supportbench.experiments.spec import RunSpec
    from supportbench.harness.runner import Runner

    if _RUNNER is None or (str(_RUNNER.results_dir), _RUNNER.cache_dir) != (results_dir, cache_dir):
        _RUNNER = Runner(results_dir, cache_dir=cache_dir, progress=False)
    _RUNNER.reuse_stale = reuse_stale
    out = []
    specs = [RunSpec.from_dict(s) for s in specs]
    if not complete:
        _RUNNER.plan(specs)
    for spec, dec in zip(specs, decisions):
        rec = _RUNNER.complete_post_hoc(spec, dec) if complete else _RUNNER.run(spec, decision=dec)
        out.append({"run_key": rec["run_key"], "status": rec["status"], "skipped": bool(rec.get("_skipped")),
                    "error": (rec.get("error") or "").splitlines()[0] if rec.get("error") else None})
    return out


class LocalExecutor:
    def __init__(self, workers: int | None = None):
        self.workers = workers or os.cpu_count() or 1

    def map_groups(self, tasks: Iterable[tuple]) -> Iterator[list[dict]]:
        """Yield each task's results as it completes; tasks are argument tuples for ``run_group``."""
        tasks = list(tasks)
        if self.workers == 1:  # in-process: easier to debug, no pickling
            _init_worker()
            for t in tasks:
                yield run_group(*t)
            return
        ctx = mp.get_context("spawn")  # torch and fork do not mix
        with ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_init_worker) as pool:
            futures = [pool.submit(run_group, *t) for t in tasks]
            for f in as_completed(futures):
                yield f.result()
