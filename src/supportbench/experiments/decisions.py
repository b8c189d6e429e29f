"""Frozen DIR-R decisions (no torch: the registry's audit reads them too).

A decision freezes tau*, rho_p, d, t, T, the action set A, the admissible trigger range, the
calibration seeds, the baseline identities, the benchmark/objective and the selection mode. Its
``hash`` is the sha256 of those items **and** ``frozen_at`` (when it was frozen), so neither an item
nor the date can change without changing the hash; ``verify_decision`` detects a mismatch. A file
whose items were edited *and* its hash recomputed is a different decision: the runs recorded under
the original hash no longer find it (the audit reports runs whose decision is not in the registry).
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

from supportbench._io import read_json_object, write_json_atomic
from supportbench.errors import DecisionError

ACTIONS: tuple[float, ...] = (0.0, 0.01, 0.025, 0.05, 0.10)
SELECTIONS = ("evaluation", "development")

FROZEN_ITEMS = (
    "tau",
    "rho_p",
    "d",
    "t",
    "T",
    "actions",
    "admissible_range",
    "calibration_seeds",
    "baselines",
    "benchmark",
    "objective",
    "selection",
    "calibration_runs",
)


def runs_identity(records) -> list[str]:
    """``run_key:fingerprint`` of each record a decision was frozen from, sorted: what the runs were
    (every resolved setting, the model's and data's content) and which code computed them. A sweep
    reuses a decision only when its calibration records still have exactly this identity."""
    return sorted(f"{r.run_key}:{r.fingerprint.hash if r.fingerprint else ''}" for r in records)


def decision_hash(decision: dict) -> str:
    items = {k: decision.get(k) for k in (*FROZEN_ITEMS, "frozen_at")}
    return hashlib.sha256(
        json.dumps(items, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def freeze_decision(directory: str | Path, **items) -> dict:
    """Write ``<directory>/<hash>.json`` with the frozen items, their content hash and frozen_at."""
    missing = [k for k in FROZEN_ITEMS if k not in items]
    if missing:
        raise DecisionError(f"cannot freeze a decision without {missing}")
    if items["selection"] not in SELECTIONS:
        raise DecisionError(f"selection must be one of {SELECTIONS}, got {items['selection']!r}")
    dec = {k: items[k] for k in FROZEN_ITEMS}
    dec["actions"] = [float(a) for a in dec["actions"]]
    dec.update({k: v for k, v in items.items() if k not in FROZEN_ITEMS})  # informational extras
    dec["frozen_at"] = datetime.now(UTC).isoformat(timespec="microseconds")
    dec["hash"] = decision_hash(dec)
    write_json_atomic(Path(directory) / f"{dec['hash']}.json", dec)
    return dec


def load_decision(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise DecisionError(f"decision file '{path}' does not exist")
    dec = read_json_object(path, DecisionError, "decision file")
    verify_decision(dec, source=str(path))
    return dec


def check_frozen_at(value, source: str) -> datetime:
    """``frozen_at``: an ISO timestamp with a time zone, not in the future (5 minutes of clock skew
    allowed)."""
    if not isinstance(value, str) or not value:
        raise DecisionError(f"{source}: no frozen_at timestamp (got {value!r})")
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise DecisionError(f"{source}: frozen_at {value!r} is not an ISO timestamp") from None
    if at.tzinfo is None:
        raise DecisionError(f"{source}: frozen_at {value!r} has no time zone")
    if at > datetime.now(UTC) + timedelta(minutes=5):
        raise DecisionError(f"{source}: frozen_at {value!r} is in the future")
    return at


def _num(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x)


def _whole(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, int)


# every frozen item's type and range: a decision that breaks one is refused, naming it
ITEM_CHECKS = {
    "tau": (_num, "a finite number"),
    "rho_p": (lambda x: _num(x) and x in ACTIONS and x > 0, "a probe action of A (not 0)"),
    "d": (lambda x: _whole(x) and x > 0, "a whole number > 0"),
    "t": (lambda x: _whole(x) and x > 0, "a whole number > 0"),
    "T": (lambda x: _whole(x) and x > 0, "a whole number > 0"),
    "actions": (
        lambda x: isinstance(x, list) and bool(x) and all(_num(a) for a in x),
        "a list of numbers",
    ),
    "admissible_range": (
        lambda x: (
            isinstance(x, list)
            and len(x) == 2
            and all(_num(a) for a in x)
            and 0 <= x[0] <= x[1] <= 1
        ),
        "[lo, hi] with 0 <= lo <= hi <= 1",
    ),
    "calibration_seeds": (
        lambda x: isinstance(x, list) and all(_whole(v) and 0 <= v < 2**63 for v in x),
        "a list of whole numbers in 0..2^63-1",
    ),
    "baselines": (
        lambda x: isinstance(x, list) and all(isinstance(v, str) and v for v in x),
        "a list of names",
    ),
    "benchmark": (lambda x: isinstance(x, str) and bool(x), "a name"),
    "objective": (lambda x: isinstance(x, str) and bool(x), "a name"),
    "selection": (lambda x: x in SELECTIONS, f"one of {', '.join(SELECTIONS)}"),
    "calibration_runs": (
        lambda x: isinstance(x, list) and all(isinstance(v, str) and ":" in v for v in x),
        "a list of run_key:fingerprint strings",
    ),
}


def verify_decision(dec: dict, source: str = "decision") -> None:
    missing = [k for k in (*FROZEN_ITEMS, "hash") if k not in dec]
    if missing:
        raise DecisionError(f"{source}: not a frozen decision, it lacks {missing}")
    check_frozen_at(dec.get("frozen_at"), source)
    for key, (ok, what) in ITEM_CHECKS.items():
        if not ok(dec[key]):
            raise DecisionError(f"{source}: {key} = {dec[key]!r} must be {what}")
    if not dec["t"] < dec["T"] or dec["t"] + dec["d"] > dec["T"]:
        raise DecisionError(
            f"{source}: t = {dec['t']}, d = {dec['d']}, T = {dec['T']} must satisfy t < T and "
            "t + d <= T"
        )
    want = decision_hash(dec)
    if dec.get("hash") != want:
        raise DecisionError(
            f"{source}: frozen items do not match their content hash (stored {dec.get('hash')}, "
            f"recomputed {want}): tau={dec.get('tau')!r}, frozen_at or another frozen item was "
            "changed after freezing"
        )


def load_decision_for(
    spec, path: str | Path | None, *, allow_unfrozen: bool = False
) -> dict | None:
    """The decision a DIR-R run of ``spec`` must follow; calibration runs need none."""
    if spec.split == "calibration":
        return None
    if path is None:
        if allow_unfrozen:
            return None
        raise DecisionError(
            f"DIR-R {spec.split} runs need a frozen decision (--decision FILE) so that tau*, rho_p "
            "and d cannot be tuned on final outcomes; pass --allow-unfrozen to run anyway "
            "(the record is then marked unfrozen)"
        )
    return load_decision(path)


def check_decision_matches(spec, dec: dict) -> None:
    for k in ("rho_p", "d", "t", "T", "benchmark", "objective"):
        want = getattr(spec, k)
        if dec.get(k) != want:
            raise DecisionError(
                f"decision {dec['hash'][:12]} froze "
                f"{k}={dec.get(k)!r} but the run asks {k}={want!r}"
            )
