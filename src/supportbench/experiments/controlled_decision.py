"""The controlled separation's frozen decision (paper §5.2; rules in docs/benchmarks.md, "Frozen
before the final runs"), taken on the calibration targets only and written before any final
controlled run starts:

  primary locator   the registered locator with the highest localization AUROC on the calibration
                    targets (label: the injecting interface, construction data, not an outcome);
                    ties -> the earlier name alphabetically
  learning rates    per interface, the lr of ``LR_GRID`` with the highest mean summed-NLL J over the
                    calibration targets unlearned through that interface; ties -> the smaller lr
  learned targets   a target counts in Table 1 only when its theta_0 recall
                    is >= ``RECALL_THRESHOLD``

Like a DIR-R decision (``decisions.py``) its ``hash`` is the sha256 of the frozen items and
``frozen_at``, so neither can change without changing the hash. No torch: the registry's ingest and
audit read it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from supportbench._io import write_json_atomic
from supportbench.errors import DecisionError

KIND = "controlled"
LR_GRID: tuple[float, ...] = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
RECALL_THRESHOLD = 0.5
# The construction's validity gates (docs/benchmarks.md, "Validity gates"), read from theta_0 and
# the construction's labels only, fixed before any unlearning outcome: Table 1's claim is tested
# only when all pass.
GATE_LEARNED_SHARE = (
    0.5  # facts learned: each interface has at least this share of its final targets learned
)
GATE_RECALL_GAP = (
    0.1  # interfaces balanced: the interfaces' median theta_0 recall differ by at most this
)
GATE_AUROC = 0.9  # storage localizable: the primary locator's AUROC on every final target
# Residualization (Table 1's residualized AUROC): a nuisance covariate is regressed out only when
# its own AUROC for the label lies within 0.5 +- this; further out it encodes the label, and
# regressing on it would remove label signal along with nuisance (it is reported, not used).
COVARIATE_BAND = 0.15


def residualization_covariates(aurocs: dict[str, float | None]) -> list[str]:
    """The covariates a residualized AUROC may regress on: own label AUROC within
    0.5 +- ``COVARIATE_BAND``."""
    return sorted(k for k, v in aurocs.items() if v is not None and abs(v - 0.5) <= COVARIATE_BAND)


def construction_gates(
    recall: dict[str, list[float]], auroc_all: float | None, threshold: float = RECALL_THRESHOLD
) -> list[dict]:
    """The three gates on ``recall`` (injecting interface -> theta_0 recall of each of its final
    targets) and the primary locator's AUROC on every final target; each
    ``{"gate", "passed", "value", "rule"}``."""
    import statistics

    learned = {
        w: sum(r >= threshold for r in v) / len(v) if v else 0.0 for w, v in sorted(recall.items())
    }
    medians = {w: statistics.median(v) if v else 0.0 for w, v in sorted(recall.items())}
    gap = max(medians.values()) - min(medians.values()) if medians else float("inf")
    return [
        {
            "gate": "facts learned",
            "passed": bool(learned) and min(learned.values()) >= GATE_LEARNED_SHARE,
            "value": ", ".join(f"{w} {x:.0%}" for w, x in learned.items()),
            "rule": f"each interface has >= {GATE_LEARNED_SHARE:.0%} "
            f"of its final targets at theta_0 recall >= {threshold}",
        },
        {
            "gate": "interfaces balanced",
            "passed": gap <= GATE_RECALL_GAP,
            "value": ", ".join(f"{w} median recall {m:.3f}" for w, m in medians.items()),
            "rule": f"the interfaces' median theta_0 recall differ by <= {GATE_RECALL_GAP}",
        },
        {
            "gate": "storage localizable",
            "passed": auroc_all is not None and auroc_all >= GATE_AUROC,
            "value": "undefined" if auroc_all is None else f"primary locator AUROC {auroc_all:.3f}",
            "rule": f"the primary locator's AUROC on every final target >= {GATE_AUROC}",
        },
    ]


FROZEN_ITEMS = (
    "kind",
    "experiment",
    "benchmark",
    "objective",
    "model",
    "T",
    "seed",
    "theta0_hash",
    "calibration_targets",
    "locator_aurocs",
    "primary_locator",
    "lr_grid",
    "mean_J",
    "lr",
    "recall_threshold",
    "calibration_runs",
)


def auroc(scores: list[float], labels: list[int]) -> float | None:
    """P(score of a positive > score of a negative), ties counted half; None without both
    classes."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def choose_primary(aurocs: dict[str, float | None]) -> str:
    """The locator with the highest calibration AUROC; ties -> the earlier name alphabetically."""
    ok = {k: v for k, v in aurocs.items() if v is not None}
    if not ok:
        raise DecisionError(
            "no locator has a calibration AUROC (the calibration targets need both interfaces)"
        )
    return min(ok, key=lambda k: (-ok[k], k))


def choose_lr(mean_J: dict[float, float]) -> float:
    """The lr with the highest mean J; ties -> the smaller lr."""
    if not mean_J:
        raise DecisionError(
            "no calibration run of this interface finished: cannot choose its learning rate"
        )
    return min(mean_J, key=lambda lr: (-mean_J[lr], lr))


def decision_hash(dec: dict) -> str:
    items = {k: dec.get(k) for k in (*FROZEN_ITEMS, "frozen_at")}
    return hashlib.sha256(
        json.dumps(items, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def is_controlled(dec: dict) -> bool:
    return dec.get("kind") == KIND


def freeze_controlled(directory: str | Path, **items) -> dict:
    """Write ``<directory>/<hash>.json`` with the frozen items, their content hash and frozen_at."""
    items = {"kind": KIND, **items}
    missing = [k for k in FROZEN_ITEMS if k not in items]
    if missing:
        raise DecisionError(f"cannot freeze a controlled decision without {missing}")
    dec = {k: items[k] for k in FROZEN_ITEMS}
    dec["lr"] = {k: float(v) for k, v in dec["lr"].items()}
    dec.update({k: v for k, v in items.items() if k not in FROZEN_ITEMS})  # informational extras
    dec["frozen_at"] = datetime.now(UTC).isoformat(timespec="microseconds")
    dec = json.loads(
        json.dumps(dec)
    )  # the hash is of what the file will hold (JSON keys are strings)
    dec["hash"] = decision_hash(dec)
    write_json_atomic(Path(directory) / f"{dec['hash']}.json", dec)
    return dec


def verify_controlled(dec: dict, source: str = "controlled decision") -> None:
    from supportbench.experiments.decisions import check_frozen_at

    missing = [k for k in (*FROZEN_ITEMS, "frozen_at", "hash") if k not in dec]
    if missing:
        raise DecisionError(f"{source}: not a frozen controlled decision, it lacks {missing}")
    check_frozen_at(dec["frozen_at"], source)
    lr = dec["lr"]
    if (
        not isinstance(lr, dict)
        or not lr
        or not all(
            not isinstance(v, bool) and isinstance(v, int | float) and 0 < v < float("inf")
            for v in lr.values()
        )
    ):
        raise DecisionError(f"{source}: lr = {lr!r} must map each interface to a learning rate > 0")
    if not isinstance(dec["primary_locator"], str) or not dec["primary_locator"]:
        raise DecisionError(
            f"{source}: primary_locator = {dec['primary_locator']!r} must be a locator's name"
        )
    want = decision_hash(dec)
    if dec["hash"] != want:
        raise DecisionError(
            f"{source}: frozen items do not match their content hash (stored {dec['hash']}, "
            f"recomputed {want}): the primary locator, a learning rate, frozen_at or another "
            "frozen item was changed after freezing"
        )
