"""Support-constrained step vs a bare PyTorch loop training the same tensors with a gradient mask.

Both use the same model, the same NPO batch and torch's AdamW. The bare loop optimises the full
geometry tensors and multiplies their gradients by the support mask (the usual recipe, which is
*not* exact under weight decay); supportbench's trainer gathers the support into compact leaves and
scatters back (exact). Target: ratio <= 1.05. Run with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import median_time, one_thread, result  # noqa: E402

one_thread()
import torch  # noqa: E402

from supportbench.unlearning.data import tokenize_pairs  # noqa: E402
from supportbench.unlearning.losses import reference_nll  # noqa: E402
from supportbench.unlearning.models import build_model, train_tokenizer  # noqa: E402
from supportbench.unlearning.objectives import get_objective  # noqa: E402
from supportbench.unlearning.support import discover_geometry, select  # noqa: E402
from supportbench.unlearning.train import SupportTrainer, TrainConfig, UnlearningData  # noqa: E402

STEPS, REPEATS = 20, 5


def main() -> None:
    qs = [f"Q: What is fact number {i} about author {i % 13}?\nA: " for i in range(64)]
    ans = [f"Author {i % 13} once wrote {i * 7} pages about the {i}th river." for i in range(64)]
    tok = train_tokenizer(qs + ans, vocab_size=1024)
    model = build_model("small-llama", tok, seed=0)
    forget = tokenize_pairs(tok, qs[:32], ans[:32])
    retain = tokenize_pairs(tok, qs[32:], ans[32:])
    geo = discover_geometry(model)
    obj = get_objective("npo")
    data = UnlearningData(forget, retain, reference_nll(model, forget))
    support = select(
        torch.rand(geo.n_groups, generator=torch.Generator().manual_seed(0)),
        budget=geo.total_cost // 10,
        geometry=geo,
    )
    cfg = TrainConfig(steps=STEPS, lr=1e-3, batch_size=8, weight_decay=0.01, seed=0)
    theta0 = {k: v.clone() for k, v in model.state_dict().items()}

    def ours():
        model.load_state_dict(theta0)
        SupportTrainer(model, geo, support, obj, data, cfg, progress=False).run()

    masks = support.mask()
    trainer_for_batches = SupportTrainer(model, geo, support, obj, data, cfg, progress=False)
    batches = [trainer_for_batches._batches(k) for k in range(STEPS)]

    def bare():
        model.load_state_dict(theta0)
        for p in model.parameters():
            p.requires_grad_(False)
        params = [t.param for t in geo.tensors]
        for p in params:
            p.requires_grad_(True)
        opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=False)
        for f, r, ref in batches:
            opt.zero_grad(set_to_none=True)
            loss = obj.loss(model, f, r, ref)
            loss.backward()
            for t in geo.tensors:
                t.param.grad.mul_(masks[t.name])
            opt.step()

    ours(), bare()  # warm-up
    t_ours = median_time(ours, REPEATS) / STEPS
    t_bare = median_time(bare, REPEATS) / STEPS
    print(
        f"model small-llama, {geo.describe()}, support "
        f"{len(support)} groups ({support.cost} scalars)"
    )
    print(
        f"step (support-constrained)  median {t_ours * 1e3:.2f} "
        f"ms  ({REPEATS} repeats x {STEPS} steps)"
    )
    print(f"step (bare masked loop)     median {t_bare * 1e3:.2f} ms")
    result("step_overhead", t_ours / t_bare, "<=", 1.05)


if __name__ == "__main__":
    main()
