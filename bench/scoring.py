"""Scoring all 11 selection methods from one shared Diagnostics vs each with a fresh Diagnostics.

The shared Diagnostics prepares the union of the methods' ``requires`` in one fused pass (as the
runner does for a sweep cell), so every record batch goes through the model once. Target: sum(fresh)
/ shared >= 3. Run with OMP_NUM_THREADS=1.

Also printed: the ceiling of that ratio for this workload. The cost of a prepare is, to first order,
(rows with a backward pass) x c_b + (rows forward only) x c_f; ``Diagnostics.plan_rows`` counts the
rows and c_b, c_f are measured here. sum_m cost(requires_m) / cost(union) is the most sharing can
save when every method's own pass is already minimal.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import median_time, one_thread, result  # noqa: E402

one_thread()

from supportbench.methods.base import compute_scores, get_method, list_methods  # noqa: E402
from supportbench.methods.diagnostics import Diagnostics  # noqa: E402
from supportbench.unlearning.data import DiagnosticRecords, tokenize_pairs  # noqa: E402
from supportbench.unlearning.models import build_model, train_tokenizer  # noqa: E402

BUILTINS = [
    "activation",
    "activation_down",
    "ap_mlp",
    "fila",
    "grail",
    "intervention_score",
    "memflex",
    "projected_causal",
    "random",
    "storage",
    "wagle",
]


def main() -> None:
    names = [f"Author{i} Name{i}" for i in range(16)]
    qs = [f"Q: Where did {names[i % 16]} grow up?\nA: " for i in range(96)]
    ans = [f"{names[i % 16]} grew up near the {i}th lighthouse of the north." for i in range(96)]
    tok = train_tokenizer(qs + ans, vocab_size=1024)
    model = build_model("small-llama", tok, seed=0)

    def make(a, b):
        return tokenize_pairs(tok, qs[a:b], ans[a:b], subjects=[names[i % 16] for i in range(a, b)])

    rec = DiagnosticRecords(F=make(0, 32), R=make(32, 64), P=make(64, 80), N=make(80, 96))
    methods = [m for m in list_methods() if m in BUILTINS]
    requires = {m: get_method(m).requires for m in methods}
    union = sorted({k for r in requires.values() for k in r})

    def fresh(m):
        return Diagnostics(model, rec, "npo", seed=0)

    compute_scores(get_method("storage"), fresh("storage"))  # warm-up, untimed

    t0 = time.perf_counter()
    shared = Diagnostics(model, rec, "npo", seed=0)
    shared.prepare(union)
    for m in methods:
        compute_scores(get_method(m), shared)
    t_shared = time.perf_counter() - t0

    per, passes = {}, 0
    for m in methods:
        t0 = time.perf_counter()
        d = fresh(m)
        compute_scores(get_method(m), d)
        per[m] = time.perf_counter() - t0
        passes += d.passes
    t_fresh = sum(per.values())

    # per-row costs of a backward row and a forward-only row, then the ceiling of the ratio
    c_b = median_time(lambda: fresh("").prepare(["grad:F"]), 3) / len(rec.F)
    c_f = median_time(lambda: fresh("").prepare(["activations"]), 3) / len(rec.F)

    def cost(keys):
        r = shared.plan_rows(keys)
        return r["backward_rows"] * c_b + r["forward_only_rows"] * c_f

    ceiling = sum(cost(r) for r in requires.values()) / cost(union)
    no_rl = {m: r for m, r in requires.items() if not any(k.startswith("random_label") for k in r)}
    ceiling_no_rl = sum(cost(r) for r in no_rl.values()) / cost(
        sorted({k for r in no_rl.values() for k in r})
    )

    for m, t in per.items():
        rows = shared.plan_rows(requires[m])
        print(
            f"  {m:<20} fresh {t:.3f} s  ({rows['backward_rows']} backward rows, "
            f"{rows['forward_only_rows']} forward-only rows)"
        )
    u = shared.plan_rows(union)
    print(
        f"union: {u['backward_rows']} backward rows, {u['forward_only_rows']} forward-only rows; "
        f"c_b = {c_b * 1e3:.2f} ms/row, c_f = {c_f * 1e3:.2f} ms/row"
    )
    print(
        f"all {len(methods)} methods, one shared Diagnostics: "
        f"{t_shared:.3f} s ({shared.passes} passes)"
    )
    print(
        f"sum of {len(methods)} methods, fresh Diagnostics each: {t_fresh:.3f} s ({passes} passes)"
    )
    print(
        f"ceiling of the ratio for this workload: {ceiling:.2f} "
        f"({ceiling_no_rl:.2f} for the {len(no_rl)} methods without random-label gradients)"
    )
    result("scoring_sharing_ratio", t_fresh / t_shared, ">=", 3.0)
    # the >= 3 target above exceeds this workload's
    # ceiling; what sharing can be held to is the ceiling
    result("scoring_vs_ceiling", t_fresh / t_shared / ceiling, ">=", 0.9)


if __name__ == "__main__":
    main()
