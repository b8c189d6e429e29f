"""DIR-R calibration (paper Eq. 17-18, App. A.4): choose tau* on calibration seeds only, then freeze it.

calibrate            on development checkpoints, pick tau* among thresholds whose trigger fraction lies in
                     the admissible range, maximising captured gain per extra step-equivalent.
calibrate_and_freeze tau*, rho_p, d, A, range, seeds and baselines frozen with a content hash
                     (``experiments.decisions``).
Plain arithmetic on run records: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from supportbench.errors import CalibrationError
from supportbench.experiments.decisions import ACTIONS, freeze_decision, runs_identity
from supportbench.experiments.record import RunRecord
from supportbench.harness.compute import dirr_path_steps


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


def calibrate(signals: Sequence[float], gains: Sequence[float], *, T: int, t: int, d: int, n_actions: int = 5,
              admissible: tuple[float, float] = (0.2, 0.8)) -> Calibration:
    """Choose tau* from development checkpoints i with probe signal s_i and available gain gamma_i.

    Thresholds considered: 0 and every distinct s_i (any tau between two distinct signals triggers the
    same set). For each, I_tau = {i : s_i > tau}; admissible iff lo <= |I_tau|/n <= hi. Objective:
    sum_{i in I_tau} gamma_i / sum_i (cost_i - 1), cost_i = the normalised path cost (trigger or not).
    Ties: the larger tau (fewer triggers, less compute).
    """
    s = [float(x) for x in signals]
    g = [max(0.0, float(x)) for x in gains]
    if len(s) != len(g) or not s:
        raise CalibrationError(f"need one available gain per probe signal, got {len(s)} signals and {len(g)} gains")
    lo, hi = admissible
    if not 0 <= lo <= hi <= 1:
        raise CalibrationError(f"admissible trigger range must satisfy 0 <= lo <= hi <= 1, got {admissible}")
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
        rows.append({"tau": tau, "trigger_fraction": frac, "captured_gain": captured, "extra_compute": extra,
                     "gain_per_compute": ratio, "admissible": ok})
        if ok and (best is None or ratio > best[0] + 1e-15 or (abs(ratio - best[0]) <= 1e-15 and tau > best[1])):
            best = (ratio, tau, idx, captured, extra)
    if best is None:
        fracs = ", ".join(f"{r['trigger_fraction']:.0%}" for r in rows)
        raise CalibrationError(f"no threshold has a trigger fraction in the admissible range [{lo:.0%}, {hi:.0%}]; "
                               f"available fractions: {fracs}. Widen the range or add calibration instances")
    ratio, tau, idx, captured, extra = best
    prec = sum(1 for i in idx if g[i] > 0) / len(idx) if idx else 0.0
    return Calibration(tau, len(idx) / n, len(idx), n, captured, sum(g), extra, ratio, prec, rows)


def calibration_instances(records: Sequence[RunRecord]) -> list[dict]:
    """(s_i, gamma_i) from completed calibration-split DIR-R records; anything else is refused."""
    out = []
    for r in records:
        spec, d = r.spec, r.dirr
        if spec.get("split") != "calibration" or spec.get("variant") != "dirr":
            raise CalibrationError(f"run {r.run_key[:12]} is {spec.get('split')}/{spec.get('variant')}: "
                                   "calibration reads calibration-split DIR-R runs only")
        if r.status != "ok" or d is None or not d.complete:
            raise CalibrationError(f"run {r.run_key[:12]} has no complete candidate set (status {r.status})")
        v = d.candidates
        out.append({"run_key": r.run_key, "field": spec["field"], "seed": spec["seed"],
                    "s": d.probe_signal, "gamma": max(0.0, max(v.values()) - v["0.0"])})
    return out


def calibrate_and_freeze(records: Sequence[RunRecord], out_dir: str | Path, *, baselines: Sequence[str] = (),
                         admissible: tuple[float, float] = (0.2, 0.8),
                         experiment: str | None = None) -> tuple[Calibration, dict]:
    """Calibrate tau* on calibration records and freeze it with rho_p, d, A, range, seeds and baselines."""
    if not records:
        raise CalibrationError("no calibration records: run the calibration seeds first")
    inst = calibration_instances(records)
    keys = {(r.spec["T"], r.spec["t"], r.spec["d"], r.spec["rho_p"], r.spec["benchmark"], r.spec["objective"],
             r.dirr.selection) for r in records}
    if len(keys) != 1:
        raise CalibrationError(f"calibration records disagree on (T, t, d, rho_p, benchmark, objective, selection): "
                               f"{sorted(keys)}")
    T, t, d, rho_p, benchmark, objective, selection = keys.pop()
    cal = calibrate([i["s"] for i in inst], [i["gamma"] for i in inst], T=T, t=t, d=d, admissible=admissible)
    dec = freeze_decision(out_dir, tau=cal.tau, rho_p=rho_p, d=d, t=t, T=T, actions=list(ACTIONS),
                          admissible_range=list(admissible), calibration_seeds=sorted({i["seed"] for i in inst}),
                          baselines=list(baselines), benchmark=benchmark, objective=objective, selection=selection,
                          calibration_runs=runs_identity(records),
                          experiment=experiment or records[0].spec.get("experiment"),
                          calibration={"instances": inst, "trigger_fraction": cal.trigger_fraction,
                                       "triggered": cal.triggered, "n": cal.n, "captured_gain": cal.captured_gain,
                                       "total_gain": cal.total_gain, "extra_compute": cal.extra_compute,
                                       "gain_per_compute": cal.gain_per_compute, "precision": cal.precision})
    return cal, dec
