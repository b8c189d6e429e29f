"""Digests of the theta_0 cache entries a fresh process builds, for the determinism check
(``tests/integration/test_theta0_determinism.py``, shortened recipes) and
``bench/theta0_determinism.py`` (the default recipes the demo uses).

``python -m supportbench.harness.theta0_digest CACHE [--short] [--only tofu,controlled]`` builds
theta_0 of the TOFU, LACUNA and controlled presets (or those named) into CACHE and prints one line
``RESULT {json}``: per benchmark the sha256 of the weights (every tensor's bytes, by name), of the
tokenizer and of every file of the cache entry, and the process's torch thread count before and
after (a build pins its own thread count and gives the process's back), and the CPU mode the process
computed in (``models.cpu_mode``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import torch

from supportbench.benchmarks.base import get_benchmark

DEFAULT_BUILDS = (
    ("tofu", "tiny-llama", {}),
    ("lacuna", "tiny-olmo3", {}),
    ("controlled", "tiny-qwen2", {}),
)
# Shortened: a difference shows from the first steps; the fewest people / targets each benchmark
# allows.
SHORT_BUILDS = (
    ("tofu", "tiny-llama", {"finetune": {"epochs": 2}}),
    ("lacuna", "tiny-olmo3", {"people": 6, "finetune": {"epochs": 2}}),
    ("controlled", "tiny-qwen2", {"n_targets": 2, "inject_epochs": 5}),
)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digests(cache: Path, short: bool = False, only: tuple[str, ...] = ()) -> dict:
    if short:  # the pretraining recipes are class attributes: shortened the same way
        from supportbench.benchmarks.controlled.adapter import Controlled
        from supportbench.benchmarks.lacuna.adapter import Lacuna

        Lacuna.pretrain_config = replace(Lacuna.pretrain_config, epochs=2)
        Controlled.pretrain_config = replace(Controlled.pretrain_config, epochs=2)
    from supportbench.unlearning.models import cpu_mode

    out: dict = {"threads": torch.get_num_threads(), "short": short, "cpu_mode": cpu_mode()}
    for name, preset, options in SHORT_BUILDS if short else DEFAULT_BUILDS:
        if only and name not in only:
            continue
        p = get_benchmark(name, cache_dir=cache, progress=False, **options).prepare(preset)
        h = hashlib.sha256()
        for key, t in sorted(p.model.state_dict().items()):
            h.update(key.encode())
            h.update(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        entry = (
            Path(p.path).parent if name == "lacuna" else Path(p.path)
        )  # lacuna: data, theta_pre, mask too
        files = {
            str(f.relative_to(entry)): _sha(f.read_bytes())
            for f in sorted(entry.rglob("*"))
            if f.is_file()
        }
        tok = next(f for f in files if f.endswith("tokenizer.json"))
        out[name] = {
            "weights": h.hexdigest(),
            "tokenizer": files[tok],
            "files": files,
            "model_hash": p.model_hash,
            "threads_after": torch.get_num_threads(),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m supportbench.harness.theta0_digest", description=__doc__
    )
    ap.add_argument("cache", type=Path, help="the (fresh) cache folder to build into")
    ap.add_argument("--short", action="store_true", help="shortened recipes (the test's)")
    ap.add_argument(
        "--only", default="", help="comma-separated benchmarks to build (default: all three)"
    )
    args = ap.parse_args(argv)
    only = tuple(x for x in args.only.split(",") if x)
    print("RESULT " + json.dumps(digests(args.cache, args.short, only)))


if __name__ == "__main__":
    main()
