"""The mini TOFU benchmark on the tiny preset: memorisation, unlearning, runner records, cache."""

import json
import subprocess
import sys

import pytest
import torch

from supportbench.benchmarks.base import get_benchmark, record_theta0_nll
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner
from supportbench.unlearning.data import dataset_nll
from supportbench.unlearning.models import load_model

pytestmark = pytest.mark.slow


def test_tiny_model_memorises_mini_tofu(tofu):
    roles = tofu.roles("forget10", 0)
    s, n = dataset_nll(tofu._prepared.model, roles.forget)
    prob = torch.exp(-s / n).mean().item()
    chance = 1 / len(tofu._prepared.tokenizer)
    assert prob > 0.5 > 100 * chance


def test_roles_are_disjoint_and_sized(tofu):
    r = tofu.roles("forget10", 3)
    ev_q = {row["question"] for s in r.splits["eval"].values() for row in s.rows}
    dev_q = {row["question"] for s in r.splits["dev"].values() for row in s.rows}
    assert not ev_q & dev_q
    assert len(r.diagnostics.F) == 10 and len(r.splits["eval"]["forget"]) == 20
    assert bool(r.diagnostics.F.subject_mask.any(1).all()), "every F record has a subject span"
    assert (
        tofu.roles("forget10", 3) is r
        and tofu.roles("forget10", 4).splits["eval"]["forget"].rows
        != r.splits["eval"]["forget"].rows
    )


def test_npo_steps_on_a_support_reduce_forget_probability(tofu, cache, tmp_path):
    runner = Runner(tmp_path, cache_dir=cache, progress=False)
    spec = RunSpec("tofu", "forget10", "npo", "intervention_score", seed=0, T=20, budget=0.1)
    rec = runner.run(spec).record
    assert rec.status == "ok", rec.error
    o = rec.outcome.to_dict()
    assert all(map(lambda v: v == v and abs(v) < float("inf"), (o["J"], o["G_F"], o["D_coll"])))
    assert o["G_F"] > 1.0 and o["D_coll"] >= 0
    # record file: atomic, complete, skipped on rerun, refreshed with force
    path = runner.results.record(spec.run_key)
    on_disk = json.loads(path.read_text())
    assert (
        on_disk["run_key"] == spec.run_key
        and on_disk["support"]["cost"] <= on_disk["support"]["budget"]
    )
    assert on_disk["provenance"]["model_hash"] and on_disk["provenance"]["data_hash"]
    assert on_disk["provenance"]["device"] == str(runner.device)
    assert on_disk["compute"]["step_equivalents"] == 20.0
    assert runner.run(spec).skipped is True
    assert not list(runner.results.runs.glob("*.tmp"))


def test_forget_probability_drops(tofu, cache, tmp_path):
    runner = Runner(tmp_path, cache_dir=cache, progress=False)
    spec = RunSpec("tofu", "forget10", "npo", "intervention_score", seed=1, T=20, budget=0.1)
    _, model = runner.theta0(spec)
    bench = runner.benchmark(spec)
    roles = bench.roles("forget10", 1)
    record_theta0_nll(model, roles)
    before = bench.evaluate(model, roles).components["forget_prob"]
    after = runner.run(spec).record.outcome.components["forget_prob"]
    assert after < before - 0.2


def test_full_tofu_metrics(tofu):
    roles = tofu.roles("forget01", 0)
    model = load_model(tofu._prepared.path, device=tofu.device)[
        0
    ]  # a fresh theta_0: the fixture's stays intact
    record_theta0_nll(model, roles)
    o = tofu.evaluate(model, roles, full=True)
    assert o.J == 0.0 and o.G_F == 0.0  # theta_0 against itself
    c = o.components
    for k in (
        "forget_quality",
        "forget_rouge",
        "model_utility",
        "real_authors_prob",
        "world_facts_truth_ratio",
    ):
        assert 0.0 <= c[k] <= 1.0, k
    assert c["world_facts_rouge"] > 0.8 and c["model_utility"] > 0.0


def test_prepare_is_cached(tofu, cache):
    again = get_benchmark("tofu", cache_dir=cache, progress=False).prepare("tiny-llama")
    assert again.from_cache and again.model_hash == tofu._prepared.model_hash


def test_failed_run_keeps_a_record(tofu, cache, tmp_path):
    """A valid run that crashes (here: inside a method) is recorded as failed, with its error."""
    from supportbench.methods.base import METHODS, MethodBase, register_method

    @register_method("crashing_test")
    class Crashing(MethodBase):
        provenance = "test"
        requires = ("grad:F",)

        def score(self, diag, geometry):
            raise RuntimeError("method blew up")

    try:
        runner = Runner(tmp_path, cache_dir=cache, progress=False)
        rec = runner.run(RunSpec("tofu", "forget10", "npo", "crashing_test", T=2)).record
    finally:
        METHODS.unregister("crashing_test")
    assert rec.status == "failed" and "RuntimeError: method blew up" in rec.error
    assert runner.results.record(rec.run_key).exists()


def test_cli_run_prints_outcome(cache, tmp_path, tofu):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "supportbench.cli",
            "run",
            "--benchmark",
            "tofu",
            "--field",
            "forget10",
            "--objective",
            "npo",
            "--method",
            "intervention_score",
            "--seed",
            "0",
            "--T",
            "5",
            "--results",
            str(tmp_path),
            "--cache",
            str(cache),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "J = +" in out.stdout or "J = -" in out.stdout
    assert "record: " in out.stdout


def test_planned_runs_share_one_fused_diagnostics_pass(tofu, cache, tmp_path, monkeypatch):
    """The first run of a cell makes one fused pass for every announced method and scores them all;
    then the Diagnostics are dropped (their full-size buffers are not held through training:
    docs/scaling.md), and the second run reads its scores without a pass. The supports do not depend
    on which run comes first."""
    import supportbench.harness.runner as runner_module

    made = []
    real = runner_module.Diagnostics

    def counting(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    monkeypatch.setattr(runner_module, "Diagnostics", counting)
    a = RunSpec("tofu", "forget10", "npo", "activation", seed=2, T=2, budget=0.1)
    b = RunSpec("tofu", "forget10", "npo", "ap_mlp", seed=2, T=2, budget=0.1)
    groups = {}
    for order, fits in (((a, b), True), ((b, a), True), ((a, b), False)):
        runner = Runner(tmp_path / f"{order[0].method}-{fits}", cache_dir=cache, progress=False)
        monkeypatch.setattr(
            runner, "_buffers_fit", lambda *_, fits=fits: fits
        )  # False: a GPU too small for the union
        runner.plan([a, b])
        made.clear()
        recs = {s.method: runner.run(s).record for s in order}
        assert all(r.status == "ok" for r in recs.values())
        assert len(made) == 1 and made[0].passes > 0  # one Diagnostics for the cell
        assert set(made[0].computed) == {"activations", "attribution:corrupted"}
        assert runner._diag is None  # dropped once the cell's scores exist
        groups[(order[0].method, fits)] = {m: r.support.groups for m, r in recs.items()}
        runner.plan([a, b])  # both recorded now: nothing left to prepare
        assert runner._planned == {}
    assert groups[("activation", True)] == groups[("ap_mlp", True)] == groups[("activation", False)]


def test_every_mini_row_has_a_clean_prompt_border(tofu):
    """The prompt's tokens are a prefix of the joint sequence's for every row (TOFU's tags, not the
    base tags): each answer token is labelled and generation starts where training put the answer
    (unlearning/formats.py)."""
    tok = tofu._prepared.tokenizer
    fmt = tofu._format(tok)
    rows = tofu.rows("full") + tofu.rows("real_authors") + tofu.rows("world_facts")
    for r in rows:
        e = fmt.encode(tok, r["question"], r["answer"])
        assert e.ids[: e.n_prompt] == fmt.prompt_ids(tok, r["question"]), r["question"]
        assert tok.decode(e.ids[e.n_prompt :], skip_special_tokens=True) == r["answer"]
