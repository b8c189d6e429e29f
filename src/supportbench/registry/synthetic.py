"""Synthetic run records built through ``RunRecord`` (for tests and benches, never for results)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from supportbench._io import write_text_atomic
from supportbench.experiments.record import (
    Compute,
    DirrResult,
    Outcome,
    Provenance,
    RunRecord,
    SupportInfo,
)
from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec, spec_key

ACTIONS = ("0.0", "0.01", "0.025", "0.05", "0.1")


def record(
    *,
    experiment="synthetic",
    benchmark="natural_tofu",
    field="forget10",
    objective="npo",
    method="intervention_score",
    variant="static",
    seed=0,
    split="final",
    J=0.0,
    status="ok",
    candidates: dict | None = None,
    triggered=None,
    probe_signal=0.0,
    decision_hash=None,
    started_at="2026-01-01T00:00:00+00:00",
    T=200,
    t=160,
    d=20,
    extra_key: str = "",
    components: dict | None = None,
    groups=(1, 5, 9),
    hyperparameters: dict | None = None,
    tau: float = 0.02,
    build: int = 0,
    selection: str = "evaluation",
    model_hash: str = "m",
) -> dict:
    tag = {"benchmark.tag": extra_key} if extra_key else {}  # a benchmark's: unchecked at ingest
    hp = {"lr": 0.01, **tag, **(hyperparameters or {})}
    spec = RunSpec(
        benchmark,
        field,
        objective,
        method,
        seed=seed,
        variant=variant,
        split=split,
        experiment=experiment,
        budget=0.1,
        T=T,
        t=t if variant == "dirr" else None,
        d=d if variant == "dirr" else None,
        rho_p=0.01 if variant == "dirr" else None,
        model="tiny-llama",
        hyperparameters=hp,
        build=build,
    ).canonical()
    ok = status == "ok"
    dirr = None
    if variant == "dirr":
        cands = candidates or {"0.0": J}
        chosen = max(cands, key=lambda r: (cands[r], -float(r)))
        dirr = DirrResult(
            decision_hash=decision_hash,
            unfrozen=decision_hash is None,
            tau=tau,
            probe_signal=probe_signal,
            probe_values={},
            triggered=bool(triggered),
            chosen_rho=float(chosen),
            selection=selection,
            candidates=cands,
            candidates_J=cands,
            rho0_J=cands["0.0"],
            post_hoc=False,
            complete=len(cands) == len(ACTIONS),
            calibration=split == "calibration",
        )
    rec = RunRecord(
        run_key=spec_key(spec),
        spec=spec,
        status=status,
        error=None if ok else "RuntimeError: synthetic failure",
        outcome=Outcome(J=J, G_F=J + 0.5, D_coll=0.5, components=components or {"forget_prob": 0.1})
        if ok
        else None,
        support=SupportInfo(len(groups), 10 * len(groups), 10 * len(groups), list(groups))
        if ok
        else None,
        dirr=dirr,
        compute=Compute(step_equivalents=float(T), wall_s={"train": 1.0}),
        provenance=Provenance(
            supportbench="0.1.0",
            git="synthetic",
            torch="-",
            transformers="-",
            data_hash="d",
            model_hash=model_hash,
            started_at=started_at,
            finished_at=started_at,
        ),
    )
    return rec.to_dict()


def write(results_dir: str | Path, rec: dict) -> Path:
    """Write ``rec`` as it is (tests write invalid records on purpose) where the results directory
    keeps it."""
    return write_text_atomic(ResultsDir(results_dir).record(rec["run_key"]), json.dumps(rec))


def grid(n: int, seed: int = 0, experiment: str = "synthetic") -> list[dict]:
    """``n`` records over methods x fields x objectives x seeds with random J (complete grid when n
    allows)."""
    rng = random.Random(seed)
    methods = [
        "intervention_score",
        "random",
        "activation",
        "wagle",
        "storage",
        "memflex",
        "fila",
        "ap_mlp",
        "grail",
        "activation_down",
        "projected_causal",
    ]
    fields = ["Email_Address", "Phone_Number", "Birth_City", "Drivers_License"]
    out = []
    i = 0
    while len(out) < n:
        m = methods[i % len(methods)]
        f = fields[(i // len(methods)) % len(fields)]
        o = ("npo", "simnpo")[(i // (len(methods) * len(fields))) % 2]
        s = i // (len(methods) * len(fields) * 2)
        out.append(
            record(
                experiment=experiment,
                benchmark="lacuna",
                field=f,
                objective=o,
                method=m,
                seed=s,
                J=rng.gauss(1.0, 0.5),
            )
        )
        i += 1
    return out
