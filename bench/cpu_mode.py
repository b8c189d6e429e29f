"""What pinning the CPU kernels costs (supportbench._cpumode): the same seeded training of the tiny
Llama preset (40 AdamW steps, batch 16 x 32 tokens, one thread) in a fresh process per mode --
native (whatever this CPU picks), avx2 (the default) and portable -- the median of three processes
each, and the weights' hash, so the ratio and whether the bits moved are read in one run.

Targets: the default mode within 10 % of native; portable is reported (it trades speed for the same
bits on every x86-64 CPU).
usage: OMP_NUM_THREADS=1 python bench/cpu_mode.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import result  # noqa: E402

WORKLOAD = r"""
import hashlib, json, time
import supportbench  # pins the kernels before torch loads
import torch
from transformers import AutoModelForCausalLM
from supportbench.unlearning.models import PRESETS, cpu_mode, preset_config
torch.set_num_threads(1)
torch.manual_seed(0)
cfg = preset_config(PRESETS["tiny-llama"], pad_token_id=0, bos_token_id=1, eos_token_id=2)
net = AutoModelForCausalLM.from_config(cfg)
opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
x = torch.randint(3, cfg.vocab_size, (16, 32), generator=torch.Generator().manual_seed(0))
t = time.perf_counter()
for _ in range(40):
    loss = net(input_ids=x, labels=x).loss
    opt.zero_grad(); loss.backward(); opt.step()
wall = time.perf_counter() - t
h = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in net.parameters())).hexdigest()[:16]
print(json.dumps({"wall": wall, "hash": h, "mode": cpu_mode()}))
"""  # noqa: E501


def run(mode: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SUPPORTBENCH_CPU_MODE": mode}
    for var in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"):
        env.pop(var, None)
    out = subprocess.run(
        [sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    got = {}
    for mode in ("native", "avx2", "portable"):
        runs = [run(mode) for _ in range(3)]
        got[mode] = {
            "wall": statistics.median(r["wall"] for r in runs),
            "hash": runs[0]["hash"],
            "mode": runs[0]["mode"],
            "stable": len({r["hash"] for r in runs}) == 1,
        }
        print(
            f"{mode:<9} in effect: {got[mode]['mode']:<14} median {got[mode]['wall']:.3f} s  "
            f"weights {got[mode]['hash']} (the same in all three processes: {got[mode]['stable']})"
        )
    native = got["native"]["wall"]
    result("cpu_mode_avx2_cost", got["avx2"]["wall"] / native, "<=", 1.10)
    result("cpu_mode_portable_cost", got["portable"]["wall"] / native, "<=", 3.0)


if __name__ == "__main__":
    main()
