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


def gpu_peak(cuda: bool) -> float:
    """Peak allocated GPU memory since the last reset, in bytes, after the queued work (nan without
    CUDA)."""
    if not cuda:
        return float("nan")
    import torch

    torch.cuda.synchronize()
    return float(torch.cuda.max_memory_allocated())


def reset_gpu_peak(cuda: bool, empty: bool = False) -> None:
    """Start a new peak (``empty``: hand cached blocks back first, so the phase starts from what is
    held)."""
    if cuda:
        import torch

        if empty:
            torch.cuda.empty_cache()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def result(name: str, value: float, op: str, target: float) -> str:
    ok = {"<=": value <= target, ">=": value >= target, "<": value < target, ">": value > target}[
        op
    ]
    line = f"RESULT name={name} value={value:.4g} target={op}{target:g} {'PASS' if ok else 'FAIL'}"
    print(line, flush=True)
    return line


def box_seconds(repeats: int = 3) -> float:
    """The team's fixed box workload (shared/tools/box_speed.py: forward + backward + AdamW of a
    small MLP stack, one thread, 150 steps; the median of three runs): the seconds that say how fast
    this box is today, so a wall time can be reported as a multiple of it."""
    import torch

    torch.set_num_threads(1)

    def once() -> float:
        g = torch.Generator().manual_seed(0)
        layers = [torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)] * 4
        net = torch.nn.Sequential(*layers)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        x = torch.randn(64, 256, generator=g)
        t = time.perf_counter()
        for _ in range(150):
            loss = net(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return time.perf_counter() - t

    return statistics.median(once() for _ in range(repeats))
