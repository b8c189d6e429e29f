"""On a CUDA GPU (skipped without one): a Static-IV cell and a DIR-R cell of the tiny model,
deterministic algorithms on, each run twice with equal records; bf16 weights with an fp32
support."""

import os

import pytest
import torch

from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device: the gpu tests need one"
    ),
]


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
    spec = RunSpec(
        "tofu",
        "forget10",
        "npo",
        "intervention_score",
        seed=0,
        T=8,
        t=6,
        d=1,
        rho_p=0.05,
        variant=variant,
        budget=0.1,
        hyperparameters={"dtype": dtype, **extra},
    )
    recs = [
        Runner(tmp_path / f"r{i}", cache_dir=cache, progress=False, device="cuda").run(spec).record
        for i in (0, 1)
    ]
    assert all(r.status == "ok" for r in recs), [r.error for r in recs]
    assert recs[0].provenance.device.startswith("cuda")
    assert _outcome(recs[0]) == _outcome(recs[1])
    # enforcement on record (issue 35), counted on the GPU against theta_0's CPU snapshot
    c = recs[0].outcome.components
    assert c["changed_outside"] == 0 and 0 < c["changed_inside"] <= c["allowed_scalars"], c


def test_activation_checkpointing_on_gpu_recomputes_and_changes_nothing(tofu, cache, tmp_path):
    """On the GPU in bf16 the runner's activation checkpointing acts (each layer's MLP runs again in
    backward) and gives the outcome of the run without it (deterministic algorithms: bitwise)."""
    import supportbench.unlearning.train as TR

    calls = []
    real = TR.SupportTrainer.train_step

    def counting(self):
        layer = self.model.model.layers[0].mlp
        h = layer.register_forward_pre_hook(lambda *_: calls.append(1))
        try:
            return real(self)
        finally:
            h.remove()

    TR.SupportTrainer.train_step = counting
    try:
        out = {}
        for ck in (False, True):
            calls.clear()
            spec = RunSpec(
                "tofu",
                "forget10",
                "npo",
                "intervention_score",
                seed=0,
                T=4,
                budget=0.1,
                hyperparameters={"dtype": "bfloat16", "activation_checkpointing": ck},
            )
            rec = (
                Runner(tmp_path / f"c{ck}", cache_dir=cache, progress=False, device="cuda")
                .run(spec)
                .record
            )
            assert rec.status == "ok", rec.error
            out[ck] = (len(calls), rec.outcome.J, rec.support.groups)
    finally:
        TR.SupportTrainer.train_step = real
    assert out[False][0] == 2 * 4 and out[True][0] == 4 * 4, (
        out
    )  # forget + retain forward, each recomputed
    assert out[False][1:] == out[True][1:]


def test_column_grads_on_gpu_match_the_default(tofu, cache, tmp_path):
    """``column_grads`` on the GPU: fp32, the same support and an outcome within float32 summation
    noise of the default's whole-tensor gradients; bf16 with checkpointing, reproducible run to
    run."""
    out = {}
    for key, hp in {
        "tensor": {},
        "columns": {"column_grads": True},
        "bf16-a": {"column_grads": True, "dtype": "bfloat16", "activation_checkpointing": True},
        "bf16-b": {"column_grads": True, "dtype": "bfloat16", "activation_checkpointing": True},
    }.items():
        spec = RunSpec(
            "tofu",
            "forget10",
            "npo",
            "intervention_score",
            seed=0,
            T=8,
            budget=0.1,
            hyperparameters=hp,
        )
        rec = Runner(tmp_path / key, cache_dir=cache, progress=False, device="cuda").run(spec)
        rec = rec.record
        assert rec.status == "ok", rec.error
        out[key] = rec
    assert out["tensor"].support.groups == out["columns"].support.groups
    assert abs(out["tensor"].outcome.J - out["columns"].outcome.J) < 1e-3, (
        out["tensor"].outcome.J,
        out["columns"].outcome.J,
    )
    assert _outcome(out["bf16-a"]) == _outcome(out["bf16-b"])


def test_chunked_loss_on_gpu_matches_the_default(tofu, cache, tmp_path):
    """``chunked_loss`` on the GPU: fp32, the same support and an outcome within float32 summation
    noise of the whole-batch logits' NLLs; bf16 with column gradients and checkpointing (the 7-8B
    settings), reproducible run to run."""
    out = {}
    lean = {"column_grads": True, "chunked_loss": True}
    for key, hp in {
        "whole": {},
        "chunked": {"chunked_loss": True},
        "bf16-a": {**lean, "dtype": "bfloat16", "activation_checkpointing": True},
        "bf16-b": {**lean, "dtype": "bfloat16", "activation_checkpointing": True},
    }.items():
        spec = RunSpec(
            "tofu",
            "forget10",
            "npo",
            "intervention_score",
            seed=0,
            T=8,
            budget=0.1,
            hyperparameters=hp,
        )
        rec = Runner(tmp_path / key, cache_dir=cache, progress=False, device="cuda").run(spec)
        rec = rec.record
        assert rec.status == "ok", rec.error
        out[key] = rec
    assert out["whole"].support.groups == out["chunked"].support.groups
    assert abs(out["whole"].outcome.J - out["chunked"].outcome.J) < 1e-3, (
        out["whole"].outcome.J,
        out["chunked"].outcome.J,
    )
    assert _outcome(out["bf16-a"]) == _outcome(out["bf16-b"])
