"""The controlled separation's validity gates on the demo's construction (issue 21: facts learned,
interfaces balanced, storage localizable, groups isolated), measured from one cold build of theta_0
(tiny-qwen2, 36 final + 12 calibration targets; about 2.5 minutes) and nothing else: construction
data only, no unlearning run.

Prints each interface's median theta_0 recall (answer probability on the evaluation phrasings) and
how many of its 18 final targets reach 0.5; every locator's AUROC on the calibration targets (which
choose the primary) and on the 36 final targets; and, per target, whether removing its own interface
(LoRA B = 0, or the block's write through W, W[:, I_B] = 0) raises its evaluation NLL more than
removing the other.

RESULT lines (targets = the gates of ``experiments.controlled_decision.construction_gates`` and the
isolation test's): backbone_median_recall and lora_median_recall >= 0.5; recall_gap <= 0.1;
primary_locator_auroc (on all 36 final targets) >= 0.9; isolation_share >= 0.9."""

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import one_thread, result  # noqa: E402


def main():
    one_thread()
    import torch

    from supportbench.benchmarks.controlled import interfaces as itf_mod
    from supportbench.benchmarks.controlled.adapter import Controlled
    from supportbench.experiments.controlled_decision import auroc, choose_primary
    from supportbench.unlearning.data import dataset_nll, tokenize_pairs

    with tempfile.TemporaryDirectory() as d:
        c = Controlled(cache_dir=d, progress=False)
        t0 = time.perf_counter()
        prepared = c.prepare("tiny-qwen2")
        print(f"cold build: {time.perf_counter() - t0:.0f} s; theta_0 {prepared.model_hash[:12]}")
    model, tok = prepared.model, prepared.tokenizer

    medians = {}
    for w in itf_mod.INTERFACES:
        v = [c.recall[k] for k, t in c.targets.items() if t["interface"] == w]
        medians[w] = statistics.median(v)
        print(
            f"{w:>8}: median recall {medians[w]:.3f}, learned {sum(x >= 0.5 for x in v)}/{len(v)} "
            f"(min {min(v):.3f})"
        )
    cal = c.calibration_aurocs()
    primary = choose_primary(cal)
    y = [int(t["interface"] == "backbone") for t in c.targets.values()]
    final = {n: auroc([s[k] for k in c.targets], y) for n, s in sorted(c.locator_scores.items())}
    print(f"{'locator':<26} calibration AUROC  final AUROC (36)")
    for n in sorted(final):
        print(f"{n:<26} {cal[n]:>17.3f}  {final[n]:>16.3f}{'  <- primary' if n == primary else ''}")

    def eval_nll():
        out = {}
        for k, t in c.targets.items():
            s, n = dataset_nll(
                model, tokenize_pairs(tok, t["eval"], [t["attribute"]] * len(t["eval"]))
            )
            out[k] = float((s / n).mean())
        return out

    state = {k: v.clone() for k, v in model.state_dict().items()}
    base = eval_nll()
    with torch.no_grad():
        itf_mod._base_weight(model, c.itf)[:, list(c.itf.columns)] = 0
    no_block = eval_nll()
    model.load_state_dict(state)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.zero_()
    no_lora = eval_nll()
    model.load_state_dict(state)
    held = {w: 0 for w in itf_mod.INTERFACES}
    for k, t in c.targets.items():
        own, other = (no_block, no_lora) if t["interface"] == "backbone" else (no_lora, no_block)
        held[t["interface"]] += own[k] - base[k] > other[k] - base[k]
    print(
        "own interface's removal hurts more: backbone "
        f"{held['backbone']}/18, lora {held['lora']}/18"
    )

    result("backbone_median_recall", medians["backbone"], ">=", 0.5)
    result("lora_median_recall", medians["lora"], ">=", 0.5)
    result("recall_gap", abs(medians["lora"] - medians["backbone"]), "<=", 0.1)
    result("primary_locator_auroc", final[primary], ">=", 0.9)
    result("isolation_share", sum(held.values()) / len(c.targets), ">=", 0.9)


if __name__ == "__main__":
    main()
