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

``--items 1,2,4,8`` also runs J's-components curve at each ``curve_items`` (records per part of
the slice) and prints its share beside the slice's J at the last step (what the curve shows there;
the full evaluation's terminal J beside it): the cost side of the default of 8.

``python bench/curves.py [--benchmark tofu] [--T 40] [--items 1,2,4,8]`` (``controlled``: its
LoRA intervention, whose trainer takes the curve's step callback through ``intervene``); theta_0
comes from
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
    ap.add_argument("--items", default="", help="curve_items values to compare, e.g. 1,2,4,8")
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

    def spec(seed: int, every: int, metrics: bool = False, items: int | None = None) -> RunSpec:
        hp = {"eval_every": every, **({"curve_metrics": True} if metrics else {})}
        if items is not None:
            hp["curve_items"] = items
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
    own_j = recs["plain"].outcome.J
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
    if args.items:
        print(f"  curve_items trade-off (J's components, K = {every}; terminal J {own_j:+.4f}):")
    for n in [int(x) for x in args.items.split(",") if x.strip()]:
        rec = runner.run(spec(0, every, items=n)).record
        assert rec.status == "ok", rec.error
        curve_s = rec.compute.wall_s["curve"]
        last = rec.outcome.curve[-1].J
        need = (curve_s / TARGET - (base - reusing.compute.wall_s["train"])) / step_s
        print(
            f"    curve_items {n}: share {curve_s / base:.3f}, a point "
            f"{curve_s / len(rec.outcome.curve) / step_s:.2f} training steps, meets 15 % from "
            f"T ~ {max(args.T, int(need))}; the slice's J at the last step {last:+.4f} (the "
            f"full evaluation's terminal J {own_j:+.4f})"
        )
        result(f"curve_cost_over_run_wall_items{n}", curve_s / base, "<=", TARGET)


if __name__ == "__main__":
    main()
