"""DIR-R on mini TOFU: bitwise safety of rho = 0, the selection guarantee, decisions, post-hoc
completion."""

import json

import pytest
import torch

from supportbench.errors import DecisionError
from supportbench.experiments.decisions import ACTIONS, freeze_decision
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner

pytestmark = pytest.mark.slow
BASE = dict(
    benchmark="tofu",
    field="forget10",
    objective="npo",
    method="intervention_score",
    T=12,
    t=8,
    d=2,
    rho_p=0.05,
    budget=0.1,
    hyperparameters={"lr": 0.01},
)


def geometry_state(runner, spec):
    model = runner.live_model(spec)
    return {k: v.clone() for k, v in model.state_dict().items() if "down_proj" in k}


def test_rho0_continuation_is_bitwise_static(tofu, cache, tmp_path):
    runner = Runner(tmp_path, cache_dir=cache, progress=False)
    static = RunSpec(**BASE, seed=0)
    rs = runner.run(static).record
    w_static = geometry_state(runner, static)
    dirr = RunSpec(**{**BASE, "hyperparameters": {"lr": 0.01, "tau": 1e9}}, seed=0, variant="dirr")
    rd = runner.run(dirr).record
    assert rd.status == "ok", rd.error
    assert rd.dirr.triggered is False and rd.dirr.chosen_rho == 0.0 and rd.dirr.unfrozen
    w_dirr = geometry_state(runner, dirr)
    assert all(torch.equal(w_static[k], w_dirr[k]) for k in w_static)
    assert rd.outcome.J == rs.outcome.J == rd.dirr.rho0_J
    assert rd.compute.normalized == pytest.approx((12 + 2) / 12)


@pytest.mark.parametrize("selection", ["evaluation", "development"])
def test_dirr_selection_never_worse_than_static(tofu, cache, tmp_path, selection):
    """With every branch complete, DIR-R's selection criterion is >= Static-IV's (rho = 0), over
    seeds."""
    runner = Runner(tmp_path, cache_dir=cache, progress=False)
    for seed in (0, 1, 2):
        spec = RunSpec(
            **{**BASE, "hyperparameters": {"lr": 0.01, "tau": -1.0, "selection": selection}},
            seed=seed,
            variant="dirr",
        )
        rec = runner.run(spec).record
        d = rec.dirr.to_dict()
        assert (
            d["triggered"] and d["complete"] and set(d["candidates"]) == {str(a) for a in ACTIONS}
        )
        best = max(d["candidates"].values())
        assert d["candidates"][str(d["chosen_rho"])] == best >= d["candidates"]["0.0"]
        ties = [float(r) for r, v in d["candidates"].items() if v == best]
        assert d["chosen_rho"] == min(ties)
        assert pytest.approx(d["candidates_J"][str(d["chosen_rho"])], abs=1e-9) == rec.outcome.J
        if selection == "evaluation":
            assert d["rho0_J"] <= rec.outcome.J
        assert rec.compute.normalized == pytest.approx((12 + 2 + 2 + 3 * 4) / 12)


def test_final_run_follows_frozen_decision_and_post_hoc_completion(tofu, cache, tmp_path):
    runner = Runner(tmp_path / "res", cache_dir=cache, progress=False)
    dec = freeze_decision(
        tmp_path / "decisions",
        tau=1e9,
        rho_p=0.05,
        d=2,
        t=8,
        T=12,
        actions=list(ACTIONS),
        admissible_range=[0.2, 0.8],
        calibration_seeds=[73],
        baselines=[],
        benchmark="tofu",
        objective="npo",
        selection="evaluation",
        calibration_runs=[],
    )
    spec = RunSpec(**BASE, seed=5, variant="dirr")
    with pytest.raises(DecisionError, match="no frozen decision"):
        runner.run(spec)
    rec = runner.run(spec, decision=dec).record
    assert rec.dirr.decision_hash == dec["hash"] and not rec.dirr.triggered
    assert set(rec.dirr.candidates) == {"0.0"} and not rec.dirr.complete
    done = runner.complete_post_hoc(spec, dec).record
    assert done.dirr.post_hoc and done.dirr.complete and done.dirr.chosen_rho == 0.0
    assert set(done.dirr.candidates) == {str(a) for a in ACTIONS}
    on_disk = json.loads((tmp_path / "res" / "runs" / f"{spec.run_key}.json").read_text())
    assert on_disk["outcome"] == rec.to_dict()["outcome"] and on_disk["dirr"]["post_hoc"]
    with pytest.raises(DecisionError, match="froze d=2 but the run asks d=3"):
        Runner(tmp_path / "r2", cache_dir=cache, progress=False).run(
            RunSpec(**{**BASE, "d": 3}, seed=5, variant="dirr"), decision=dec
        )


@pytest.mark.parametrize("columns", [False, True])
def test_one_trainer_lives_at_a_time(tofu, cache, tmp_path, monkeypatch, columns):
    """Each of DIR-R's trainers (commit, two probes, five continuations) is built with no other
    trainer's state alive, the one before it released and dropped, and runs alone, as plan-memory
    counts a DIR-R run (one trainer's support state at a time, beside the checkpoints), with the
    same outcome."""
    import weakref

    import supportbench.harness.dirr as dirr_module

    hp = {"lr": 0.01, "tau": -1.0, "column_grads": columns}
    spec = RunSpec(**{**BASE, "hyperparameters": hp}, seed=0, variant="dirr")
    plain = Runner(tmp_path / "plain", cache_dir=cache, progress=False).run(spec).record
    made, built, alive = [], [], []

    def living():
        return [i for i, refs in enumerate(made) if any(r() is not None for r in refs)]

    class Recorded(dirr_module.SupportTrainer):
        def __init__(self, *args, **kwargs):
            built.append(living())  # before this trainer allocates its own state
            super().__init__(*args, **kwargs)  # the trainer, its optimizer and a support leaf
            made.append([weakref.ref(x) for x in (self, self.optimizer, self.leaves.params[0])])

        def run(self, *args, **kwargs):
            alive.append(living())
            return super().run(*args, **kwargs)

    monkeypatch.setattr(dirr_module, "SupportTrainer", Recorded)
    rec = Runner(tmp_path / "watched", cache_dir=cache, progress=False).run(spec).record
    assert rec.status == "ok", rec.error
    assert rec.dirr.triggered and len(made) == 8  # commit, 2 probes, 5 continuations
    assert built == [[]] * 8  # every earlier trainer gone before the next is built
    assert alive == [[k] for k in range(8)]  # only the trainer that is about to run
    assert rec.outcome.J == plain.outcome.J and rec.dirr.candidates == plain.dirr.candidates
