"""Helpers shared by the benches: one torch thread, median timing, the RESULT line."""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def result(name: str, value: float, op: str, target: float) -> str:
    ok = {"<=": value <= target, ">=": value >= target, "<": value < target, ">": value > target}[op]
    line = f"RESULT name={name} value={value:.4g} target={op}{target:g} {'PASS' if ok else 'FAIL'}"
    print(line, flush=True)
    return line
