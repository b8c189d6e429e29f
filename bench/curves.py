"""What a curve costs (issue 35): a static cell run twice in one process, without a curve and with
``eval_every`` = T/10 (J's components on the fixed evaluation slice, ``curve_items`` records per
part), on theta_0 from the cache. Prints the curve's evaluations (the curved run's own
``compute.wall_s["curve"]``) over the wall of the same run without a curve (the sum of its
phases); checks that the terminal J is the same to the bit (the curve only reads the
model). Target: share <= 15 %.

``python bench/curves.py [--benchmark tofu] [--T 40]``; theta_0 comes from $SUPPORTBENCH_CACHE or
the user cache (built on first use).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
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
    field = BENCHMARKS.get(args.benchmark).DEFAULT_FIELD

    def spec(seed: int, every: int) -> RunSpec:
        return RunSpec(
            args.benchmark,
            field,
            "npo",
            "intervention_score",
            seed=seed,
            T=args.T,
            hyperparameters={"eval_every": every},
        )

    runner.run(spec(1, 0))  # theta_0 loaded and warm before either timed run
    recs, walls = {}, {}
    for name, every in (("plain", 0), ("curve", max(1, args.T // 10))):
        spec_ = spec(0, every)
        t0 = time.perf_counter()
        recs[name] = runner.run(spec_).record
        walls[name] = time.perf_counter() - t0
        assert recs[name].status == "ok", recs[name].error
    rec = recs["curve"]
    curve_s = rec.compute.wall_s["curve"]

    def total(r) -> float:
        return sum(v for v in r.compute.wall_s.values() if isinstance(v, int | float))

    # the plain run is the run a curve is added to (it paid its own diagnostics; the curved run,
    # of the same cell, reused them): the curve's added cost relative to it
    share = curve_s / total(recs["plain"])
    same = recs["plain"].outcome.J == rec.outcome.J
    print(
        f"{args.benchmark}, T = {args.T}, eval_every = {max(1, args.T // 10)}: "
        f"{len(rec.outcome.curve)} points, {curve_s:.3f} s of evaluations; the run without a "
        f"curve {total(recs['plain']):.3f} s (its phases; {walls['plain']:.2f} s end to end), "
        f"with one {total(rec):.3f} s (diagnostics reused); terminal J the same: {same}"
    )
    result("curve_cost_over_run_wall", share, "<=", TARGET)
    result("curve_terminal_J_unchanged", float(same), ">=", 1.0)


if __name__ == "__main__":
    main()
