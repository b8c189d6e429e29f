"""The controlled separation end to end at mini size: equal interfaces that really hold their facts,
outcome-blind storage locators, one record per (target, interface), and Table 1 from the registry."""

import pytest
import torch

from supportbench.benchmarks.base import get_benchmark
from supportbench.benchmarks.controlled import interfaces as I
from supportbench.benchmarks.controlled.generator import DIAG, background_subjects, targets
from supportbench.benchmarks.controlled.locators import (
    LocatorInputs,
    compute_locator_scores,
    get_locator,
    list_locators,
    locate_all,
)
from supportbench.cli import main
from supportbench.errors import SpecError, UnknownNameError
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner
from supportbench.unlearning.data import dataset_nll, tokenize_pairs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ctl(cache):
    b = get_benchmark("controlled", cache_dir=cache, progress=False, n_targets=12)
    b.prepare("tiny-qwen2")
    return b


def _eval_nll(b, model, t) -> float:
    data = tokenize_pairs(b._prepared.tokenizer, t["eval"], [t["attribute"]] * len(t["eval"]))
    s, n = dataset_nll(model, data)
    return float((s / n).mean())


def test_interfaces_have_equal_editable_size(ctl):
    itf = ctl.itf
    lora = sum(p.numel() for p in I._lora_params(ctl._prepared.model, itf))
    assert itf.size == itf.lora_size == lora == len(itf.columns) * itf.d_model


def test_each_interface_holds_its_own_targets(ctl):
    """Zeroing a target's injecting interface raises its NLL more than zeroing the other interface."""
    model = ctl._prepared.model
    state = {k: v.clone() for k, v in model.state_dict().items()}
    W = I._base_weight(model, ctl.itf)
    lora_B = [p for n, p in model.named_parameters() if "lora_B" in n]
    base = {k: _eval_nll(ctl, model, t) for k, t in ctl.targets.items()}
    with torch.no_grad():
        W[:, list(ctl.itf.columns)] = 0
    no_backbone = {k: _eval_nll(ctl, model, t) for k, t in ctl.targets.items()}
    model.load_state_dict(state)
    with torch.no_grad():
        for p in lora_B:
            p.zero_()
    no_lora = {k: _eval_nll(ctl, model, t) for k, t in ctl.targets.items()}
    model.load_state_dict(state)
    held = 0
    for k, t in ctl.targets.items():
        own, other = (no_backbone, no_lora) if t["interface"] == "backbone" else (no_lora, no_backbone)
        held += own[k] - base[k] > other[k] - base[k]
    assert held >= 0.9 * len(ctl.targets), held
    lora_targets = [k for k, t in ctl.targets.items() if t["interface"] == "lora"]
    assert min(no_lora[k] - base[k] for k in lora_targets) > 1.0     # removing the LoRA removes its facts


def test_interface_unlearning_runs_through_the_one_training_loop(ctl, monkeypatch):
    """The controlled interventions train through SupportTrainer (one loop, one schedule); each moves only
    its own interface's coordinates, every other coordinate bitwise unchanged (weight decay included)."""
    from supportbench.unlearning.objectives import get_objective
    from supportbench.unlearning.train import SupportTrainer, TrainConfig, UnlearningData

    calls = []
    step = SupportTrainer.train_step
    monkeypatch.setattr(SupportTrainer, "train_step",
                        lambda self: calls.append(type(self.leaves).__name__) or step(self))
    model = ctl._prepared.model
    state = {k: v.clone() for k, v in model.state_dict().items()}
    roles = ctl.roles("t00", 0)
    data = UnlearningData(roles.forget, roles.retain)
    config = TrainConfig(steps=3, lr=1e-2, batch_size=4, weight_decay=0.01)
    w_name = next(n for n, p in model.named_parameters() if p is I._base_weight(model, ctl.itf))
    cols = list(ctl.itf.columns)
    try:
        for which in I.INTERFACES:
            model.load_state_dict(state)
            losses = I.unlearn(model, ctl.itf, which, get_objective("graddiff"), data, config)
            assert len(losses) == 3
            after = model.state_dict()
            changed = {n for n in after if not torch.equal(after[n], state[n])}
            if which == "backbone":
                assert changed == {w_name}
                outside = [c for c in range(after[w_name].shape[1]) if c not in cols]
                assert torch.equal(after[w_name][:, outside], state[w_name][:, outside])
            else:
                assert changed and all("lora_" in n for n in changed)
            assert not any(p.requires_grad for p in model.parameters())  # released for inference
    finally:
        model.load_state_dict(state)
    assert calls == ["InterfaceLeaves"] * 6


def _inputs(b) -> LocatorInputs:
    probes = I.TargetProbes({k: b._tok(b._rows(t, "diag")) for k, t in b.targets.items()})
    return LocatorInputs(probes, b._tok(background_subjects(seed=b.seed, phrasings=DIAG)))


def test_locators_are_outcome_blind_and_leave_theta0_bitwise(ctl):
    """Every registered locator ran once at prepare() from theta_0, the interfaces, the diagnostic phrasings
    and the background subjects; its inputs are typed (evaluation splits and roles are refused), it leaves
    theta_0 bitwise as it found it, and an unlearning run on another model object does not move its scores."""
    import copy

    from supportbench.unlearning.objectives import get_objective
    from supportbench.unlearning.train import TrainConfig, UnlearningData

    roles = ctl.roles("t00", 0)
    model = ctl._prepared.model
    with pytest.raises(TypeError, match="diagnostic phrasings"):
        I.TargetProbes({"t00": roles.splits["eval"]["forget"]})
    assert set(ctl.locator_scores) == set(list_locators()) >= {"first_order", "zero_ablation_std",
                                                               "resample_ablation", "direct_logit_attribution"}
    inputs = _inputs(ctl)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for name in ctl.locator_scores:
        for bad in (roles, roles.splits["eval"]["forget"], {"J": 1.0}):
            with pytest.raises(TypeError, match="reads only theta_0"):
                compute_locator_scores(get_locator(name), model, ctl.itf, bad)
        assert set(ctl.locator_scores[name]) == set(ctl.targets)
        assert compute_locator_scores(get_locator(name), model, ctl.itf, inputs) == ctl.locator_scores[name]
        assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items()), name
    other = copy.deepcopy(model)
    I.unlearn(other, ctl.itf, "lora", get_objective("graddiff"), UnlearningData(roles.forget, roles.retain),
              TrainConfig(steps=2, lr=1e-2, batch_size=4))
    assert locate_all(model, ctl.itf, inputs) == ctl.locator_scores


def test_runs_and_table_from_the_registry(ctl, cache, tmp_path, capsys):
    rc = main(["run", "--benchmark", "controlled", "--T", "3", "--results", str(tmp_path), "--cache", str(cache),
               "--set", "benchmark.n_targets=12", "--experiment", "ctl"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "24 runs (0 not ok)" in out
    for q in ("storage AUROC", "residualized storage AUROC", "correct within-pair storage direction",
              "LoRA intervention wins", "storage/best-intervention agreement", "LoRA - backbone paired difference",
              "storage score / paired difference corr."):
        assert q in out
    assert "/6" in out and "/12" in out                          # pairs counted per pair, wins per target
    for name in ctl.locator_scores:                              # every locator's localization quantities
        assert any(line.split()[:1] == [name] for line in out.splitlines()), name
    assert "covariate AUROC" in out and "nuisance_nll" in out and "nuisance_tokens" not in out
    from supportbench.experiments.results import ResultsDir

    recs = list(ResultsDir(tmp_path).records())
    comp = recs[0].outcome.components
    assert comp["storage_score"] == comp["locator:first_order"]   # the primary locator, by default
    assert {f"locator:{n}" for n in ctl.locator_scores} <= set(comp) and "nuisance_tokens" not in comp
    assert {"J_bounded", "G_F_bounded", "D_coll_bounded"} <= set(comp)
    assert -1 <= comp["G_F_bounded"] <= 1 and 0 <= comp["D_coll_bounded"] <= 2
    assert comp["J_bounded"] == comp["G_F_bounded"] - comp["D_coll_bounded"]


def test_bad_controlled_input(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    m = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=96, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=4))
    with pytest.raises(SpecError, match=r"rank 4 cannot match.*possible ranks: 3, 6, 9"):
        I.make_interfaces(m, -1, 4)
    assert I.make_interfaces(m, -1, 3).size == I.make_interfaces(m, -1, 3).lora_size
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
        I.load_lora(m, wrong, I.make_interfaces(m, -1, 3))
