"""Step-equivalent compute accounting for Static-IV and DIR-R (paper §4.4, App. A.4).

One step-equivalent = one optimisation step of the objective. Static-IV costs T (1x).
DIR-R commits S0 to step t, probes rho = 0 and rho_p for d steps each from C_t; the rho = 0 probe
*is* the start of the committed continuation (bitwise), so a non-triggered run costs T + d.
After a trigger, the rho_p branch continues to T and the |A| - 2 remaining candidates run from C_t.
With T = 200, t = 160, d = 20, |A| = 5 this gives the paper's 1.10x and 1.80x; the exhaustive
multi-checkpoint reference (all actions from checkpoints {0, T/5, ..., 4T/5}) gives 16x.
"""

from __future__ import annotations

from supportbench.experiments.calibration import dirr_path_steps


def dirr_step_equivalents(T: int, t: int, d: int, n_actions: int, triggered: bool) -> float:
    """Normalised compute of one DIR-R run (Static-IV = 1)."""
    return sum(dirr_path_steps(T, t, d, n_actions, triggered).values()) / T


def exhaustive_reference(T: int, n_actions: int = 5, n_checkpoints: int = 5) -> float:
    """All actions continued from checkpoints i*T/n (i = 0..n-1), plus the committed trajectory."""
    checkpoints = [i * T // n_checkpoints for i in range(n_checkpoints)]
    return (T + n_actions * sum(T - c for c in checkpoints)) / T


def sweep_estimate(spec, n_actions: int = 5) -> dict:
    """What ``sweep`` would run, without loading anything: cells and runs per benchmark and phase,
    and the compute in step-equivalents (one optimisation step = 1). Static runs cost T; calibration
    DIR-R runs evaluate every candidate (the triggered path); a final DIR-R run costs between the
    non-triggered and the triggered path, so finals are given as a [low, high] range."""
    out = {"benchmarks": {}, "runs": 0, "steps_low": 0.0, "steps_high": 0.0}
    for b in spec.benchmarks:
        st = spec.settings(b)
        T, t, d = st["T"], st["t"], st["d"]
        trig = sum(dirr_path_steps(T, t, d, n_actions, True).values())
        none = sum(dirr_path_steps(T, t, d, n_actions, False).values())
        phases = {}
        for split in ("calibration", "final", "replication"):
            runs = [r for r in spec.runs(split) if r.benchmark == b]
            if not runs:
                continue
            static = sum(r.variant == "static" for r in runs)
            dirr = len(runs) - static
            lo = static * T + dirr * (trig if split == "calibration" else none)
            hi = static * T + dirr * trig
            cells = len({(r.field, r.objective, r.seed) for r in runs})
            phases[split] = {
                "runs": len(runs),
                "static": static,
                "dirr": dirr,
                "cells": cells,
                "steps_low": float(lo),
                "steps_high": float(hi),
            }
            out["runs"] += len(runs)
            out["steps_low"] += lo
            out["steps_high"] += hi
        out["benchmarks"][b] = {
            "model": st["model"],
            "fields": list(st["fields"]),
            "objectives": list(st["objectives"]),
            "methods": list(st["methods"]),
            "T": T,
            "t": t,
            "d": d,
            "phases": phases,
        }
    return out
