"""The 7-8B path on a GPU (skips without CUDA): an 8B-shaped Llama (Llama 3 8B's config) built with random bf16
weights — no download —, a support of ~6M editable scalars (whole down-projection columns chosen at random),
batch 8 x length 256.

Measured in one process:
  peak GPU memory of the support-constrained NPO step / bytes of the bf16 weights   (target <= 1.3)
  support-constrained NPO step time / a plain full-parameter bf16 step's on the same batch (reported)
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import torch  # noqa: E402
from _common import result  # noqa: E402


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: bench/gpu_step.py measures nothing here (run it on a GPU machine)")
        print("RESULT name=gpu_peak_over_bf16_weights value=nan target=<=1.3 SKIP")
        print("RESULT name=gpu_step_over_full_step value=nan target=<=1 SKIP")
        return
    from transformers import AutoModelForCausalLM

    from supportbench.unlearning.data import TokenizedSet
    from supportbench.unlearning.memory import arch_config
    from supportbench.unlearning.objectives import get_objective
    from supportbench.unlearning.support import Support, discover_geometry
    from supportbench.unlearning.train import SupportTrainer, TrainConfig, UnlearningData

    dev = torch.device("cuda")
    cfg = arch_config("llama3-8b")
    torch.manual_seed(0)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    model.eval()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    geo = discover_geometry(model)
    cols = 6_000_000 // cfg.hidden_size
    groups = torch.randperm(geo.n_groups, generator=torch.Generator().manual_seed(0))[:cols].tolist()
    support = Support.of(geo, groups)
    B, L = 8, 256
    ids = torch.randint(0, cfg.vocab_size, (B, L))
    labels = ids.clone()
    labels[:, : L // 2] = -100
    data = TokenizedSet(ids, torch.ones_like(ids), labels)
    obj = get_objective("npo")
    ref = torch.zeros(B)
    trainer = SupportTrainer(model, geo, support, obj, UnlearningData(data, data, ref),
                             TrainConfig(steps=6, lr=1e-5, batch_size=B), progress=False)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    trainer.train_step()  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        trainer.train_step()
    torch.cuda.synchronize()
    step = (time.perf_counter() - t0) / 5
    peak = torch.cuda.max_memory_allocated()
    del trainer
    # a plain full-parameter bf16 step on the same batch (SGD: no optimizer state, a lower bound for AdamW)
    for p in model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.SGD(model.parameters(), lr=1e-5)
    batch = data.take(torch.arange(B))
    times = []
    for k in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=batch.input_ids.to(dev), attention_mask=batch.attention_mask.to(dev),
                    labels=batch.labels.to(dev))
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if k:
            times.append(time.perf_counter() - t0)
    full = sum(times) / len(times)
    print(f"8B-shaped Llama, bf16 weights {weights / 2**30:.1f} GiB; support {support.cost:,} scalars; batch {B} x {L}")
    print(f"support-constrained NPO step {step * 1e3:.0f} ms, peak {peak / 2**30:.1f} GiB; full-parameter SGD step "
          f"{full * 1e3:.0f} ms")
    result("gpu_peak_over_bf16_weights", peak / weights, "<=", 1.3)
    result("gpu_step_over_full_step", step / full, "<=", 1.0)


if __name__ == "__main__":
    main()
