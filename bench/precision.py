"""Localization precision at 7B shape without 7B memory (issue: LACUNA, streaming precision).

The tensors are OLMo-3-7B's (transformers' ``Olmo3Config`` defaults: d_model 4096, d_ff 11008),
enumerated from the config on the meta device, minus norms, embeddings and ``lm_head`` as upstream.
Each tensor's scores |W_after − W_before| and its ``mask.pt`` entry are generated chunk by chunk
from a seed, so nothing model-sized is ever resident; the precision code sees exactly the sources
the adapter gives it. The first ``LAYERS`` layers are used to keep the run short: memory is per
chunk and per histogram, independent of the number of tensors.

Measured: peak extra RSS during the computation / bytes of the largest tensor in bf16 (the
checkpoint dtype). Upstream's script holds ~14 bytes per parameter (three fp32 copies + two boolean
masks).
"""

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import one_thread, result  # noqa: E402

one_thread()

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, Olmo3Config  # noqa: E402

from supportbench.benchmarks.lacuna.precision import localization_precision  # noqa: E402

LAYERS = 2


def tensors():
    cfg = Olmo3Config()
    cfg.num_hidden_layers = LAYERS
    cfg.layer_types = ["full_attention"] * LAYERS
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(cfg)
    return [
        (n, p.numel(), tuple(p.shape))
        for n, p in m.named_parameters()
        if "norm" not in n and "embed" not in n and "lm_head" not in n
    ]


def sources(specs):
    def make(name, numel, k):
        def read(s, e):
            g = torch.Generator().manual_seed(k * 1_000_003 + s)
            mask = torch.randint(0, 64, (e - s,), generator=g, dtype=torch.int32)
            scores = torch.rand(e - s, generator=g) * (
                1 + ((mask & 21) != 0).float()
            )  # forget scalars move more
            scores[torch.rand(e - s, generator=g) < 0.5] = 0.0  # untouched scalars
            return scores, mask

        return name, numel, read

    return lambda: [make(n, numel, k) for k, (n, numel, _) in enumerate(specs)]


def rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main():
    specs = tensors()
    largest = max(numel for _, numel, _ in specs) * 2  # bf16 bytes
    total = sum(numel for _, numel, _ in specs)
    # warm-up on a small slice so that allocator pools and imports are in the baseline
    localization_precision(
        sources([(n, 1 << 16, s) for n, _, s in specs[:2]]), {"forget": 21}, max_exact=1 << 10
    )
    base = rss_kb()
    t0 = time.perf_counter()
    res = localization_precision(
        sources(specs), {"forget": 21, "all": 63}, max_exact=1 << 24, bins=1 << 16
    )
    wall = time.perf_counter() - t0
    extra = (rss_kb() - base) * 1024
    for k, r in res.items():
        print(
            f"{k}: mode {r.mode}, N = {r.n:,} scalars in {r.tensors} tensors, "
            f"AUROC {r.auroc:.5f} (bound {r.auroc_bound:.2e}), precision@1% "
            f"{r.precision_at['1']:.4f} (bound {r.precision_bound:.2e})"
        )
    print(
        f"{len(specs)} tensors of OLMo-3-7B's first {LAYERS} layers, {total:,} "
        f"scalars, {wall:.1f} s; largest tensor {largest / 2**20:.0f} MiB in "
        f"bf16; peak extra RSS {extra / 2**20:.0f} MiB (upstream's ~14 "
        f"B/parameter would hold {14 * total / 2**30:.1f} GiB for these tensors)"
    )
    result("precision_peak_over_largest_tensor", extra / largest, "<=", 3)


if __name__ == "__main__":
    main()
