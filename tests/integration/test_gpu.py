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


def test_a_cell_by_hub_id_on_gpu_with_a_curve_and_relearning(tmp_path):
    """The 7-8B path's way in (issue 37) on the GPU: theta_0 and the TOFU files named by hub id,
    read from a Hugging Face cache in the hub's own layout with HF_HUB_OFFLINE=1, a cell run on CUDA
    in a fresh process with a curve and the relearning attack (issue 35); the record names the id
    and the commit, carries the enforcement counts (0 outside), the curve's points and the attack's
    counts, and the curve leaves the terminal model as it was (the same J without it)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from test_hub_ids import COMMIT, DATA_ID, MODEL_ID, put_in_hf_cache

    import supportbench
    from supportbench.benchmarks.tofu.adapter import Tofu
    from supportbench.unlearning.models import build_model, save_model, train_tokenizer

    tofu = Tofu(size="mini", cache_dir=tmp_path / "sb-cache", progress=False)
    tok = train_tokenizer(tofu._tokenizer_texts(), 512)
    model_dir = save_model(build_model("tiny-llama", tok, seed=1), tok, tmp_path / "tiny-model")
    put_in_hf_cache(tmp_path / "hf" / "hub", "model", MODEL_ID, model_dir, COMMIT)
    put_in_hf_cache(tmp_path / "hf" / "hub", "dataset", DATA_ID, tofu.data_dir, "2" * 40)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    src = str(Path(supportbench.__file__).resolve().parents[1])
    env.update(
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_OFFLINE="1",
        SUPPORTBENCH_CACHE=str(tmp_path / "sb-cache"),
        CUBLAS_WORKSPACE_CONFIG=":4096:8",
        PYTHONPATH=os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    recs = {}
    extras = {"curve": ["--eval-every", "2", "--relearn-steps", "4"], "plain": []}
    for name, extra in extras.items():
        results = tmp_path / name
        args = ["run", "--benchmark", "tofu", "--field", "forget01", "--objective", "npo"]
        args += ["--method", "intervention_score", "--theta0", f"{MODEL_ID}@{COMMIT}"]
        args += ["--data-dir", DATA_ID, "--T", "4", "--budget", "0.1", "--device", "cuda"]
        out = subprocess.run(
            [sys.executable, "-m", "supportbench.cli", *args, *extra, "--results", str(results)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        (rec,) = [json.loads(f.read_text()) for f in (results / "runs").glob("*.json")]
        assert rec["status"] == "ok", rec["error"]
        recs[name] = rec
    rec = recs["curve"]
    assert rec["provenance"]["device"].startswith("cuda")
    src = rec["provenance"]["sources"]
    assert src["model"]["hub_id"] == f"{MODEL_ID}@{COMMIT}" and src["model"]["revision"] == COMMIT
    assert src["benchmark.data_dir"]["hub_id"] == DATA_ID
    c = rec["outcome"]["components"]
    assert c["changed_outside"] == 0 and 0 < c["changed_inside"] <= c["allowed_scalars"], c
    assert [p["step"] for p in rec["outcome"]["curve"]] == [2, 4], rec["outcome"]["curve"]
    assert c["relearn_final_loss"] > 0 and c["resurfaced_after_relearn"] >= 0, c
    # without torch's deterministic algorithms in the subprocess: equal to float32 noise
    assert abs(rec["outcome"]["J"] - recs["plain"]["outcome"]["J"]) < 1e-4
