"""Time to prepare and cache the mini TOFU base model vs time to load it from the cache.

Preparation = generate data, train the tokenizer, fine-tune the tiny preset on full + background
knowledge, save (safetensors). Loading = read it back from the cache. Target: load <= 1/20 of
preparation. Run with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import one_thread, result  # noqa: E402

one_thread()

from supportbench.benchmarks.base import get_benchmark  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        p = get_benchmark("tofu", cache_dir=cache, progress=False).prepare("tiny-llama")
        t_prep = time.perf_counter() - t0
        assert not p.from_cache
        t0 = time.perf_counter()
        q = get_benchmark("tofu", cache_dir=cache, progress=False).prepare("tiny-llama")
        t_load = time.perf_counter() - t0
        assert q.from_cache and q.model_hash == p.model_hash
    print(f"prepare mini TOFU (tiny-llama), cold cache: {t_prep:.2f} s")
    print(f"load from cache:                          {t_load:.3f} s")
    result("prepare_cache_load_fraction", t_load / t_prep, "<=", 1 / 20)


if __name__ == "__main__":
    main()
