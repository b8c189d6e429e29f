"""One Static-IV cell and one DIR-R cell end to end on an 8B-shaped model, on a GPU (skips without
CUDA).

The model is Llama 3 8B's architecture with random bf16 weights and a byte-level BPE tokenizer
trained on the generated TOFU data, saved as a local model folder (safetensors) and run exactly as a
real checkpoint is: ``model=<folder>``, ``benchmark.theta0=given`` (the folder is theta_0), bf16
weights with an fp32 support, through ``Runner`` on generated TOFU-format data (forget10). T and t
are shortened (``--T``, ``--t``, ``--d``).

Reported per phase (wall time, and peak GPU memory from ``torch.cuda.max_memory_allocated``, reset
at the phase's start; an outer phase's peak includes its inner phases'):
  theta_0 load        the folder read, moved to the GPU, its CPU snapshot and content hash (first
                      run); the reset to theta_0 (later runs)
  reference NLLs      theta_0's answer NLLs (NPO's reference, the evaluation's baseline)
  diagnostics         Intervention Score's fused pass (u0 and the four role gradients)
  training            the support-constrained NPO steps (Static-IV), or Algorithm 1 as a whole
                      (DIR-R: train to t, probe, candidates to T, development evaluations)
  evaluation          the final evaluation (forget, retain, protected splits); with
                      ``relearn_steps``, the relearning attack inside it (also its own phase)
  enforcement count   the scalars changed inside and outside the support, against theta_0
  curve points        with ``eval_every`` (static cell only), the curve's points inside training
and the projected GPU-hours of ``sweep --dry-run paper`` from the measured step time, diagnostics
pass and evaluation, each without the curve points and the attack
(``harness.compute.sweep_estimate``: step-equivalents x step time + cells x diagnostics + runs x
evaluation). ``--arch tiny --device cpu --budget 0.5 --rho-p 0.1`` is a dry run
of the script on a small Llama (its support must be large enough for the probe to swap a group).
"""

import argparse
import gc
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import torch  # noqa: E402
from _common import gpu_peak, reset_gpu_peak  # noqa: E402

GIB = 2**30
CURVE, ATTACK = "curve points", "relearning attack (every parameter)"  # phases nested in others


class Phases:
    """Wall time and peak GPU memory per named phase; phases may nest (an outer peak includes the
    inner)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.stack: list[list] = []  # [name, t0, running peak]
        self.seconds = defaultdict(float)
        self.peak = defaultdict(float)
        self.calls = defaultdict(int)

    def wrap(self, name: str, fn):
        def wrapped(*a, **k):
            if self.stack:  # the running phase keeps what it reached so far
                self.stack[-1][2] = max(self.stack[-1][2], gpu_peak(self.cuda))
            reset_gpu_peak(self.cuda)
            self.stack.append([name, time.perf_counter(), 0.0])
            try:
                return fn(*a, **k)
            finally:
                pk = max(gpu_peak(self.cuda), self.stack[-1][2])
                n, t0, _ = self.stack.pop()
                self.seconds[n] += time.perf_counter() - t0
                self.peak[n] = max(self.peak[n], pk)
                self.calls[n] += 1
                if self.stack:
                    self.stack[-1][2] = max(self.stack[-1][2], pk)

        return wrapped


def make_model_dir(arch: str, out: Path, texts: list[str], dev) -> Path:
    from transformers import AutoModelForCausalLM

    from supportbench.unlearning.memory import arch_config
    from supportbench.unlearning.models import save_model, train_tokenizer

    tok = train_tokenizer(texts, vocab_size=4096)
    if arch == "tiny":
        import transformers

        cfg = transformers.LlamaConfig(
            vocab_size=4096,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    else:
        cfg = arch_config(arch)
    cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id = (
        tok.pad_token_id,
        tok.bos_token_id,
        tok.eos_token_id,
    )
    torch.manual_seed(0)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    save_model(model, tok, out)
    del model
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--arch", default="llama3-8b", help="llama3-8b (default) or tiny (a CPU dry run)"
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--T", type=int, default=8)
    ap.add_argument("--t", type=int, default=6)
    ap.add_argument("--d", type=int, default=1)
    ap.add_argument("--budget", type=float, default=6e6)
    ap.add_argument(
        "--rho-p",
        dest="rho_p",
        type=float,
        default=0.01,
        help="the DIR-R probe action (the paper's)",
    )
    ap.add_argument(
        "--work", default=None, help="folder for the model, cache and results (default: a temp dir)"
    )
    ap.add_argument("--json", default=None, help="also write the measurements here")
    ap.add_argument(
        "--hp",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="more run settings for both cells (e.g. column_grads=true "
        "activation_checkpointing=true; values as JSON, as run --set reads them)",
    )
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print(
            "no CUDA device: bench/gpu_cell.py measures nothing here "
            "(--arch tiny --device cpu --budget 0.5 --rho-p 0.1: a dry run)"
        )
        print("RESULT name=gpu_cell_runs_ok value=nan target=>=2 SKIP")
        return

    import supportbench.harness.runner as runner_module
    from supportbench.benchmarks.base import get_benchmark
    from supportbench.experiments.spec import RunSpec
    from supportbench.harness.compute import sweep_estimate
    from supportbench.harness.dirr import run_dirr
    from supportbench.unlearning import train as TR
    from supportbench.unlearning.relearn import RESURFACING

    work = Path(args.work or tempfile.mkdtemp(prefix="gpu-cell-"))
    cache = work / "cache"
    bench = get_benchmark("tofu", cache_dir=cache, progress=False)
    texts = [r["question"] + " " + r["answer"] for r in bench.rows("full")] + bench.neutral_texts()
    t0 = time.perf_counter()
    model_dir = make_model_dir(args.arch, work / f"{args.arch}-random-bf16", texts, dev)
    made = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in model_dir.glob("*.safetensors")) / GIB
    print(
        f"model folder {model_dir.name}: {size:.2f} GiB of safetensors, written in {made:.0f} s",
        flush=True,
    )

    ph = Phases(dev.type == "cuda")
    runner_module.Runner.theta0 = ph.wrap("theta_0 load", runner_module.Runner.theta0)
    runner_module.record_theta0_nll = ph.wrap("reference NLLs", runner_module.record_theta0_nll)
    runner_module.reference_nll = ph.wrap("reference NLLs", runner_module.reference_nll)
    runner_module.Runner.diagnostics = ph.wrap("diagnostics", runner_module.Runner.diagnostics)
    runner_module.compute_scores = ph.wrap("scores + selection", runner_module.compute_scores)
    TR.SupportTrainer.run = ph.wrap("training", TR.SupportTrainer.run)
    import supportbench.harness.dirr as dirr

    R_dirr = ph.wrap("DIR-R (Algorithm 1)", run_dirr)
    dirr.run_dirr = R_dirr
    runner_module.Runner._evaluate = ph.wrap("evaluation", runner_module.Runner._evaluate)
    # issue 35: the exact count of changed scalars against theta_0's snapshot, tensor by tensor
    runner_module.Runner._enforce = ph.wrap("enforcement count", runner_module.Runner._enforce)
    # issue 29's additions, in runs that ask for them (--hp eval_every=N relearn_steps=N)
    runner_module.curve_point = ph.wrap(CURVE, runner_module.curve_point)
    runner_module.relearning_attack = ph.wrap(ATTACK, runner_module.relearning_attack)

    runner = runner_module.Runner(
        work / "results", cache_dir=cache, progress=False, device=args.device
    )
    from supportbench.cli import _parse_sets

    hp = {"dtype": "bfloat16", "benchmark.theta0": "given", **_parse_sets(args.hp, "--hp")}
    static = RunSpec(
        "tofu",
        "forget10",
        "npo",
        "intervention_score",
        seed=0,
        T=args.T,
        t=args.t,
        d=args.d,
        rho_p=args.rho_p,
        budget=args.budget,
        model=str(model_dir),
        hyperparameters=hp,
    )
    # a curve is a static run's (DIR-R trains several branches after its checkpoint: refused)
    curve = ("eval_every", "curve_items", "curve_metrics")
    dirr_hp = {k: v for k, v in hp.items() if k not in curve}
    # tau below 0 always triggers: the DIR-R cell measures the whole path (probe and every branch)
    specs = {
        "static": static,
        "dirr": static.replace(variant="dirr", hyperparameters={**dirr_hp, "tau": -1.0}),
    }
    runner.plan(
        specs.values()
    )  # one fused diagnostics pass per cell, as a sweep announces its runs
    out = {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev),
        "torch": torch.__version__,
        "arch": args.arch,
        "T": args.T,
        "t": args.t,
        "d": args.d,
        "hyperparameters": hp,
        "runs": {},
    }
    ok = 0
    for name, spec in specs.items():
        before = {k: (ph.seconds[k], ph.calls[k]) for k in list(ph.seconds)}
        t0 = time.perf_counter()
        rec = runner.run(spec).record
        wall = time.perf_counter() - t0
        ok += rec.status == "ok"
        phases = {
            k: {
                "seconds": round(ph.seconds[k] - before.get(k, (0, 0))[0], 3),
                "peak_gib": round(ph.peak[k] / GIB, 2),
            }
            for k in ph.seconds
            if ph.calls[k] > before.get(k, (0, 0))[1]
        }
        comps = (rec.outcome.components or {}) if rec.outcome else {}
        out["runs"][name] = {
            "status": rec.status,
            "error": rec.error,
            "wall_s": round(wall, 1),
            "record_wall_s": rec.compute.wall_s,
            "phases": phases,
            "support_cost": rec.support.cost if rec.support else None,
            "J": rec.outcome.J if rec.outcome else None,
            "dirr": None
            if rec.dirr is None
            else {"triggered": rec.dirr.triggered, "chosen_rho": rec.dirr.chosen_rho},
            "step_equivalents": rec.compute.step_equivalents,
            "device": rec.provenance.device,
            "enforcement": {
                k: comps.get(k) if rec.outcome else None
                for k in ("changed_inside", "changed_outside", "allowed_scalars", "tensors_checked")
            },
            "curve_steps": [p.step for p in (rec.outcome.curve or [])] if rec.outcome else None,
            "relearning": {k: comps[k] for k in RESURFACING if k in comps},
        }
        print(
            f"\n{name}: {rec.status} in {wall:.1f} s (J={out['runs'][name]['J']})"
            + (f"\n{rec.error}" if rec.error else ""),
            flush=True,
        )
        print("| phase | seconds | peak GiB |\n|---|---|---|")
        for k, v in phases.items():
            print(f"| {k} | {v['seconds']:.2f} | {v['peak_gib']:.2f} |")
        ph.peak.clear()  # per run: each run's table shows its own peaks

    shares = [
        r["phases"]["enforcement count"]["seconds"] / r["wall_s"]
        for r in out["runs"].values()
        if r["status"] == "ok" and "enforcement count" in r["phases"] and r["wall_s"] > 0
    ]
    for name, r in out["runs"].items():
        print(f"{name}: enforcement {r['enforcement']}")
        if r["curve_steps"]:
            print(f"{name}: curve at steps {r['curve_steps']}")
        if r["relearning"]:
            print(f"{name}: relearning attack {r['relearning']}")
    if shares:
        out["enforcement_share_max"] = max(shares)
        print(
            f"RESULT name=gpu_enforcement_share_of_cell_wall value={max(shares):.4f} "
            f"target=<=0.02 {'PASS' if max(shares) <= 0.02 else 'FAIL'}"
        )
    static = out["runs"]["static"]
    if static["status"] == "ok":
        phases = static["phases"]

        def own(outer: str, inner: str) -> float:  # an outer phase's seconds without its inner's
            return phases[outer]["seconds"] - phases.get(inner, {}).get("seconds", 0.0)

        step_s = own("training", CURVE) / args.T
        diag_s = phases.get("diagnostics", {}).get("seconds", 0.0)
        eval_s = own("evaluation", ATTACK)
        from supportbench.experiments.plan import ExperimentSpec

        est = sweep_estimate(ExperimentSpec.from_toml("paper"))
        cells = sum(
            ph_["cells"] for b in est["benchmarks"].values() for ph_ in b["phases"].values()
        )
        lo = (est["steps_low"] * step_s + cells * diag_s + est["runs"] * eval_s) / 3600
        hi = (est["steps_high"] * step_s + cells * diag_s + est["runs"] * eval_s) / 3600
        out["projection"] = {
            "step_s": step_s,
            "diagnostics_s": diag_s,
            "evaluation_s": eval_s,
            "runs": est["runs"],
            "cells": cells,
            "steps_low": est["steps_low"],
            "steps_high": est["steps_high"],
            "gpu_hours_low": lo,
            "gpu_hours_high": hi,
            "training_hours_low": est["steps_low"] * step_s / 3600,
            "training_hours_high": est["steps_high"] * step_s / 3600,
        }
        print(
            f"\nsweep --dry-run paper: {est['runs']} runs, {cells} cells, "
            f"{est['steps_low']:,.0f}-{est['steps_high']:,.0f} step-equivalents; at "
            f"{step_s:.3f} s/step, {diag_s:.1f} s per diagnostics pass and {eval_s:.1f} "
            f"s per evaluation: {lo:,.1f}-{hi:,.1f} GPU-hours (training alone "
            f"{out['projection']['training_hours_low']:,.1f}"
            f"-{out['projection']['training_hours_high']:,.1f}); the evaluation here is "
            "mini TOFU's, the real splits are larger"
        )
        # the count is one pass over the weights (host -> device), a fixed cost per run: its share
        # of a run of the paper's mean length (step-equivalents per run at this step time)
        enf_s = static["phases"].get("enforcement count", {}).get("seconds")
        if enf_s is not None:
            mean_steps = (est["steps_low"] + est["steps_high"]) / 2 / est["runs"]
            share = enf_s / (enf_s + mean_steps * step_s + eval_s)
            out["projection"]["enforcement_share_paper_run"] = share
            print(
                f"enforcement count {enf_s:.2f} s per run; a run of the paper's mean length "
                f"({mean_steps:.0f} step-equivalents at {step_s:.3f} s): {share:.2%} of its wall"
            )
            print(
                f"RESULT name=gpu_enforcement_share_paper_run value={share:.4f} target=<=0.02 "
                f"{'PASS' if share <= 0.02 else 'FAIL'}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    ok_line = f"RESULT name=gpu_cell_runs_ok value={ok} target=>=2 {'PASS' if ok >= 2 else 'FAIL'}"
    print(ok_line)


if __name__ == "__main__":
    main()
