"""On a CUDA GPU (skipped without one): a Static-IV cell and a DIR-R cell of the tiny model, deterministic
algorithms on, each run twice with equal records; bf16 weights with an fp32 support."""

import os

import pytest
import torch

from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the gpu tests need one")]


@pytest.fixture(autouse=True)
def deterministic():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


def _outcome(rec):
    return rec.outcome.J, rec.support.groups, rec.dirr.candidates if rec.dirr else None


@pytest.mark.parametrize("variant, extra", [("static", {}), ("dirr", {"tau": 0.0})])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cells_on_gpu_are_reproducible(tofu, cache, tmp_path, variant, extra, dtype):
    spec = RunSpec("tofu", "forget10", "npo", "intervention_score", seed=0, T=8, t=6, d=1, rho_p=0.05,
                   variant=variant, budget=0.1, hyperparameters={"dtype": dtype, **extra})
    recs = [Runner(tmp_path / f"r{i}", cache_dir=cache, progress=False, device="cuda").run(spec).record
            for i in (0, 1)]
    assert all(r.status == "ok" for r in recs), [r.error for r in recs]
    assert recs[0].provenance.device.startswith("cuda")
    assert _outcome(recs[0]) == _outcome(recs[1])
