"""Measured wall-clock of DIR-R's non-trigger and trigger paths relative to Static-IV, next to the
step-equivalent model (paper: 1.10x and 1.80x with t = 0.8T, d = 0.1T, |A| = 5).

All three runs use the same mini TOFU cell and the same prepared theta_0, in one process; the wall
time counted is training + probes + branches + evaluation (selection and preparation are shared by
all variants and excluded). Target: each measured ratio within 15% of the model. OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import one_thread, result  # noqa: E402

one_thread()

from supportbench.experiments.paths import cache_root  # noqa: E402
from supportbench.experiments.spec import RunSpec  # noqa: E402
from supportbench.harness.compute import dirr_step_equivalents  # noqa: E402
from supportbench.harness.runner import Runner  # noqa: E402

T, t, d = 100, 80, 10
REPEATS = 3


def wall(rec) -> float:
    w = rec.compute.wall_s
    return sum(v for k, v in w.items() if k not in ("prepare", "select"))


def main() -> None:
    cache = cache_root()  # the user's cache: theta_0 built once, shared with the demo
    with tempfile.TemporaryDirectory() as res:
        runner = Runner(res, cache_dir=cache, progress=False, force=True)
        base = dict(
            benchmark="natural_tofu",
            field="forget10",
            objective="npo",
            method="intervention_score",
            T=T,
            t=t,
            d=d,
            rho_p=0.05,
            budget=0.1,
        )
        specs = {
            "static": RunSpec(**base),
            "non-trigger": RunSpec(**base, variant="dirr", hyperparameters={"tau": 1e9}),
            "trigger": RunSpec(**base, variant="dirr", hyperparameters={"tau": -1.0}),
        }
        runner.run(specs["static"])  # warm-up: prepare theta_0, diagnostics, allocator
        times = {k: [] for k in specs}
        for _ in range(REPEATS):
            for k, s in specs.items():
                times[k].append(wall(runner.run(s).record))
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    model = {
        k: dirr_step_equivalents(T, t, d, 5, k == "trigger") for k in ("non-trigger", "trigger")
    }
    print(f"T={T} t={t} d={d} |A|=5, natural_tofu/forget10/npo, tiny-llama, median of {REPEATS}")
    print(f"static-IV          {med['static']:.3f} s   (model 1.00x)")
    for k in ("non-trigger", "trigger"):
        print(
            f"DIR-R {k:<12} {med[k]:.3f} s   measured "
            f"{med[k] / med['static']:.3f}x   model {model[k]:.2f}x"
        )
    for k in ("non-trigger", "trigger"):
        ratio = (med[k] / med["static"]) / model[k]
        result(f"dirr_{k.replace('-', '_')}_wall_vs_model", ratio, "<=", 1.15)
        result(f"dirr_{k.replace('-', '_')}_wall_vs_model_low", ratio, ">=", 0.85)


if __name__ == "__main__":
    main()
