"""Selective DIR-R: checkpoint-conditioned support revision (paper §4.4, Algorithm 1, App. A.4).

candidate_supports   Eq. 12: drop the k(rho) = floor(rho M) lowest-scoring selected groups, add the
                     k(rho) highest-scoring unselected ones; equal cost kept exactly (explicit cost
                     matching for heterogeneous geometries).
run_dirr             commit S0 to t, save C_t, probe rho = 0 and rho_p for d steps from independent
                     restorations, s_t = max(0, V~(rho_p) - V~(0)) on development records (Eq.
                     13-14); s_t <= tau* -> continue rho = 0 (bitwise the Static-IV continuation);
                     else run every rho in A from C_t to T and keep argmax V_t, ties toward smaller
                     rho (Eq. 15).
Calibration (Eq. 17-18) is in ``harness.calibration``; frozen decisions in
``experiments.decisions``.

V_t's selection reads either the evaluation records ("evaluation", the paper's definition: V_t is
the terminal J) or held-out development records ("development"); every record says which.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch

from supportbench.errors import SpecError
from supportbench.experiments.decisions import ACTIONS, SELECTIONS, check_decision_matches
from supportbench.experiments.record import Compute, DirrResult
from supportbench.harness.compute import dirr_path_steps, exhaustive_reference
from supportbench.unlearning.column_grads import use_column_grads
from supportbench.unlearning.support import Geometry, Support, rank
from supportbench.unlearning.train import SupportTrainer


# ---- candidate family (Eq. 12) -------------------------------------------------------------------
def candidate_supports(
    scores: torch.Tensor, support: Support, actions: Sequence[float] = ACTIONS
) -> dict[float, Support]:
    geo = support.geometry
    order = rank(scores).tolist()  # highest score first, ties by group id
    chosen = set(support.groups)
    lowest_selected = [g for g in reversed(order) if g in chosen]  # g^-_1, g^-_2, ...
    best_unselected = [g for g in order if g not in chosen]  # g^+_1, g^+_2, ...
    M = len(support)
    equal = bool((geo.costs == geo.costs[0]).all())
    out = {}
    for rho in actions:
        if not 0 <= rho < 1:
            raise SpecError(f"replacement fraction must lie in [0, 1), got {rho}")
        k = math.floor(rho * M + 1e-9)
        if k == 0:
            out[rho] = support
            continue
        k = min(k, len(best_unselected))
        removed = lowest_selected[:k]
        if equal:
            added = best_unselected[:k]
        else:
            added = _cost_matched(best_unselected, geo, int(geo.costs[removed].sum()), rho)
        cand = Support.of(geo, (chosen - set(removed)) | set(added))
        if cand.cost != support.cost:
            raise SpecError(f"candidate rho={rho} costs {cand.cost}, S0 costs {support.cost}")
        out[rho] = cand
    return out


def _cost_matched(ranked: list[int], geo: Geometry, freed: int, rho: float) -> list[int]:
    """Highest-ranked unselected groups whose costs sum to exactly ``freed`` (greedy, then exact
    DP)."""
    costs = geo.costs.tolist()
    picked, left = [], freed
    for g in ranked:
        if costs[g] <= left:
            picked.append(g)
            left -= costs[g]
            if left == 0:
                return picked
    # greedy could not fill exactly: subset-sum over the top candidates, preferring better ranks
    pool = ranked[:256]
    reach: dict[int, list[int]] = {0: []}
    for g in pool:
        for total, items in list(reach.items()):
            s = total + costs[g]
            if s <= freed and s not in reach:
                reach[s] = items + [g]
        if freed in reach:
            return reach[freed]
    raise SpecError(
        f"DIR-R candidate rho={rho}: no set of unselected groups costs exactly {freed} "
        "(heterogeneous geometry); choose other actions or an equal-cost geometry"
    )


# ---- one DIR-R run (Algorithm 1) -----------------------------------------------------------------
def _snapshot(geometry: Geometry) -> dict[str, torch.Tensor]:
    return {t.name: t.param.detach().clone() for t in geometry.tensors}


def _load(geometry: Geometry, snap: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for t in geometry.tensors:
            t.param.copy_(snap[t.name])


def _train(trainer, columns: bool, until: int, desc: str, *, after=None, checkpoint=True):
    """Run ``trainer`` (column gradients as ``columns``) to step ``until``; then ``after()`` (the
    probe's evaluation: before the checkpoint, which captures the RNG), the checkpoint if asked,
    and release (its column hooks off the model, the geometry frozen). Returns (checkpoint or None,
    what ``after`` returned). Called with a trainer nothing else refers to, so its leaves and
    moments are freed on return, before the next is built: one trainer's support state on the
    device at a time, as plan-memory counts a DIR-R run."""
    use_column_grads(trainer, columns).run(until=until, desc=desc)
    value = after() if after is not None else None
    ckpt = trainer.checkpoint() if checkpoint else None
    trainer.leaves.release()
    return ckpt, value


# Algorithm 1 from theta_0: commit to t; probe (independent restorations of C_t for rho = 0 and
# rho_p, d steps each); continuations (rho = 0 always, the others after a trigger or post hoc,
# flagged). It leaves the chosen branch's terminal weights in ``model``: the caller evaluates it,
# exactly as for a static run.
def run_dirr(
    spec,
    *,
    bench,
    model,
    roles,
    geometry,
    scores,
    support,
    objective,
    data,
    config,
    decision: dict | None,
    progress: bool = True,
    complete: bool = False,
) -> tuple[DirrResult, Compute, Support]:
    """Algorithm 1 from theta_0 (comment above): DIR-R's result, compute, chosen branch support."""
    selection, actions, calibration, tau = _decision_settings(spec, decision)
    wall: dict[str, float] = {}
    cands = _probe_candidates(spec, scores, support, actions)
    T, t, d = spec.T, spec.t, spec.d
    crit = "eval" if selection == "evaluation" else "dev"

    def value(which: str) -> float:
        return bench.evaluate(model, roles, which).J

    t0 = time.perf_counter()
    columns = bool(spec.hp("column_grads"))

    def train(start, sup, until: int, desc: str, **kw):
        """``_train`` a trainer built from theta_0 (``start`` None) or restored from ``start``."""
        if start is None:
            tr = SupportTrainer(model, geometry, sup, objective, data, config, progress=progress)
        else:
            tr = SupportTrainer.restore(
                model, geometry, start, objective, data, config, support=sup, progress=progress
            )
        return _train(tr, columns, until, desc, **kw)  # our ``tr`` goes with this frame

    ckpt, _ = train(None, support, t, f"DIR-R commit to t={t}")
    wall["train"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    probe, branch = {}, {}
    for rho in (0.0, spec.rho_p):
        branch[rho], probe[rho] = train(
            ckpt, cands[rho], t + d, f"probe rho={rho}", after=lambda: value("dev")
        )
    s_t = max(0.0, probe[spec.rho_p] - probe[0.0])
    triggered = True if calibration else bool(s_t > tau)
    wall["probe"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    run_all = triggered or complete
    terminal, V, J_eval = {}, {}, {}
    for rho in actions:
        if rho not in (0.0,) and not run_all:
            continue
        start, sup = (branch[rho], None) if rho in branch else (ckpt, cands[rho])  # None: its own
        train(start, sup, T, f"continue rho={rho}", checkpoint=False)
        terminal[rho] = _snapshot(geometry)
        V[rho] = value(crit)
        J_eval[rho] = V[rho] if crit == "eval" else value("eval")
    wall["branches"] = time.perf_counter() - t0
    decided = actions if triggered else (0.0,)
    chosen = max(decided, key=lambda r: (V[r], -r))  # argmax, ties toward smaller rho
    _load(geometry, terminal[chosen])

    compute = _compute(T, t, d, actions, triggered, complete, wall)
    result = DirrResult(
        decision_hash=decision["hash"] if decision else None,
        unfrozen=decision is None and not calibration,
        tau=tau,
        probe_signal=s_t,
        probe_values={str(k): v for k, v in probe.items()},
        triggered=triggered,
        chosen_rho=chosen,
        selection=selection,
        candidates={str(k): v for k, v in V.items()},
        candidates_J={str(k): v for k, v in J_eval.items()},
        rho0_J=J_eval[0.0],
        post_hoc=bool(complete and not triggered),
        complete=set(V) == set(actions),
        calibration=calibration,
        candidate_groups={
            str(k): len(set(c.groups) ^ set(support.groups)) // 2 for k, c in cands.items()
        },
    )
    return result, compute, cands[chosen]


def _decision_settings(spec, decision: dict | None) -> tuple[str, tuple, bool, float | None]:
    """What the run decides with, checked against ``spec``: the records V_t reads (selection), the
    action set A, whether it is a calibration run, and tau (the frozen decision's; none for a
    calibration run, which runs every candidate; else the unfrozen ``tau`` setting)."""
    selection = decision["selection"] if decision else spec.hp("selection")
    if selection not in SELECTIONS:
        raise SpecError(f"selection must be one of {SELECTIONS}, got {selection!r}")
    actions = tuple(decision["actions"]) if decision else ACTIONS
    if spec.rho_p not in actions or spec.rho_p == 0:
        raise SpecError(f"probe action rho_p={spec.rho_p} must be a non-zero member of A={actions}")
    calibration = spec.split == "calibration"
    if decision is not None:
        check_decision_matches(spec, decision)
        tau = float(decision["tau"])
    elif calibration:
        tau = None  # calibration evaluates every candidate: gamma_i needs them all
    else:
        tau = spec.hp("tau")
        if tau is None:
            raise SpecError("an unfrozen DIR-R run needs --set tau=VALUE")
    return selection, actions, calibration, tau


def _probe_candidates(spec, scores, support, actions: tuple) -> dict[float, Support]:
    """The candidate supports (Eq. 12), refused when the probe action swaps no group."""
    cands = candidate_supports(scores, support, actions)
    if cands[spec.rho_p] is support:
        raise SpecError(
            f"probe action rho_p={spec.rho_p} swaps floor({spec.rho_p} x {len(support)}) = 0 "
            "groups: the probe would compare S0 with itself and never trigger. "
            "Use a larger rho_p or budget"
        )
    return cands


def _compute(
    T: int, t: int, d: int, actions: tuple, triggered: bool, complete: bool, wall: dict
) -> Compute:
    """The run's compute: the steps of every path it trained (and those a post-hoc completion
    added), against the exhaustive reference."""
    paths = dirr_path_steps(T, t, d, len(actions), triggered)
    compute = Compute(
        step_equivalents=float(sum(paths.values())),
        wall_s=wall,
        normalized=sum(paths.values()) / T,
        paths=paths,
        exhaustive_reference=exhaustive_reference(T, len(actions)),
    )
    if complete and not triggered:
        compute.post_hoc_steps = (T - t - d) + (len(actions) - 2) * (T - t)
    return compute
