"""The 7-8B path on a GPU (skips without CUDA): an 8B-shaped Llama (Llama 3 8B's config) built with
random bf16 weights -- no download --, a support of ~6M editable scalars (whole down-projection
columns chosen at random), batch 8 x length 256, NPO (forget + retain batch, cached reference NLLs).

Measured in one process, each phase's peak from ``torch.cuda.max_memory_allocated`` after a reset:
  training-step peak / bytes of the bf16 weights, without and with activation
  checkpointing, with autograd's whole-tensor gradients (the default) and with
  ``column_grads`` (per-column contractions in hooks), and with ``column_grads`` and
  ``chunked_loss`` (the answer tokens' logits a chunk at a time)              (target <= 1.3)
  support-constrained NPO step time / a plain full-parameter bf16 step's on the
  same batch                                                                   (reported)
  each measured peak against ``plan-memory``'s prediction for the same shapes: the training step
  (``plan_memory``) and the diagnostics phase of Intervention Score (``plan_diagnostics``, 8
  records of 256 tokens per role, one forward batch each)                      (target: within 20%)

``--arch tiny --device cpu`` runs the same code on a small Llama on the CPU (memory columns read
nan): a dry run of the script before device time is spent on it.
"""

import argparse
import gc
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import torch  # noqa: E402
from _common import gpu_peak, reset_gpu_peak, result  # noqa: E402

GIB = 2**30


def tiny_config():
    import transformers

    return transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )


class Meter:
    """Wall time and peak allocated memory of one phase (peak reset at its start)."""

    def __init__(self, dev):
        self.cuda = dev.type == "cuda"

    def __enter__(self):
        gc.collect()
        reset_gpu_peak(self.cuda, empty=True)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.peak = gpu_peak(
            self.cuda
        )  # synchronizes first: the phase's queued work is in its time
        self.seconds = time.perf_counter() - self.t0
        return False


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--arch", default="llama3-8b", help="llama3-8b (default) or tiny (a CPU dry run)"
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--budget", type=float, default=6e6, help="editable scalars (whole columns)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print(
            "no CUDA device: bench/gpu_step.py measures nothing here (run it on a GPU machine, or "
            "--arch tiny --device cpu for a dry run)"
        )
        for name in (
            "gpu_peak_over_bf16_weights",
            "gpu_peak_over_bf16_weights_checkpointing",
            "gpu_peak_over_bf16_weights_column_grads",
            "gpu_peak_over_bf16_weights_column_grads_checkpointing",
            "gpu_step_over_full_step",
            "gpu_train_peak_plan_error",
            "gpu_diagnostics_peak_plan_error",
        ):
            print(f"RESULT name={name} value=nan target=<=1 SKIP")
        return
    from transformers import AutoModelForCausalLM

    from supportbench.methods.diagnostics import Diagnostics
    from supportbench.methods.intervention_score import InterventionScore
    from supportbench.unlearning.column_grads import use_column_grads
    from supportbench.unlearning.data import DiagnosticRecords, TokenizedSet
    from supportbench.unlearning.memory import arch_config, plan_diagnostics, plan_memory
    from supportbench.unlearning.objectives import get_objective
    from supportbench.unlearning.support import Support, discover_geometry
    from supportbench.unlearning.train import (
        SupportTrainer,
        TrainConfig,
        UnlearningData,
        set_activation_checkpointing,
    )

    cfg = tiny_config() if args.arch == "tiny" else arch_config(args.arch)
    torch.manual_seed(0)
    with Meter(dev) as build, torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    geo = discover_geometry(model)
    B, L = args.batch, args.length
    cols = (
        max(1, int(args.budget) // cfg.hidden_size)
        if args.arch != "tiny"
        else max(1, geo.n_groups // 100)
    )
    groups = torch.randperm(geo.n_groups, generator=torch.Generator().manual_seed(0))[
        :cols
    ].tolist()
    support = Support.of(geo, groups)

    def batch(seed):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, cfg.vocab_size, (B, L), generator=g)
        labels = ids.clone()
        labels[:, : L // 2] = -100
        return TokenizedSet(ids, torch.ones_like(ids), labels)

    forget, retain = batch(1), batch(2)
    obj = get_objective("npo")
    data = UnlearningData(forget, retain, torch.zeros(B))
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev
    print(
        f"{args.arch} on {where}, torch {torch.__version__}: weights {weights / GIB:.2f} GiB "
        f"(built in {build.seconds:.1f} s); support {support.cost:,} scalars; batch {B} x {L}",
        flush=True,
    )

    def npo_steps(checkpointing: bool, columns: bool = False, chunked: bool = False):
        if checkpointing:
            set_activation_checkpointing(model, True)
        trainer = SupportTrainer(
            model,
            geo,
            support,
            replace(obj, chunked_loss=chunked),
            data,
            TrainConfig(steps=6, lr=1e-5, batch_size=B),
            progress=False,
        )
        use_column_grads(trainer, columns)
        with Meter(dev) as m:
            trainer.train_step()  # warm-up: the first step allocates AdamW's moments
            t0 = time.perf_counter()
            for _ in range(4):
                trainer.train_step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            step = (time.perf_counter() - t0) / 4
        trainer.leaves.release()
        del trainer
        if checkpointing:
            set_activation_checkpointing(model, False)
        return step, m.peak

    rows = {}
    step, peak = npo_steps(False)
    plan = None if args.arch == "tiny" else plan_memory(args.arch, args.budget, batch=B, length=L)
    rows["NPO step (no checkpointing)"] = (step, peak, plan.without_diagnostics() if plan else None)
    print(f"  NPO step {step * 1e3:.0f} ms, peak {peak / GIB:.2f} GiB", flush=True)
    step_ck, peak_ck = npo_steps(True)
    plan_ck = (
        plan_memory(args.arch, args.budget, batch=B, length=L, checkpointing=True) if plan else None
    )
    rows["NPO step (activation checkpointing)"] = (
        step_ck,
        peak_ck,
        plan_ck.without_diagnostics() if plan else None,
    )
    print(
        f"  NPO step, checkpointing {step_ck * 1e3:.0f} ms, peak {peak_ck / GIB:.2f} GiB",
        flush=True,
    )

    # column_grads: the support's gradients without whole-tensor buffers
    for ck in (False, True):
        st, pk = npo_steps(ck, columns=True)
        pl = (
            plan_memory(
                args.arch, args.budget, batch=B, length=L, checkpointing=ck, column_grads=True
            ).without_diagnostics()
            if plan
            else None
        )
        label = "activation checkpointing" if ck else "no checkpointing"
        rows[f"NPO step, column_grads ({label})"] = (st, pk, pl)
        print(f"  NPO step, column_grads, {label}: {st * 1e3:.0f} ms, peak {pk / GIB:.2f} GiB")
    col_step, col_peak = rows["NPO step, column_grads (no checkpointing)"][:2]
    col_step_ck, col_peak_ck = rows["NPO step, column_grads (activation checkpointing)"][:2]

    # chunked_loss besides: the answer tokens' logits a chunk at a time, none for the whole batch
    for ck in (False, True):
        st, pk = npo_steps(ck, columns=True, chunked=True)
        pl = (
            plan_memory(
                args.arch,
                args.budget,
                batch=B,
                length=L,
                checkpointing=ck,
                column_grads=True,
                chunked_loss=True,
            ).without_diagnostics()
            if plan
            else None
        )
        label = "activation checkpointing" if ck else "no checkpointing"
        rows[f"NPO step, column_grads + chunked_loss ({label})"] = (st, pk, pl)
        print(
            f"  NPO step, column_grads + chunked_loss, {label}: {st * 1e3:.0f} ms, "
            f"peak {pk / GIB:.2f} GiB"
        )
    lean_step, lean_peak = rows["NPO step, column_grads + chunked_loss (no checkpointing)"][:2]
    lean_step_ck, lean_peak_ck = rows[
        "NPO step, column_grads + chunked_loss (activation checkpointing)"
    ][:2]

    # the diagnostics phase: Intervention Score's keys, one forward batch of B records per role
    recs = DiagnosticRecords(batch(3), batch(4), batch(5), batch(6))
    with Meter(dev) as dm:
        diag = Diagnostics(model, recs, obj, batch_size=B)
        diag.prepare(InterventionScore.requires)
        scores = InterventionScore().score(diag, geo)
    assert scores.shape == (geo.n_groups,) and bool(torch.isfinite(scores).all())
    del diag, scores
    dplan = (
        plan_diagnostics(args.arch, InterventionScore.requires, batch=B, length=L) if plan else None
    )
    rows["diagnostics (Intervention Score)"] = (dm.seconds, dm.peak, dplan.total if dplan else None)
    print(f"  diagnostics {dm.seconds:.1f} s, peak {dm.peak / GIB:.2f} GiB", flush=True)

    # a plain full-parameter bf16 step on the same two batches
    # (SGD: no optimizer state, a lower bound for AdamW)
    for p in model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.SGD(model.parameters(), lr=1e-5)
    times = []
    with Meter(dev) as fm:
        for k in range(5):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = sum(
                model(
                    input_ids=x.input_ids.to(dev),
                    attention_mask=x.attention_mask.to(dev),
                    labels=x.labels.to(dev),
                ).loss
                for x in (forget, retain)
            )
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            if k:
                times.append(time.perf_counter() - t0)
    full = sum(times) / len(times)
    rows["full-parameter SGD step (forget + retain batch)"] = (full, fm.peak, None)

    print("\n| phase | time | peak GiB | planned GiB | measured / planned |\n|---|---|---|---|---|")
    for name, (sec, pk, pl) in rows.items():
        ratio = f"{pk / pl:.2f}" if pl else "-"
        print(
            f"| {name} | {sec * 1e3:.0f} ms | {pk / GIB:.2f} | "
            f"{pl / GIB if pl else float('nan'):.2f} | {ratio} |"
        )
    if plan:
        print(
            "plan components (GiB): training "
            + ", ".join(
                f"{k} {v / GIB:.2f}" for k, v in plan.components.items() if k != "diagnostics"
            )
        )
        print(
            "                       checkpointing activations "
            f"{plan_ck.components['activations'] / GIB:.2f}; diagnostics "
            + ", ".join(f"{k} {v / GIB:.2f}" for k, v in dplan.components.items())
        )
    result("gpu_peak_over_bf16_weights", peak / weights, "<=", 1.3)
    result("gpu_peak_over_bf16_weights_checkpointing", peak_ck / weights, "<=", 1.3)
    result("gpu_peak_over_bf16_weights_column_grads", col_peak / weights, "<=", 1.3)
    result(
        "gpu_peak_over_bf16_weights_column_grads_checkpointing", col_peak_ck / weights, "<=", 1.3
    )
    result("gpu_peak_over_bf16_weights_column_grads_chunked_loss", lean_peak / weights, "<=", 1.3)
    result(
        "gpu_peak_over_bf16_weights_column_grads_chunked_loss_checkpointing",
        lean_peak_ck / weights,
        "<=",
        1.3,
    )
    result("gpu_step_over_full_step", step / full, "<=", 1.0)
    result("gpu_column_grads_step_over_full_step", col_step / full, "<=", 1.0)
    result("gpu_column_grads_checkpointing_step_over_full_step", col_step_ck / full, "<=", 1.0)
    result("gpu_column_grads_chunked_loss_step_over_full_step", lean_step / full, "<=", 1.0)
    result(
        "gpu_column_grads_chunked_loss_checkpointing_step_over_full_step",
        lean_step_ck / full,
        "<=",
        1.0,
    )
    if plan:
        result("gpu_train_peak_plan_error", abs(peak / plan.without_diagnostics() - 1), "<=", 0.2)
        result(
            "gpu_train_peak_checkpointing_plan_error",
            abs(peak_ck / plan_ck.without_diagnostics() - 1),
            "<=",
            0.2,
        )
        for ck, label in ((False, "no checkpointing"), (True, "activation checkpointing")):
            for mode, tag in (
                ("column_grads", ""),
                ("column_grads + chunked_loss", "_chunked_loss"),
            ):
                _, pk, pl = rows[f"NPO step, {mode} ({label})"]
                name = "gpu_column_grads" + tag + ("_checkpointing" if ck else "")
                result(name + "_peak_plan_error", abs(pk / pl - 1), "<=", 0.2)
        result("gpu_diagnostics_peak_plan_error", abs(dm.peak / dplan.total - 1), "<=", 0.2)


if __name__ == "__main__":
    main()
