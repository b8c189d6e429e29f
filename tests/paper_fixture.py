"""A small, fixed registry that exercises every paper table (used by the golden test and the report
CLI test)."""

import random
from pathlib import Path

from supportbench.experiments.decisions import freeze_decision
from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect

BASELINES = [
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
ACTIONS = ["0.0", "0.01", "0.025", "0.05", "0.1"]


def build(root: Path) -> Path:
    rng = random.Random(1234)
    res = root / "res"
    dec = freeze_decision(
        res / "decisions",
        tau=0.02125,
        rho_p=0.01,
        d=20,
        t=160,
        T=200,
        actions=[0.0, 0.01, 0.025, 0.05, 0.1],
        admissible_range=[0.2, 0.8],
        calibration_seeds=[73, 311, 997],
        baselines=["projected_causal", "memflex"],
        benchmark="lacuna",
        objective="graddiff",
        selection="evaluation",
        calibration_runs=[],
        calibration={
            "instances": [],
            "trigger_fraction": 5 / 12,
            "triggered": 5,
            "n": 12,
            "captured_gain": 0.9025,
            "total_gain": 1.8925,
            "extra_compute": 4.7,
            "gain_per_compute": 0.192021,
            "precision": 1.0,
        },
    )

    def write(**kw):
        syn.write(res, syn.record(experiment="paper", started_at="2030-01-01T00:00:00+00:00", **kw))

    def cell(bench, fields, objectives, seeds, split="final"):
        for f in fields:
            for o in objectives:
                for s in seeds:
                    base = round(rng.uniform(0, 2), 6)
                    write(
                        benchmark=bench,
                        field=f,
                        objective=o,
                        method="intervention_score",
                        seed=s,
                        split=split,
                        J=base,
                        groups=tuple(rng.sample(range(40), 5)),
                    )
                    cands = {
                        a: round(base + (rng.uniform(0, 0.3) if a != "0.0" else 0.0), 6)
                        for a in ACTIONS
                    }
                    trig = rng.random() < 0.5
                    best = max(cands.values()) if trig else base
                    write(
                        benchmark=bench,
                        field=f,
                        objective=o,
                        method="intervention_score",
                        variant="dirr",
                        seed=s,
                        split=split,
                        J=best,
                        candidates=cands,
                        triggered=trig,
                        probe_signal=round(rng.random(), 3),
                        decision_hash=dec["hash"]
                        if bench == "lacuna" and o == "graddiff"
                        else None,
                    )
                    for m in BASELINES:
                        write(
                            benchmark=bench,
                            field=f,
                            objective=o,
                            method=m,
                            seed=s,
                            split=split,
                            J=round(base + rng.uniform(-0.5, 0.3), 6),
                        )

    cell("natural_tofu", ["forget10"], ["npo", "simnpo"], [4099, 8191])
    cell("lacuna", ["Email_Address", "Birth_City"], ["npo", "simnpo", "graddiff"], [4099, 8191])
    cell("lacuna", ["Email_Address"], ["graddiff"], [32771, 65537], split="replication")
    for k in range(6):
        backbone_injected = k % 2 == 0
        score = round(
            rng.uniform(-0.5, 0.5) + (0.6 if backbone_injected else -0.6), 6
        )  # one per target
        comps = {
            "storage_score": score,
            "injected_backbone": 1.0 if backbone_injected else 0.0,
            "pair": float(k // 2),
            "nuisance_nll": round(rng.uniform(0, 2), 6),
            "locator:first_order": score,
            "locator:zero_ablation_std": round(rng.uniform(-1, 1), 6),
            "recall": 0.3 if k == 5 else 0.8 + 0.01 * k,
        }  # target5 not learned: excluded; balanced gates
        if k != 5:
            rng.uniform(
                0.5, 1
            )  # the draw the recall once took: the values after it stay as they were
        for m in ("backbone", "lora"):
            write(
                benchmark="controlled",
                field=f"target{k}",
                objective="npo",
                method=m,
                seed=0,
                J=round(rng.uniform(0, 1) + (0.2 if m == "lora" else 0), 6),
                components={**comps, "J_bounded": round(rng.uniform(-0.2, 0.8), 6)},
            )
    db = root / "paper.duckdb"
    ingest(connect(db), res)
    return db
