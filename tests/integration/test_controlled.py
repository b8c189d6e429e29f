"""The controlled separation end to end at mini size: equal interfaces that really hold their facts,
outcome-blind storage locators, one record per (target, interface), and Table 1 from the
registry."""

import re
from pathlib import Path

import pytest
import torch

from supportbench.benchmarks.base import get_benchmark
from supportbench.benchmarks.controlled import interfaces as interfaces
from supportbench.benchmarks.controlled.generator import DIAG, TRAIN, background_subjects, targets
from supportbench.benchmarks.controlled.locators import (
    LocatorInputs,
    compute_locator_scores,
    get_locator,
    list_locators,
    locate_all,
)
from supportbench.cli import main
from supportbench.errors import SpecError, UnknownNameError
from supportbench.experiments.controlled_decision import RECALL_THRESHOLD
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner
from supportbench.unlearning.data import dataset_nll, sequence_nll, tokenize_pairs
from supportbench.unlearning.relearn import RESURFACING

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ctl(cache):
    """A small construction (12 final + 4 calibration targets): the one the CLI, sweep, relearning
    and curve tests below run, so they share one cached theta_0 (~1.5-3 min)."""
    b = get_benchmark(
        "controlled", cache_dir=cache, progress=False, n_targets=12, n_calibration_targets=4
    )
    b.prepare("tiny-qwen2")
    return b


@pytest.fixture(scope="module")
def ctl36(cache):
    """The benchmark at its real size: 36 final targets and 12 calibration targets in one theta_0
    (~45 s)."""
    b = get_benchmark("controlled", cache_dir=cache, progress=False)
    b.prepare("tiny-qwen2")
    return b


def _eval_nll(b, model, t) -> float:
    data = tokenize_pairs(b._prepared.tokenizer, t["eval"], [t["attribute"]] * len(t["eval"]))
    s, n = dataset_nll(model, data)
    return float((s / n).mean())


def _eval_recall(b, model, t) -> float:
    """A target's recall as the construction measures it at theta_0 (controlled/adapter.py: the
    mean over its eval prompts of the answer's geometric-mean token probability)."""
    data = tokenize_pairs(b._prepared.tokenizer, t["eval"], [t["attribute"]] * len(t["eval"]))
    s, n = dataset_nll(model, data)
    return float(torch.exp(-s / n).mean())


def test_interfaces_have_equal_editable_size(ctl):
    itf = ctl.itf
    lora = sum(p.numel() for p in interfaces._lora_params(ctl._prepared.model, itf))
    assert itf.size == itf.lora_size == lora == 3 * len(itf.columns) * itf.d_model  # gate, up, down


def test_each_interface_holds_its_own_targets(ctl):
    """At the small size, on average: removing the LoRA hurts its own targets more than the
    backbone's, zeroing the block's down columns hurts the backbone's more than the LoRA's, and
    either removal takes away every own fact the construction counts as learned: its recall at
    theta_0 >= RECALL_THRESHOLD (the construction's rule, fixed before), below it after the removal;
    and every own target's NLL rises. Measured (seed 0, 12 + 4 targets, an AMD EPYC's theta_0): LoRA
    removal 4.34 (LoRA targets) vs 0.09; block removal 6.58 (backbone targets) vs 2.26; smallest own
    increase 1.80. Per target it holds for 10/12 here (fewer injection steps than at 36 targets,
    where every target is asserted: the test below). On an Intel Xeon's theta_0 (2026-11-27; MKL
    computes other bits there, supportbench._cpumode) two targets were barely held: t09 (backbone,
    recall 0.51, NLL 1.80), whose removal added 0.96 nat, and t10 (LoRA, recall 0.49: not counted
    as learned), +2.01; the first version of this test asked for an increase > 1 nat for every
    target, which measures what theta_0 held as much as what the removal took."""
    model = ctl._prepared.model
    state = {k: v.clone() for k, v in model.state_dict().items()}
    W = interfaces._base_weight(model, ctl.itf)
    lora_B = [p for n, p in model.named_parameters() if "lora_B" in n]
    base = {k: _eval_nll(ctl, model, t) for k, t in ctl.targets.items()}
    with torch.no_grad():
        W[:, list(ctl.itf.columns)] = 0
    no_backbone = {k: _eval_nll(ctl, model, t) - base[k] for k, t in ctl.targets.items()}
    lora = [k for k, t in ctl.targets.items() if t["interface"] == "lora"]
    backbone = [k for k in ctl.targets if k not in lora]
    recall_after = {k: _eval_recall(ctl, model, ctl.targets[k]) for k in backbone}
    model.load_state_dict(state)
    with torch.no_grad():
        for p in lora_B:
            p.zero_()
    no_lora = {k: _eval_nll(ctl, model, t) - base[k] for k, t in ctl.targets.items()}
    recall_after |= {k: _eval_recall(ctl, model, ctl.targets[k]) for k in lora}
    model.load_state_dict(state)

    def mean(d, ks):
        return sum(d[k] for k in ks) / len(ks)

    assert mean(no_lora, lora) > mean(no_lora, backbone) + 1.0
    assert mean(no_backbone, backbone) > mean(no_backbone, lora) + 1.0
    # every own target's NLL rises, and every one the construction counts as learned is no longer
    # learned after its own interface's removal (recall below the construction's threshold)
    assert min(no_lora[k] for k in lora) > 0 and min(no_backbone[k] for k in backbone) > 0
    learned = {k for k in ctl.targets if ctl.recall[k] >= RECALL_THRESHOLD}
    assert len(learned & set(lora)) >= 0.5 * len(lora)  # not vacuous: the facts-learned gate
    assert len(learned & set(backbone)) >= 0.5 * len(backbone)
    assert {k: recall_after[k] for k in learned if recall_after[k] >= RECALL_THRESHOLD} == {}


def test_construction_passes_its_gates_and_isolates_every_target_at_36(ctl36):
    """What the construction promises at its real size (36 final + 12 calibration targets in one
    theta_0; the rules fixed before measuring, nothing tuned toward them): each interface learns its
    facts, the two hold them about equally strongly, the primary locator chosen on the calibration
    targets localizes every final target, and removing a target's own interface hurts it more than
    removing the other one, per target. Measured (build 0, tiny-qwen2, the earlier machine's
    theta_0): median recall 0.960 (backbone, 18/18 learned) and 0.905 (LoRA, 17/18); primary AUROC
    1.0; own removal hurts more for 36/36 targets, the smallest own increase 2.2 nats; on an AMD
    EPYC's theta_0 (its own MKL branch) for 34/36; it passed on an Intel Xeon's (2026-11-27)."""
    from supportbench.experiments.controlled_decision import (
        auroc,
        choose_primary,
        construction_gates,
    )

    b = ctl36
    assert len(b.targets) == 36 and len(b.calibration) == 12
    assert not set(b.targets) & set(b.calibration)
    assert not {t["attribute"] for t in b.targets.values()} & {
        t["attribute"] for t in b.calibration.values()
    }
    recall = {
        w: [b.recall[k] for k, t in b.targets.items() if t["interface"] == w]
        for w in interfaces.INTERFACES
    }
    primary = choose_primary(b.calibration_aurocs())
    y = [int(t["interface"] == "backbone") for t in b.targets.values()]
    gates = construction_gates(recall, auroc([b.locator_scores[primary][k] for k in b.targets], y))
    assert [g["gate"] for g in gates if not g["passed"]] == [], gates
    model = b._prepared.model
    state = {k: v.clone() for k, v in model.state_dict().items()}
    base = {k: _eval_nll(b, model, t) for k, t in b.targets.items()}
    W = interfaces._base_weight(model, b.itf)
    with torch.no_grad():
        W[:, list(b.itf.columns)] = 0  # the block writes nothing through W
    no_backbone = {k: _eval_nll(b, model, t) - base[k] for k, t in b.targets.items()}
    model.load_state_dict(state)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.zero_()
    no_lora = {k: _eval_nll(b, model, t) - base[k] for k, t in b.targets.items()}
    model.load_state_dict(state)
    removed = {"backbone": no_backbone, "lora": no_lora}
    own = {k: removed[t["interface"]][k] for k, t in b.targets.items()}
    other = {
        k: removed["lora" if t["interface"] == "backbone" else "backbone"][k]
        for k, t in b.targets.items()
    }
    held = [k for k in b.targets if own[k] > other[k]]
    # the construction's isolation gate (bench/controlled_injection.py:
    # isolation_share >= 0.9); measured 36/36 on the earlier machine's
    # theta_0, 34/36 on an AMD EPYC's (its own MKL branch: t12, t33)
    assert len(held) >= 0.9 * len(b.targets), sorted(set(b.targets) - set(held))
    # removing the own interface removes the fact (> 1 nat), for the
    # same share of targets (the earlier machine's theta_0: every
    # target, smallest 2.2 nats; the AMD EPYC's: one target 0.64 nats)
    removes = [k for k in b.targets if own[k] > 1.0]
    assert len(removes) >= 0.9 * len(b.targets), {
        k: round(own[k], 3) for k in set(b.targets) - set(removes)
    }


def test_interface_unlearning_runs_through_the_one_training_loop(ctl, monkeypatch):
    """The controlled interventions train through SupportTrainer (one loop, one schedule); each
    moves only its own interface's coordinates, every other coordinate bitwise unchanged (weight
    decay included)."""
    from supportbench.unlearning.objectives import get_objective
    from supportbench.unlearning.train import SupportTrainer, TrainConfig, UnlearningData

    calls = []
    step = SupportTrainer.train_step
    monkeypatch.setattr(
        SupportTrainer,
        "train_step",
        lambda self: calls.append(type(self.leaves).__name__) or step(self),
    )
    model = ctl._prepared.model
    state = {k: v.clone() for k, v in model.state_dict().items()}
    roles = ctl.roles("t00", 0)
    data = UnlearningData(roles.forget, roles.retain)
    config = TrainConfig(steps=3, lr=1e-2, batch_size=4, weight_decay=0.01)
    full = interfaces._mlp_weights(model, ctl.itf)  # gate, up, down
    g_name, u_name, w_name = (next(n for n, p in model.named_parameters() if p is q) for q in full)
    cols = list(ctl.itf.columns)
    try:
        for which in interfaces.INTERFACES:
            model.load_state_dict(state)
            losses = interfaces.unlearn(
                model, ctl.itf, which, get_objective("graddiff"), data, config
            )
            assert len(losses) == 3
            after = model.state_dict()
            changed = {n for n in after if not torch.equal(after[n], state[n])}
            if which == "backbone":
                assert changed == {g_name, u_name, w_name}
                outside = [
                    c for c in range(after[w_name].shape[1]) if c not in cols
                ]  # every other neuron
                assert torch.equal(after[w_name][:, outside], state[w_name][:, outside])
                assert torch.equal(after[g_name][outside], state[g_name][outside])
                assert torch.equal(after[u_name][outside], state[u_name][outside])
            else:
                assert changed and all("lora_" in n for n in changed)
            assert not any(p.requires_grad for p in model.parameters())  # released for inference
    finally:
        model.load_state_dict(state)
    assert calls == ["InterfaceLeaves"] * 6


def _inputs(b) -> LocatorInputs:
    probes = interfaces.TargetProbes({k: b._tok(b._rows(t, "diag")) for k, t in b.targets.items()})
    return LocatorInputs(
        probes, b._tok(background_subjects(seed=b.build, phrasings=DIAG, extra_attributes=b._extra))
    )


def test_locators_are_outcome_blind_and_leave_theta0_bitwise(ctl):
    """Every registered locator ran once at prepare() from theta_0, the interfaces, the diagnostic
    phrasings and the background subjects; its inputs are typed (evaluation splits and roles are
    refused), it leaves theta_0 bitwise as it found it, and an unlearning run on another model
    object does not move its scores."""
    import copy

    from supportbench.unlearning.objectives import get_objective
    from supportbench.unlearning.train import TrainConfig, UnlearningData

    roles = ctl.roles("t00", 0)
    model = ctl._prepared.model
    with pytest.raises(TypeError, match="diagnostic phrasings"):
        interfaces.TargetProbes({"t00": roles.splits["eval"]["forget"]})
    assert (
        set(ctl.locator_scores)
        == set(list_locators())
        >= {"first_order", "zero_ablation_std", "resample_ablation", "direct_logit_attribution"}
    )
    inputs = _inputs(ctl)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for name in ctl.locator_scores:
        for bad in (roles, roles.splits["eval"]["forget"], {"J": 1.0}):
            with pytest.raises(TypeError, match="reads only theta_0"):
                compute_locator_scores(get_locator(name), model, ctl.itf, bad)
        assert set(ctl.locator_scores[name]) == set(ctl.targets)
        assert (
            compute_locator_scores(get_locator(name), model, ctl.itf, inputs)
            == ctl.locator_scores[name]
        )
        assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items()), name
    other = copy.deepcopy(model)
    interfaces.unlearn(
        other,
        ctl.itf,
        "lora",
        get_objective("graddiff"),
        UnlearningData(roles.forget, roles.retain),
        TrainConfig(steps=2, lr=1e-2, batch_size=4),
    )
    assert locate_all(model, ctl.itf, inputs) == ctl.locator_scores


def test_runs_and_table_from_the_registry(ctl, cache, tmp_path, capsys):
    rc = main(
        [
            "run",
            "--benchmark",
            "controlled",
            "--T",
            "3",
            "--results",
            str(tmp_path),
            "--cache",
            str(cache),
            "--set",
            "benchmark.n_targets=12",
            "--set",
            "benchmark.n_calibration_targets=4",
            "--experiment",
            "ctl",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "24 runs (0 not ok)" in out
    from supportbench._io import read_json_object
    from supportbench.experiments.controlled_decision import (
        choose_lr,
        choose_primary,
        verify_controlled,
    )
    from supportbench.experiments.results import ResultsDir

    (dec_file,) = ResultsDir(
        tmp_path
    ).decision_files()  # frozen before the final runs, from c00..c03 only
    dec = read_json_object(dec_file, ValueError, "decision")
    verify_controlled(dec)
    assert dec["calibration_targets"] == ["c00", "c01", "c02", "c03"]
    assert dec["primary_locator"] == choose_primary(dec["locator_aurocs"]) and set(
        dec["locator_aurocs"]
    ) == set(ctl.locator_scores)
    assert all(
        dec["lr"][m] == choose_lr({float(k): v for k, v in dec["mean_J"][m].items()})
        for m in dec["lr"]
    )
    assert (
        f"primary locator: {dec['primary_locator']}" in out
        and "targets excluded from Table 1" in out
    )
    assert "bounded J (primary)" in out and "summed-NLL J" in out
    for q in (
        "storage AUROC",
        "residualized storage AUROC",
        "correct within-pair storage direction",
        "LoRA intervention wins",
        "storage/best-intervention agreement",
        "LoRA - backbone paired difference",
        "storage score / paired difference corr.",
    ):
        assert q in out
    for name in ctl.locator_scores:  # every locator's localization quantities
        assert any(line.split()[:1] == [name] for line in out.splitlines()), name
    assert "covariate AUROC" in out and "nuisance_nll" in out and "nuisance_tokens" not in out
    # the command prints what the report renders from the registry: the same lines, one code path
    from supportbench.registry.store import connect
    from supportbench.reports.console import controlled_text
    from supportbench.reports.report import report
    from supportbench.reports.tables import Context

    con = connect(ResultsDir(tmp_path).registry, read_only=True)
    text = controlled_text(Context.from_registry(con, "ctl"))
    con.close()
    assert "\n".join(text) in out
    report(ResultsDir(tmp_path).registry, tmp_path / "report", "ctl")
    assert (tmp_path / "report" / "controlled.md").read_text().splitlines()[1:-1] == text
    recs = list(ResultsDir(tmp_path).records())
    assert {r.spec["field"] for r in recs} == set(
        ctl.targets
    )  # no calibration target among the final runs
    for r in recs:  # each interface's frozen lr, the decision's hash
        hp = r.spec["hyperparameters"]
        assert hp["lr"] == dec["lr"][r.spec["method"]] and hp["benchmark.decision"] == dec["hash"]
        assert r.provenance.started_at > dec["frozen_at"]
    comp = recs[0].outcome.components
    assert (
        comp["storage_score"] == comp[f"locator:{dec['primary_locator']}"]
    )  # the frozen primary locator
    assert {f"locator:{n}" for n in ctl.locator_scores} <= set(
        comp
    ) and "nuisance_tokens" not in comp
    assert {"J_bounded", "G_F_bounded", "D_coll_bounded"} <= set(comp)
    assert -1 <= comp["G_F_bounded"] <= 1 and 0 <= comp["D_coll_bounded"] <= 2
    assert comp["J_bounded"] == comp["G_F_bounded"] - comp["D_coll_bounded"]


def test_bad_controlled_input(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    m = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=64,
            hidden_size=96,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
        )
    )
    # d_model 96, d_ff 256: c = r x 352 / 288 neurons is whole for r = 9, 18, 27 (c = 11, 22, 33)
    with pytest.raises(
        SpecError, match=r"rank 4 cannot match.*neurons.*possible ranks: 9, 18, 27, 36, 45, 54, 63$"
    ):
        interfaces.make_interfaces(m, -1, 4)
    itf = interfaces.make_interfaces(m, -1, 9)
    assert len(itf.columns) == 11 and itf.size == itf.lora_size == 9 * 352 == 3 * 11 * 96
    with pytest.raises(ValueError, match="blind pairs"):
        targets(7)
    with pytest.raises(SpecError, match="n_targets"):
        get_benchmark("controlled", cache_dir=tmp_path, n_targets=5)
    with pytest.raises(UnknownNameError, match="controlled interface.*'lroa'.*Did you mean 'lora'"):
        Runner(tmp_path).run(RunSpec("controlled", "t00", "npo", "lroa", model="tiny-qwen2"))
    wrong = tmp_path / "adapter"
    wrong.mkdir()
    (wrong / "adapter_config.json").write_text("{}")
    with pytest.raises(SpecError, match="does not fit the model"):
        interfaces.load_lora(m, wrong, interfaces.make_interfaces(m, -1, 9))


def test_sweep_freezes_the_controlled_decision_before_the_final_runs(ctl, cache, tmp_path):
    """A sweep of the small construction (``ctl``'s: its theta_0 is the cached one, not a third
    built for this test) runs the calibration grid (4 calibration targets x 2 interfaces x 5
    learning rates), freezes the controlled decision, then the final runs, which follow its
    learning rates and pass the audit; a second sweep reuses the decision and skips every run, and
    one by changed code freezes a new decision and reruns the final runs."""
    from supportbench.experiments.plan import ExperimentSpec
    from supportbench.experiments.results import ResultsDir
    from supportbench.harness.executors.local import LocalExecutor
    from supportbench.harness.sweep import run_sweep
    from supportbench.registry.audit import audit
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect

    spec = ExperimentSpec.from_dict(
        {
            "experiment": {
                "name": "ctl-sweep",
                "benchmarks": ["controlled"],
                "model": "tiny-qwen2",
                "fields": ["t00", "t01", "t02", "t03"],
                "objectives": ["npo"],
                "methods": ["backbone", "lora"],
                "dirr_methods": [],
                "T": 2,
                "budget": 0.1,
                "seeds": {"calibration": [], "final": [4099]},
            },
            "hyperparameters": {
                "lr": 0.01,
                "benchmark.n_targets": 12,
                "benchmark.n_calibration_targets": 4,
            },
        }
    )
    res = tmp_path / "res"

    def entries():  # published entries, not another worker's build in progress (``.tmp<pid>``)
        return sorted(p for p in (cache / "controlled").iterdir() if ".tmp" not in p.name)

    built = entries()
    s = run_sweep(spec, res, LocalExecutor(1), cache_dir=str(cache))
    assert entries() == built  # ctl's theta_0, no other built
    assert s.runs == 8 and s.ok == 8 and list(s.decisions) == ["controlled/npo/seed 4099/build 0"]

    # beside them: the claims the sweep registered first (experiments.claims)
    def controlled_decisions():
        return [
            f
            for f in ResultsDir(res).decision_files()
            if '"kind": "controlled"' in Path(f).read_text()
        ]

    decs = controlled_decisions()
    assert (
        len(decs) == 1 and len(list(ResultsDir(res).controlled_calibration.records())) == 4 * 2 * 5
    )
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    rep = audit(con, "ctl-sweep", spec)
    assert rep.ok, rep.text()
    # the decision's lr per interface reached every final run
    lrs = dict(
        con.execute(
            "SELECT method, any_value(json_extract(hyperparameters, '$.lr')::DOUBLE) FROM runs "
            "GROUP BY method"
        ).fetchall()
    )
    dec = con.execute(
        "SELECT content FROM decisions WHERE json_extract_string(content, '$.kind') = 'controlled'"
    ).fetchone()[0]
    import json

    assert lrs == json.loads(dec)["lr"]
    s2 = run_sweep(
        spec, res, LocalExecutor(1), cache_dir=str(cache)
    )  # reuses the decision, skips the runs
    assert (
        s2.skipped == s2.runs == 8
        and s2.decisions == s.decisions
        and len(controlled_decisions()) == 1
    )
    # the decision names the calibration runs it was taken
    # from (run key and code fingerprint of each) ...
    runs = json.loads(dec)["calibration_runs"]
    assert runs == sorted(runs) and len(runs) == 4 * 2 * 5
    assert {r.split(":")[0] for r in runs} == {
        r.run_key for r in ResultsDir(res).controlled_calibration.records()
    }
    # ... so when the code behind them changes, they rerun
    # and a new decision is frozen, never the old reused
    import msgspec

    from supportbench.harness import controlled, fingerprint, runner

    def edited(resolved):
        fp = fingerprint.fingerprint(resolved)
        return msgspec.structs.replace(fp, hash=fp.hash[::-1])

    mp = pytest.MonkeyPatch()
    mp.setattr(controlled, "fingerprint", edited)
    mp.setattr(runner, "fingerprint", edited)
    try:
        s3 = run_sweep(spec, res, LocalExecutor(1), cache_dir=str(cache))
    finally:
        mp.undo()
    assert s3.skipped == 0 and s3.decisions != s.decisions and len(controlled_decisions()) == 2


def test_relearning_attack_after_an_interface_run(ctl, cache, tmp_path):
    """The attack on the controlled separation: the unit is the run's target, probed by its
    evaluation phrasings with its attribute as the target; the attacker trains on background
    subjects that no role reads (no target's name in them); after a LoRA run through the runner
    the record carries LACUNA's counts, and the attack's settings are in the run key."""
    roles = ctl.roles("t00", 0)
    rs = ctl.relearn_set(roles)
    (probe,) = rs.probes
    assert probe.unit == "t00" and probe.target == ctl.targets["t00"]["attribute"]
    assert probe.prompts == tuple(roles.splits["eval"]["forget"].prompts)
    pairs = background_subjects(seed=ctl.build, phrasings=TRAIN, extra_attributes=ctl._extra)
    assert len(rs.train) == len(pairs)
    names = [re.compile(rf"\b{re.escape(t['subject'])}\b") for t in ctl.all_targets.values()]
    assert not [p for p, _ in pairs if any(n.search(p) for n in names)]
    hp = {"benchmark.n_targets": 12, "benchmark.n_calibration_targets": 4}

    def spec(**more):
        return RunSpec(
            "controlled",
            "t00",
            "graddiff",
            "lora",
            model="tiny-qwen2",
            seed=0,
            T=3,
            experiment="relearn",
            hyperparameters={**hp, **more},
        )

    runner = Runner(tmp_path, cache_dir=cache, progress=False)
    plain = runner.run(spec()).record
    rec = runner.run(spec(relearn_steps=2)).record
    assert rec.status == "ok", rec.error
    # the attack comes after the score and the enforcement count: both are the plain run's
    assert rec.outcome.J == plain.outcome.J
    c = dict(rec.outcome.components)
    assert {k: v for k, v in c.items() if k not in RESURFACING} == plain.outcome.components
    assert c["total_forget_people"] == 1 and c["attempts"] == len(probe.prompts)
    assert c["forgotten_by_unlearn"] + c["still_leaking_after_unlearn"] == 1
    assert c["resurfaced_after_relearn"] <= c["forgotten_by_unlearn"]
    assert rec.compute.wall_s["relearn"] > 0
    assert spec(relearn_steps=0).run_key == spec().run_key != rec.run_key
    assert spec(relearn_steps=2, relearn_lr=1e-3).run_key != rec.run_key


def test_relearning_attack_positive_control_resurfaces_a_forgotten_target(ctl):
    """A positive control for the attack's count (the demo's attacks resurface nothing, so a count
    stuck at 0 would go unseen): a target theta_0 states is unlearned by gradient ascent on its own
    training phrasings until no evaluation phrasing's greedy answer holds its attribute; an attacker
    who fine-tunes on those same facts (the strongest attacker, not the benchmark's declared
    background data) brings it back, and ``relearning_attack`` counts it: 1 forgotten, 1 resurfaced,
    100 %. The attack on the declared background data runs on the same unlearned model for
    comparison (its count is whatever it is: only bounded)."""
    from supportbench.unlearning.relearn import RelearnSet, leaked, relearning_attack

    model = ctl._prepared.model
    tok = ctl._prepared.tokenizer
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        stated = [k for k in sorted(ctl.targets) if leaked(model, ctl.relearn_set(ctl.roles(k, 0)))]
        assert stated, "theta_0 states none of its targets: the construction's gate failed"
        unit = stated[0]
        rs = ctl.relearn_set(ctl.roles(unit, 0))
        t = ctl.targets[unit]
        own = tokenize_pairs(tok, t["train"], [t["attribute"]] * len(t["train"]))
        params = list(model.parameters())
        for p in params:
            p.requires_grad_(True)
        opt = torch.optim.Adam(params, lr=1e-3)
        for _ in range(40):  # gradient ascent on the target's own phrasings until forgotten
            if not leaked(model, rs):
                break
            s, n = sequence_nll(model, own)
            (-(s / n).mean()).backward()
            opt.step()
            opt.zero_grad()
        model.eval()
        for p in params:
            p.requires_grad_(False)
        assert not leaked(model, rs), "40 ascent steps did not unlearn the target"
        unlearned = {k: v.clone() for k, v in model.state_dict().items()}
        positive = RelearnSet(own, rs.probes, rs.generate)
        out = relearning_attack(model, positive, steps=30, lr=1e-3, batch_size=4, seed=0)
        assert out["forgotten_by_unlearn"] == 1 and out["still_leaking_after_unlearn"] == 0
        assert out["resurfaced_after_relearn"] == 1 and out["pct_resurfaced_of_forgotten"] == 100.0
        model.load_state_dict(unlearned)
        declared = relearning_attack(model, rs, steps=30, lr=1e-3, batch_size=4, seed=0)
        assert declared["forgotten_by_unlearn"] == 1
        assert declared["resurfaced_after_relearn"] in (0, 1)
    finally:
        model.load_state_dict(state)
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)


def test_interface_runs_draw_a_curve_that_never_changes_the_terminal_run(ctl, cache, tmp_path):
    """A curve for the benchmark's own interventions (issue 35): the runner's step callback goes
    through ``intervene(on_step=...)`` into the interface's trainer; the terminal model and score
    are the plain run's to the bit; a point after every step, J = G_F - D_coll on the slice; with
    curve_metrics the point carries the benchmark's own evaluation of the slice (bounded J)."""

    def spec(**more):
        return RunSpec(
            "controlled", "t02", "npo", "lora", model="tiny-qwen2", seed=0, T=3,
            experiment="curve",
            hyperparameters={
                "benchmark.n_targets": 12, "benchmark.n_calibration_targets": 4, **more
            },
        )  # fmt: skip

    runner = Runner(tmp_path, cache_dir=cache, progress=False)
    plain = runner.run(spec()).record
    curved = runner.run(spec(eval_every=1)).record
    full = runner.run(spec(eval_every=3, curve_metrics=True)).record
    for rec in (plain, curved, full):
        assert rec.status == "ok", rec.error
    assert curved.outcome.J == plain.outcome.J == full.outcome.J
    assert curved.outcome.components == plain.outcome.components
    assert [p.step for p in curved.outcome.curve] == [1, 2, 3] and plain.outcome.curve is None
    for p in curved.outcome.curve:
        assert pytest.approx(p.G_F - p.D_coll, abs=1e-12) == p.J
    assert curved.outcome.curve[0].J != curved.outcome.curve[-1].J  # the model moved
    (last,) = full.outcome.curve
    assert last.step == 3 and pytest.approx(curved.outcome.curve[-1].J, abs=1e-12) == last.J
    assert "J_bounded" in last.components and curved.compute.wall_s["curve"] > 0


def test_interface_runs_carry_enforcement_counts_of_their_own_domain(
    ctl, cache, tmp_path, monkeypatch
):
    """Enforcement on record for the benchmark's own interventions: a LoRA run may change its
    LoRA, a backbone run its block of neurons, nothing else; each record carries the counts (zero
    outside, the domain's size equal to the interface's), and a domain narrower than what the
    intervention trains fails the run by name, unscored."""
    from supportbench.benchmarks.base import BENCHMARKS

    def spec(which):
        return RunSpec(
            "controlled", "t01", "npo", which, model="tiny-qwen2", seed=0, T=3,
            experiment="enforce",
            hyperparameters={"benchmark.n_targets": 12, "benchmark.n_calibration_targets": 4},
        )  # fmt: skip

    runner = Runner(tmp_path / "ok", cache_dir=cache, progress=False)
    for which, size in (("backbone", ctl.itf.size), ("lora", ctl.itf.lora_size)):
        rec = runner.run(spec(which)).record
        assert rec.status == "ok", rec.error
        c = rec.outcome.components
        assert c["changed_outside"] == 0 and c["allowed_scalars"] == size
        assert 0 < c["changed_inside"] <= size
    cls = BENCHMARKS.get("controlled")
    real = cls.allowed

    def narrower(self, model, method):  # the LoRA's A matrix only: its B trains too
        return {k: v for k, v in real(self, model, method).items() if "lora_A" in k}

    monkeypatch.setattr(cls, "allowed", narrower)
    bad = Runner(tmp_path / "bad", cache_dir=cache, progress=False).run(spec("lora")).record
    assert bad.status == "failed" and bad.outcome is None  # refused before it is scored
    assert bad.error.startswith("EnforcementError:") and "lora_B" in bad.error
