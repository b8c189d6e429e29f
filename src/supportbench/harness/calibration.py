"""DIR-R calibration (paper Eq. 17-18, App. A.4): choose tau* on calibration seeds only, then freeze
it.

calibrate            on development checkpoints, pick tau* among thresholds whose trigger fraction
                     lies in the admissible range, maximising captured gain per extra
                     step-equivalent.
calibrate_and_freeze tau*, rho_p, d, A, range, seeds and baselines frozen with a content hash
                     (``experiments.decisions``).
Plain arithmetic on run records: no torch. The rule itself is ``experiments.calibration``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from supportbench.errors import CalibrationError
from supportbench.experiments.calibration import (
    Calibration,
    calibrate,
)  # the rule (the audit recomputes it)
from supportbench.experiments.decisions import ACTIONS, freeze_decision, runs_identity
from supportbench.experiments.record import RunRecord


def calibration_instances(records: Sequence[RunRecord]) -> list[dict]:
    """(s_i, gamma_i) from completed calibration-split DIR-R records; anything else is refused."""
    out = []
    for r in records:
        spec, d = r.spec, r.dirr
        if spec.get("split") != "calibration" or spec.get("variant") != "dirr":
            raise CalibrationError(
                f"run {r.run_key[:12]} is {spec.get('split')}/{spec.get('variant')}: "
                "calibration reads calibration-split DIR-R runs only"
            )
        if r.status != "ok" or d is None or not d.complete:
            raise CalibrationError(
                f"run {r.run_key[:12]} has no complete candidate set (status {r.status})"
            )
        v = d.candidates
        out.append(
            {
                "run_key": r.run_key,
                "field": spec["field"],
                "seed": spec["seed"],
                "build": spec.get("build", 0),
                "s": d.probe_signal,
                "gamma": max(0.0, max(v.values()) - v["0.0"]),
            }
        )
    return out


def calibrate_and_freeze(
    records: Sequence[RunRecord],
    out_dir: str | Path,
    *,
    baselines: Sequence[str] = (),
    admissible: tuple[float, float] = (0.2, 0.8),
    experiment: str | None = None,
    claims_hash: str | None = None,
) -> tuple[Calibration, dict]:
    """Calibrate tau* on calibration records and freeze it with rho_p, d, A, range, seeds and
    baselines."""
    if not records:
        raise CalibrationError("no calibration records: run the calibration seeds first")
    inst = calibration_instances(records)
    keys = {
        (
            r.spec["T"],
            r.spec["t"],
            r.spec["d"],
            r.spec["rho_p"],
            r.spec["benchmark"],
            r.spec["objective"],
            r.dirr.selection,
        )
        for r in records
    }
    if len(keys) != 1:
        raise CalibrationError(
            f"calibration records disagree on (T, t, d, rho_p, benchmark, objective, selection): "
            f"{sorted(keys)}"
        )
    T, t, d, rho_p, benchmark, objective, selection = keys.pop()
    cal = calibrate(
        [i["s"] for i in inst], [i["gamma"] for i in inst], T=T, t=t, d=d, admissible=admissible
    )
    dec = freeze_decision(
        out_dir,
        tau=cal.tau,
        rho_p=rho_p,
        d=d,
        t=t,
        T=T,
        actions=list(ACTIONS),
        admissible_range=list(admissible),
        calibration_seeds=sorted({i["seed"] for i in inst}),
        baselines=list(baselines),
        benchmark=benchmark,
        objective=objective,
        selection=selection,
        calibration_runs=runs_identity(records),
        experiment=experiment or records[0].spec.get("experiment"),
        claims_hash=claims_hash,
        calibration={
            "instances": inst,
            "trigger_fraction": cal.trigger_fraction,
            "triggered": cal.triggered,
            "n": cal.n,
            "captured_gain": cal.captured_gain,
            "total_gain": cal.total_gain,
            "extra_compute": cal.extra_compute,
            "gain_per_compute": cal.gain_per_compute,
            "precision": cal.precision,
        },
    )
    return cal, dec
