"""Scoring all 11 selection methods from one shared Diagnostics vs each with a fresh Diagnostics.

Shared diagnostics compute each gradient / activation / attribution pass once however many methods
read it. Target: sum(fresh) / shared >= 3. Run with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import one_thread, result  # noqa: E402

one_thread()

from supportbench.harness.data import tokenize_pairs  # noqa: E402
from supportbench.harness.models import build_model, train_tokenizer  # noqa: E402
from supportbench.methods.base import compute_scores, get_method, list_methods  # noqa: E402
from supportbench.methods.diagnostics import DiagnosticRecords, Diagnostics  # noqa: E402

BUILTINS = ["activation", "activation_down", "ap_mlp", "fila", "grail", "intervention_score", "memflex",
            "projected_causal", "random", "storage", "wagle"]


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

    t0 = time.perf_counter()
    shared = Diagnostics(model, rec, "npo", seed=0)
    for m in methods:
        compute_scores(get_method(m), shared)
    t_shared = time.perf_counter() - t0

    per = {}
    for m in methods:
        t0 = time.perf_counter()
        compute_scores(get_method(m), Diagnostics(model, rec, "npo", seed=0))
        per[m] = time.perf_counter() - t0
    t_fresh = sum(per.values())
    for m, t in per.items():
        print(f"  {m:<20} fresh {t:.3f} s")
    print(f"all {len(methods)} methods, one shared Diagnostics: {t_shared:.3f} s")
    print(f"sum of {len(methods)} methods, fresh Diagnostics each: {t_fresh:.3f} s")
    result("scoring_sharing_ratio", t_fresh / t_shared, ">=", 3.0)


if __name__ == "__main__":
    main()
