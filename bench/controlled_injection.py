"""The controlled separation's injection ceiling (issue: "equal injection strength"): can both interfaces be
trained to the same theta_0 recall? One cold build of the demo's construction (tiny-qwen2, 36 + 12 targets),
then the joint injection rerun from the same pre-injection model over a grid of the knobs that set injection
strength: epochs, the backbone block's learning-rate multiple, the base learning rate, the background replay.
Prints each interface's median recall (answer probability on the evaluation phrasings, and on the training
phrasings) and how many of its 18 final targets reach 0.5.

RESULT backbone_median_recall_ceiling: the best backbone median over the grid (target >= 0.5, the recall
threshold of a learned target). RESULT recall_gap_at_best: the LoRA - backbone median gap at that setting
(target <= 0.1, the "interfaces balanced" gate). Minutes; construction data only (no unlearning run)."""

import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import one_thread, result  # noqa: E402

GRID = [  # (epochs, backbone lr multiple, lr, replay)
    (100, 10.0, 1e-2, True),    # the construction's own setting
    (300, 10.0, 1e-2, True), (100, 30.0, 1e-2, True), (100, 3.0, 3e-2, True), (100, 10.0, 1e-1, True),
    (100, 10.0, 1e-2, False),
]


def main():
    one_thread()
    import torch

    from supportbench.benchmarks.controlled import interfaces as itf_mod
    from supportbench.benchmarks.controlled.adapter import Controlled
    from supportbench.unlearning.data import dataset_nll, tokenize_pairs

    saved = {}
    inject = itf_mod.inject

    def keep(model, itf, sets, **kw):   # the pre-injection model and the injection's inputs
        saved.update(model=copy.deepcopy(model), itf=itf, sets=sets, kw=kw)
        return inject(model, itf, sets, **kw)

    itf_mod.inject = keep
    with tempfile.TemporaryDirectory() as d:
        c = Controlled(cache_dir=d, progress=False)
        t0 = time.perf_counter()
        tok = c.prepare("tiny-qwen2").tokenizer
        print(f"cold build: {time.perf_counter() - t0:.0f} s")
    itf_mod.inject = inject

    def recall(model, which):
        by = {"backbone": [], "lora": []}
        for t in c.targets.values():
            s, n = dataset_nll(model, tokenize_pairs(tok, t[which], [t["attribute"]] * len(t[which])))
            by[t["interface"]].append(float(torch.exp(-s / n).mean()))
        return {w: (statistics.median(v), sum(x >= 0.5 for x in v)) for w, v in by.items()}

    best = None
    print(f"{'epochs':>6} {'bb x':>5} {'lr':>6} {'replay':>6} | eval: backbone median (learned)  lora | train: "
          "backbone  lora")
    for epochs, scale, lr, replay in GRID:
        m = copy.deepcopy(saved["model"])
        kw = dict(saved["kw"], epochs=epochs, backbone_lr_scale=scale, lr=lr)
        if not replay:
            kw["replay"] = None
        inject(m, saved["itf"], saved["sets"], **kw)
        ev, tr = recall(m, "eval"), recall(m, "train")
        print(f"{epochs:>6} {scale:>5g} {lr:>6g} {str(replay):>6} | {ev['backbone'][0]:.3f} ({ev['backbone'][1]:>2}/18)"
              f"  {ev['lora'][0]:.3f} ({ev['lora'][1]:>2}/18) | {tr['backbone'][0]:.3f}  {tr['lora'][0]:.3f}",
              flush=True)
        if best is None or ev["backbone"][0] > best[0]:
            best = (ev["backbone"][0], ev["lora"][0] - ev["backbone"][0])
    result("backbone_median_recall_ceiling", best[0], ">=", 0.5)
    result("recall_gap_at_best", best[1], "<=", 0.1)


if __name__ == "__main__":
    main()
