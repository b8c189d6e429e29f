"""What a curve costs (issue 35): a static cell run three times in one process, without a curve,
with ``eval_every`` = T/10 (J's components on the fixed evaluation slice, ``curve_items`` records
per part) and with ``curve_metrics`` too (the benchmark's whole evaluation of the slice at each
point: TOFU's truth ratios, forget quality and ROUGE, LACUNA's EM/ES, ROUGE and precision), on
theta_0 from the cache. Prints each curve's evaluations (the curved run's own
``compute.wall_s["curve"]``) over the wall of a run without a curve that reuses its cell's
diagnostics, as most runs of a sweep do (the sum of its phases); checks that the terminal J is
the same to the bit (a curve only reads the model). Target: share <= 15 % for each. A curve of
K = T/10 has ten points whatever T is, so its share falls as T grows; the run prints the T from
which each would meet the target on this box.

``python bench/curves.py [--benchmark tofu] [--T 40]`` (``controlled``: its LoRA intervention,
whose trainer takes the curve's step callback through ``intervene``); theta_0 comes from
$SUPPORTBENCH_CACHE or the user cache (built on first use).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import one_thread, result  # noqa: E402

TARGET = 0.15


def main() -> None:
    one_thread()
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--benchmark", default="tofu")
    ap.add_argument("--T", type=int, default=40)
    args = ap.parse_args()
    from supportbench.benchmarks.base import BENCHMARKS
    from supportbench.experiments.spec import RunSpec
    from supportbench.harness.runner import Runner

    runner = Runner(
        tempfile.mkdtemp(prefix="bench-curves-"),
        cache_dir=os.environ.get("SUPPORTBENCH_CACHE"),
        progress=False,
    )
    cls = BENCHMARKS.get(args.benchmark)
    field = cls.DEFAULT_FIELD
    # a selection method's run, or the benchmark's own intervention (the controlled separation)
    method = cls.INTERFACES[-1] if cls.INTERFACES else "intervention_score"

    def spec(seed: int, every: int, metrics: bool = False) -> RunSpec:
        hp = {"eval_every": every, **({"curve_metrics": True} if metrics else {})}
        return RunSpec(
            args.benchmark,
            field,
            "npo",
            method,
            seed=seed,
            T=args.T,
            hyperparameters=hp,
        )

    every = max(1, args.T // 10)
    # theta_0, and the retain model TOFU's forget quality needs, loaded before any timed run
    runner.run(spec(1, every, metrics=True))
    # the run a curve is added to, as most runs of a sweep are: its cell's diagnostics (per field
    # and seed, shared by every method and objective) already computed, here by the run above
    reusing = runner.run(spec(1, 0)).record
    recs = {}
    for name, ev, metrics in (
        ("plain", 0, False),
        ("curve", every, False),
        ("metrics", every, True),
    ):
        recs[name] = runner.run(spec(0, ev, metrics)).record
        assert recs[name].status == "ok", recs[name].error

    def total(r) -> float:
        return sum(v for v in r.compute.wall_s.values() if isinstance(v, int | float))

    # a curve's added cost relative to the run without one that reuses its cell's diagnostics
    # (the stricter denominator; the share against seed 0's plain run, which computed its own, is
    # printed beside it)
    base = total(reusing)
    own = total(recs["plain"])
    step_s = reusing.compute.wall_s["train"] / args.T
    print(
        f"{args.benchmark}, T = {args.T}, eval_every = {every}: the run without a curve "
        f"{base:.3f} s (its phases, diagnostics reused; {own:.3f} s computing its own), a "
        f"training step {step_s * 1e3:.1f} ms"
    )
    for name in ("curve", "metrics"):
        rec = recs[name]
        curve_s = rec.compute.wall_s["curve"]
        share = curve_s / base
        same = recs["plain"].outcome.J == rec.outcome.J
        # the share at T' is curve_s / (base - train + T' * step): where it reaches 15 %
        need = (curve_s / TARGET - (base - reusing.compute.wall_s["train"])) / step_s
        n = len(rec.outcome.curve)
        print(
            f"  {name}: {n} points, {curve_s:.3f} s ({curve_s / n * 1e3:.1f} ms a point = "
            f"{curve_s / n / step_s:.1f} training steps, the slice's theta_0 NLLs included); "
            f"share {share:.3f} ({curve_s / own:.3f} of the run computing its diagnostics); "
            f"meets 15 % from T ~ {max(args.T, int(need))}; terminal J the same: {same}"
        )
        tag = "curve" if name == "curve" else "curve_metrics"
        result(f"{tag}_cost_over_run_wall", share, "<=", TARGET)
        result(f"{tag}_terminal_J_unchanged", float(same), ">=", 1.0)


if __name__ == "__main__":
    main()
