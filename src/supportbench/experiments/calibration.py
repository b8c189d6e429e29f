"""The calibration rule of DIR-R (paper Eq. 17-18, App. A.4) and the path costs it weighs: plain
arithmetic on probe signals and gains, no torch and no files, so that the registry's audit can
recompute tau* from the calibration records a decision cites (``registry.audit``) with the very rule
that froze it (``harness.calibration.calibrate_and_freeze``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from supportbench.errors import CalibrationError


def dirr_path_steps(T: int, t: int, d: int, n_actions: int, triggered: bool) -> dict[str, int]:
    """Optimizer steps of one DIR-R run by path: the committed trajectory, the probe, and (when the
    gate triggers) the exhaustive continuation of every other action."""
    return {
        "committed": T,
        "probe": d,
        "exhaustive": ((T - t - d) + (n_actions - 2) * (T - t)) if triggered else 0,
    }


@dataclass(frozen=True)
class Calibration:
    tau: float
    trigger_fraction: float
    triggered: int
    n: int
    captured_gain: float
    total_gain: float
    extra_compute: float
    gain_per_compute: float
    precision: float
    table: list[dict]


def calibrate(
    signals: Sequence[float],
    gains: Sequence[float],
    *,
    T: int,
    t: int,
    d: int,
    n_actions: int = 5,
    admissible: tuple[float, float] = (0.2, 0.8),
) -> Calibration:
    """Choose tau* from development checkpoints i with probe signal s_i and available gain gamma_i.

    Thresholds considered: 0 and every distinct s_i (any tau between two distinct signals triggers
    the same set). For each, I_tau = {i : s_i > tau}; admissible iff lo <= |I_tau|/n <= hi.
    Objective: sum_{i in I_tau} gamma_i / sum_i (cost_i - 1), cost_i = the normalised path cost
    (trigger or not). Ties: the larger tau (fewer triggers, less compute).
    """
    s = [float(x) for x in signals]
    g = [max(0.0, float(x)) for x in gains]
    if len(s) != len(g) or not s:
        raise CalibrationError(
            f"need one available gain per probe signal, got {len(s)} signals and {len(g)} gains"
        )
    lo, hi = admissible
    if not 0 <= lo <= hi <= 1:
        raise CalibrationError(
            f"admissible trigger range must satisfy 0 <= lo <= hi <= 1, got {admissible}"
        )
    n = len(s)
    c_trig = sum(dirr_path_steps(T, t, d, n_actions, True).values()) / T - 1
    c_none = sum(dirr_path_steps(T, t, d, n_actions, False).values()) / T - 1
    rows, best = [], None
    for tau in sorted({0.0, *s}):
        idx = [i for i in range(n) if s[i] > tau]
        frac = len(idx) / n
        captured = sum(g[i] for i in idx)
        extra = len(idx) * c_trig + (n - len(idx)) * c_none
        ratio = captured / extra if extra > 0 else 0.0
        ok = lo - 1e-12 <= frac <= hi + 1e-12
        rows.append(
            {
                "tau": tau,
                "trigger_fraction": frac,
                "captured_gain": captured,
                "extra_compute": extra,
                "gain_per_compute": ratio,
                "admissible": ok,
            }
        )
        if ok and (
            best is None
            or ratio > best[0] + 1e-15
            or (abs(ratio - best[0]) <= 1e-15 and tau > best[1])
        ):
            best = (ratio, tau, idx, captured, extra)
    if best is None:
        fracs = ", ".join(f"{r['trigger_fraction']:.0%}" for r in rows)
        raise CalibrationError(
            f"no threshold has a trigger fraction in the admissible range [{lo:.0%}, {hi:.0%}]; "
            f"available fractions: {fracs}. Widen the range or add calibration instances"
        )
    ratio, tau, idx, captured, extra = best
    prec = sum(1 for i in idx if g[i] > 0) / len(idx) if idx else 0.0
    return Calibration(tau, len(idx) / n, len(idx), n, captured, sum(g), extra, ratio, prec, rows)
