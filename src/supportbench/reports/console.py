"""Table 1 of the controlled separation as text: what ``supportbench run --benchmark controlled``
prints and what the report writes to ``controlled.md`` — one rendering, read from the registry.

``controlled_text(ctx)`` renders the frozen decisions the runs follow (one per theta_0 build: its
hash, theta_0, the calibration targets, every locator's calibration AUROC, each interface's mean
calibration J per learning rate with its 95% t interval over the calibration targets), the targets
excluded as not learned, the construction's validity gates, Table 1's quantities under both J's
and every locator's localization quantities. It raises ``Missing`` (as the tables do) when the
registry holds no complete controlled experiment.
"""

from __future__ import annotations

from supportbench.experiments.record import ControlledDecision
from supportbench.reports.stats import mean_ci
from supportbench.reports.tables import (
    Context,
    controlled_locators,
    controlled_main,
    decision_by_hash,
)


def _num(x: float | None) -> str:
    return f"{x:>8.5f}" if x is not None else f"{'n/a':>8}"


def decision_lines(dec: ControlledDecision) -> list[str]:
    """The frozen decision: what it is, what it was frozen from and what it chose."""
    aurocs = ", ".join(f"{k} {_num(v).strip()}" for k, v in dec.locator_aurocs.items())
    lines = [
        f"frozen controlled decision {dec.label} (frozen_at {dec.frozen_at}, theta_0 "
        f"{dec.theta0_hash[:12]}), from calibration targets {', '.join(dec.calibration_targets)}:",
        f"  calibration AUROC per locator: {aurocs}",
        f"  primary locator: {dec.primary_locator}",
    ]
    per_target = dec.extras.get("calibration_J") or {}
    label = " [95% t interval over the calibration targets]" if per_target else ""
    for m, by_lr in dec.mean_J.items():
        per_lr = ", ".join(
            f"{lr} {v:+.4f}{_target_interval(per_target.get(m, {}).get(lr))}"
            for lr, v in by_lr.items()
        )
        lines.append(f"  {m}: lr {dec.lr[m]:g}   (mean calibration J per lr{label}: {per_lr})")
    if dec.mean_J and not per_target:
        lines.append("  (the decision records no per-target calibration J: no intervals)")
    return lines


def _target_interval(js: dict[str, float] | None) -> str:
    """The 95% t interval of a mean calibration J over its targets, as `` [lo, hi]``; empty where
    the decision does not record the per-target values or fewer than two targets finished."""
    m = mean_ci(list(js.values())) if js else None
    return "" if m is None or m.ci is None else f" [{m.ci[0]:+.4f}, {m.ci[1]:+.4f}]"


def _table_lines(q: dict) -> list[str]:
    b = q["bounded"] or {}

    def both(key, fmt):
        return f"{fmt(b.get(key)):>22} {fmt(q[key]):>22}"

    def ci(x):
        return "" if x is None else f"[{x[0]:+.4f}, {x[1]:+.4f}]"

    def signed(none: str):
        return lambda x: none if x is None else f"{x:+.4f}"

    lines = [
        f"  Table 1 (primary locator {q['primary_locator']}){'':<12} "
        f"{'bounded J (primary)':>22} {'summed-NLL J':>22}"
    ]
    for label, value in (
        ("storage AUROC (learned targets)", _num(q["auroc"]).strip()),
        ("storage AUROC, every final target", _num(q["auroc_all"]).strip()),
        ("residualized storage AUROC", _num(q["resid_auroc"]).strip()),
        ("correct within-pair storage direction", q["direction"]),
    ):
        lines.append(f"  {label:<40} {value}")
    for label, key, fmt in (
        ("LoRA intervention wins", "lora_wins", str),
        ("storage/best-intervention agreement", "agree", str),
        ("LoRA - backbone paired difference", "diff", signed("n/a")),
        ("  95% t interval", "diff_ci", ci),
        ("storage score / paired difference corr.", "corr", signed("undefined")),
    ):
        lines.append(f"  {label:<40} " + both(key, fmt))
    return lines


def _locator_lines(loc: dict) -> list[str]:
    lines = [
        f"  {'locator':<26} {'calib. AUROC':>12} {'AUROC, every':>13} {'AUROC':>8} "
        f"{'resid. AUROC':>13} {'within-pair':>12}   (the last three: learned targets)"
    ]
    for name, lq in loc["locators"].items():
        mark = " (primary)" if name == loc["primary"] else ""
        lines.append(
            f"  {name:<26} {_num(loc['calibration'].get(name)):>12} "
            f"{_num(loc['every_target'].get(name)):>13} {_num(lq['auroc'])} "
            f"{_num(lq['resid_auroc']):>13} {lq['direction']:>12}{mark}"
        )
    covariates = ", ".join(f"{k} {_num(v).strip()}" for k, v in loc["covariates"].items())
    lines += [
        "  covariate AUROC (label: injected through the backbone; far from 0.5 = it encodes the "
        f"label): {covariates}",
        f"  residualized on: {', '.join(loc['residualized_on']) or 'no covariate'} (only "
        f"covariates whose own label AUROC is within 0.5 +- {loc['covariate_band']})",
    ]
    return lines


def controlled_text(ctx: Context) -> list[str]:
    """Table 1 and the decision behind it, as lines of text (module docstring)."""
    q, loc = controlled_main(ctx), controlled_locators(ctx)
    decisions = [decision_by_hash(ctx, b["decision"]) for b in q["per_build"]]
    lines = [line for d in decisions if d is not None for line in decision_lines(d)]
    if len(lines) == 0:
        lines = ["the controlled runs name no frozen decision"]
    lines.append(
        f"targets excluded from Table 1 (theta_0 recall < {q['recall_threshold']}): "
        f"{q['n_excluded']}/{q['n_targets']}"
        + (f": {', '.join(q['excluded'])}" if q["excluded"] else "")
    )
    lines += [
        f"  validity gate {g['gate']}: {'pass' if g['passed'] else 'FAIL'} "
        f"({g['value']}; rule: {g['rule']})"
        for g in q.get("gates", [])
    ]
    return lines + _table_lines(q) + _locator_lines(loc)
