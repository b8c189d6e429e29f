"""Run groups of RunSpecs in worker processes on this machine: one torch thread per worker, as many
workers as cores. Each worker keeps one Runner (theta_0 in memory, shared Diagnostics per cell)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed

_RUNNER = None


def _exit_with_parent(parent: int, interval: float = 0.5) -> None:
    """Watch the parent process; when it is gone (kill -9 of a sweep), leave at once. The pool's own
    shutdown never runs in that case, and a worker holding theta_0 would otherwise linger."""
    import threading

    def watch():
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _init_worker(parent: int | None = None) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    if parent is not None:
        _exit_with_parent(parent)
    import torch

    torch.set_num_threads(1)


def run_group(
    results_dir: str,
    cache_dir: str | None,
    specs: list[dict],
    decisions: list[dict | None],
    complete: bool = False,
    reuse_stale: bool = False,
    prepare: bool = False,
) -> list[dict]:
    """Worker entry point (also used by the Slurm executor): run specs in order, return brief
    statuses. ``complete``: post-hoc completion of already recorded, non-triggered DIR-R runs
    instead. ``reuse_stale``: keep records whose code fingerprint differs from the current code's.
    ``prepare``: only build (or load) the theta_0 of each spec into the cache; returns no
    statuses."""
    global _RUNNER
    from supportbench.experiments.spec import RunSpec
    from supportbench.harness.runner import Runner

    if _RUNNER is None or (str(_RUNNER.results_dir), _RUNNER.cache_dir) != (results_dir, cache_dir):
        _RUNNER = Runner(results_dir, cache_dir=cache_dir, progress=False)
    _RUNNER.reuse_stale = reuse_stale
    out = []
    specs = [RunSpec.from_dict(s) for s in specs]
    if prepare:
        for spec in specs:
            _RUNNER.theta0(spec)
        return out
    if not complete:
        _RUNNER.plan(specs)
    for spec, dec in zip(specs, decisions):
        rec, skipped = (
            _RUNNER.complete_post_hoc(spec, dec) if complete else _RUNNER.run(spec, decision=dec)
        )
        out.append(
            {
                "run_key": rec.run_key,
                "status": rec.status,
                "skipped": skipped,
                "error": rec.error_line,
                "corrupt": _RUNNER.corrupt.pop(str(_RUNNER.results.record(rec.run_key)), None),
            }
        )
    return out


class LocalExecutor:
    def __init__(self, workers: int | None = None):
        self.workers = workers or os.cpu_count() or 1

    def pool(self) -> ProcessPoolExecutor:
        """The worker pool: spawn context (torch and fork do not mix), one torch thread per worker,
        and workers that exit when this process dies."""
        return ProcessPoolExecutor(
            self.workers,
            mp_context=mp.get_context("spawn"),
            initializer=_init_worker,
            initargs=(os.getpid(),),
        )

    def map_groups(self, tasks: Iterable[tuple]) -> Iterator[list[dict]]:
        """Yield each task's results as it completes; tasks are argument tuples for
        ``run_group``."""
        tasks = list(tasks)
        if self.workers == 1:  # in-process: easier to debug, no pickling
            _init_worker()
            for t in tasks:
                yield run_group(*t)
            return
        pool, futures = self.pool(), []
        try:
            futures += [pool.submit(run_group, *t) for t in tasks]
            for f in as_completed(futures):
                yield f.result()
        except BaseException:
            # Ctrl-C (or any stop): do not wait for the running groups -- each may take
            # minutes -- but stop the workers now; a run they were in leaves no record (records are
            # written whole or not at all) and the next sweep reruns exactly it
            for f in futures:
                f.cancel()
            _stop_workers(pool)
            raise
        else:
            pool.shutdown(wait=True)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate a pool's worker processes and release it without waiting for their tasks."""
    for proc in list((pool._processes or {}).values()):  # CPython's pool keeps its workers here
        if proc.is_alive():
            proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
