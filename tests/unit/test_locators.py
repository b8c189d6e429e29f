"""Storage locators of the controlled separation on a tiny Qwen2 with a LoRA: each one's formula
recomputed independently, the model restored bitwise, and outcome-blindness by type (paper §5.2:
"localization is evaluated without access to intervention outcomes")."""

import copy
import inspect
import math

import numpy as np
import pytest
import torch

from supportbench.benchmarks.base import EvalSplit, Outcome, Roles
from supportbench.benchmarks.controlled import interfaces as interfaces
from supportbench.benchmarks.controlled.locators import (
    LOCATORS,
    LocatorInputs,
    compute_locator_scores,
    get_locator,
    list_locators,
    locate_all,
    register_locator,
)
from supportbench.benchmarks.controlled.locators.base import contributions, hooked, standardise
from supportbench.benchmarks.controlled.locators.direct_logit_attribution import (
    final_norm_and_unembedding,
)
from supportbench.errors import LocatorOutputError, UnknownLocatorError
from supportbench.registry import synthetic as syn
from supportbench.unlearning.data import (
    IGNORE,
    DiagnosticRecords,
    TokenizedSet,
    dataset_nll,
    sequence_nll,
)

BUILTIN = ["direct_logit_attribution", "first_order", "resample_ablation", "zero_ablation_std"]
V, L = 40, 9


def _set(rows: list[list[int]], answer: int = 2) -> TokenizedSet:
    ids = torch.tensor(rows)
    labels = ids.clone()
    labels[:, :-answer] = IGNORE  # the last ``answer`` tokens are the answer
    return TokenizedSet(ids, torch.ones_like(ids), labels)


@pytest.fixture(scope="module")
def tiny(tiny_qwen2_lora):
    model, itf = tiny_qwen2_lora(V)  # 4 neurons = rank 3 x (96 + 32) / (3 x 32)
    with torch.no_grad():  # a LoRA that does something, a block that matters
        interfaces.down_proj_module(model, itf).lora_B["default"].weight.normal_(0, 0.5)
        W = interfaces._base_weight(model, itf)
        W[:, list(itf.columns)] *= 8
    model.eval()
    g = torch.Generator().manual_seed(1)
    probes = interfaces.TargetProbes(
        {f"t{k:02d}": _set(torch.randint(4, V, (2, L), generator=g).tolist()) for k in range(6)}
    )
    background = _set(torch.randint(4, V, (5, L), generator=g).tolist())
    return model, itf, LocatorInputs(probes, background)


def _snapshot(model):
    return (
        {k: v.clone() for k, v in model.state_dict().items()},
        [p.requires_grad for p in model.parameters()],
        model.training,
    )


def _mean_nll(model, data) -> float:
    s, n = dataset_nll(model, data)
    return float((s.double() / n.double()).mean())


def test_builtins_registered_with_provenance():
    assert set(BUILTIN) <= set(list_locators())
    for name in BUILTIN:
        loc = get_locator(name)
        assert loc.name == name and loc.provenance
        assert list(inspect.signature(type(loc).locate).parameters) == [
            "self",
            "model",
            "itf",
            "inputs",
        ]
    with pytest.raises(
        UnknownLocatorError,
        match="no storage locator 'zero_ablation'.*Did you mean 'zero_ablation_st",
    ):
        get_locator("zero_ablation")


@pytest.mark.parametrize("name", BUILTIN)
def test_locator_restores_the_model_bitwise(tiny, name):
    model, itf, inputs = tiny
    state, flags, training = _snapshot(model)
    scores = compute_locator_scores(get_locator(name), model, itf, inputs)
    assert set(scores) == set(inputs.targets) and all(math.isfinite(v) for v in scores.values())
    after = model.state_dict()
    assert all(torch.equal(after[k], state[k]) for k in state)
    assert [p.requires_grad for p in model.parameters()] == flags and model.training == training
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    assert compute_locator_scores(get_locator(name), model, itf, inputs) == scores  # deterministic


def test_standardise_is_a_population_z_score():
    z = standardise({"a": 1.0, "b": 2.0, "c": 6.0})
    # mean 3, population std sqrt((4 + 1 + 9) / 3)
    sd = math.sqrt(14 / 3)
    assert z == pytest.approx({"a": -2 / sd, "b": -1 / sd, "c": 3 / sd})
    assert standardise({"a": 2.0, "b": 2.0}) == {"a": 0.0, "b": 0.0}


def test_zero_ablation_matches_zeroed_copies(tiny):
    model, itf, inputs = tiny
    no_b, no_l = copy.deepcopy(model), copy.deepcopy(model)
    with torch.no_grad():
        interfaces._base_weight(no_b, itf)[:, list(itf.columns)] = 0
        interfaces.down_proj_module(no_l, itf).lora_B["default"].weight.zero_()
    e = {
        w: {k: _mean_nll(m, d) - _mean_nll(model, d) for k, d in inputs.probes.sets.items()}
        for w, m in (("backbone", no_b), ("lora", no_l))
    }
    zb, zl = (np.array(list(e[w].values())) for w in ("backbone", "lora"))
    want = (zb - zb.mean()) / zb.std() - (zl - zl.mean()) / zl.std()
    got = get_locator("zero_ablation_std").locate(model, itf, inputs)
    np.testing.assert_allclose([got[k] for k in e["backbone"]], want, rtol=1e-5, atol=1e-6)


def test_resample_ablation_properties(tiny):
    """Patching in the target's own contribution changes nothing; a LoRA with B = 0 writes nothing
    to replace."""
    model, itf, inputs = tiny
    loc = get_locator("resample_ablation")
    t0 = inputs.targets[0]
    own = LocatorInputs(inputs.probes, inputs.probes.sets[t0].take([0]))
    one = interfaces.TargetProbes({t0: inputs.probes.sets[t0].take([0])})
    e = loc.effects(model, itf, LocatorInputs(one, own.background))
    assert e["backbone"][t0] == pytest.approx(0, abs=1e-5) and e["lora"][t0] == pytest.approx(
        0, abs=1e-5
    )
    e = loc.effects(model, itf, inputs)
    # the interfaces do write something: every effect at
    # least 10x the bound a LoRA writing nothing stays under
    assert all(abs(v) > 1e-5 for w in e for v in e[w].values())
    zero_lora = copy.deepcopy(model)
    with torch.no_grad():
        interfaces.down_proj_module(zero_lora, itf).lora_B["default"].weight.zero_()
    assert all(abs(v) < 1e-6 for v in loc.effects(zero_lora, itf, inputs)["lora"].values())


def test_dla_is_the_frozen_norm_logit_change(tiny):
    """DLA_w = centred answer logit minus the same with c_w removed from the down-projection, the
    final norm held at its theta_0 scale: a forward pass through the model's own lm_head, not the
    locator's algebra."""
    model, itf, inputs = tiny
    norm, _ = final_norm_and_unembedding(model)
    module = interfaces.down_proj_module(model, itf)
    eps = norm.variance_epsilon
    got = get_locator("direct_logit_attribution").effects(model, itf, inputs)

    def centred_answer_logit(z, nxt):
        return (z - z.mean(-1, keepdim=True))[:, :-1].gather(-1, nxt.clamp(min=0)[..., None])[
            ..., 0
        ]

    for target, data in inputs.probes.sets.items():
        seen = []
        with torch.no_grad(), hooked(norm, lambda m, a, seen=seen: seen.append(a[0]), pre=True):
            clean = model(input_ids=data.input_ids).logits.double()
        r0 = torch.rsqrt(seen[0].double().pow(2).mean(-1, keepdim=True) + eps)
        nxt = data.labels[:, 1:]
        at = nxt != IGNORE
        for w in ("backbone", "lora"):

            def remove(m, a, out, w=w):
                return out - contributions(model, itf, a[0])[w]

            def freeze(m, a, out, r0=r0):
                return (m.weight.double() * a[0].double() * r0).float()

            with torch.no_grad(), hooked(module, remove), hooked(norm, freeze):
                ablated = model(input_ids=data.input_ids).logits.double()
            want = float(
                (centred_answer_logit(clean, nxt) - centred_answer_logit(ablated, nxt))[at].mean()
            )
            assert got[w][target] == pytest.approx(want, rel=1e-4, abs=1e-5)


def test_first_order_is_the_signed_difference_of_its_terms(tiny):
    from supportbench.benchmarks.controlled.locators.first_order import first_order_terms

    model, itf, inputs = tiny
    terms = first_order_terms(model, itf, inputs.probes)
    got = get_locator("first_order").locate(model, itf, inputs)
    assert got == {k: t["e_backbone"] - t["e_lora"] for k, t in terms.items()}
    # e_lora = |<s B A, g>| with g the gradient w.r.t. the
    # effective weight: recompute through autograd on a copy
    k0 = inputs.targets[0]
    m = copy.deepcopy(model)
    W = interfaces._base_weight(m, itf)
    W.requires_grad_(True)
    with torch.enable_grad():
        nll, n = sequence_nll(m, inputs.probes.sets[k0])
        (g,) = torch.autograd.grad(nll.sum() / n.sum(), W)
    mod = interfaces.down_proj_module(m, itf)
    delta = (
        mod.scaling["default"] * mod.lora_B["default"].weight @ mod.lora_A["default"].weight
    ).detach()
    assert terms[k0]["e_lora"] == pytest.approx(
        float((delta.double() * g.double()).sum().abs()), rel=1e-6
    )
    assert terms[k0]["grad_norm"] == pytest.approx(float(g.double().norm()), rel=1e-6)


# ---- outcome-blind by construction ---------------------------------------------------------------
def _roles(inputs) -> Roles:
    s = inputs.probes.sets[inputs.targets[0]]
    split = {
        "forget": EvalSplit(
            "forget", s, [{"question": "q", "answer": "a"}] * len(s), ["q"] * len(s)
        )
    }
    return Roles("t00", 0, DiagnosticRecords(s, s, s, s), s, s, {"eval": split})


@pytest.mark.parametrize("name", BUILTIN)
def test_a_locator_refuses_everything_but_its_inputs(tiny, name):
    model, itf, inputs = tiny
    roles = _roles(inputs)
    record = syn.record(benchmark="controlled", field="t00", method="lora", J=1.0)
    outcome = Outcome(J=1.0, G_F=1.5, D_coll=0.5, components={"J_bounded": 0.1})
    loc = get_locator(name)
    for bad in (roles.splits["eval"]["forget"], roles, record, outcome.to_dict(), outcome):
        with pytest.raises(TypeError, match="reads only theta_0, the Interfaces and LocatorInputs"):
            loc.locate(model, itf, bad)
        with pytest.raises(TypeError, match="reads only theta_0, the Interfaces and LocatorInputs"):
            compute_locator_scores(loc, model, itf, bad)
    with pytest.raises(TypeError):
        loc.locate(model, itf, inputs, outcome=outcome.to_dict())  # no further inputs exist
    with pytest.raises(TypeError, match="reads only theta_0"):
        loc.locate(roles, itf, inputs)


def test_locator_inputs_hold_only_diagnostic_and_background_phrasings(tiny):
    _, _, inputs = tiny
    roles = _roles(inputs)
    ev = roles.splits["eval"]["forget"]
    with pytest.raises(TypeError, match="TargetProbes"):
        LocatorInputs(
            {"t00": inputs.background}, inputs.background
        )  # a plain dict is not TargetProbes
    with pytest.raises(TypeError, match="background subjects"):
        LocatorInputs(inputs.probes, ev)  # an evaluation split
    with pytest.raises(TypeError, match="background subjects"):
        LocatorInputs(inputs.probes, {"J": 1.0})
    with pytest.raises(TypeError, match="diagnostic phrasings"):
        interfaces.TargetProbes({"t00": ev})
    assert [f.name for f in LocatorInputs.__dataclass_fields__.values()] == ["probes", "background"]


def test_scores_do_not_change_when_another_model_is_unlearned(tiny):
    """Unlearning runs on a different model object (as the runner's interventions do on theta_0's
    copy) leave every locator's scores unchanged, to the bit."""
    from supportbench.unlearning.objectives import get_objective
    from supportbench.unlearning.train import TrainConfig, UnlearningData

    model, itf, inputs = tiny
    before = locate_all(model, itf, inputs, BUILTIN)
    other = copy.deepcopy(model)
    s = inputs.probes.sets[inputs.targets[0]]
    for which in interfaces.INTERFACES:
        interfaces.unlearn(
            other,
            itf,
            which,
            get_objective("graddiff"),
            UnlearningData(s, inputs.background),
            TrainConfig(steps=2, lr=1e-2, batch_size=2),
        )
    assert not all(
        torch.equal(a, b) for a, b in zip(other.state_dict().values(), model.state_dict().values())
    )
    assert locate_all(model, itf, inputs, BUILTIN) == before


# ---- the registry --------------------------------------------------------------------------------
def test_registration_is_checked_and_output_validated(tiny):
    model, itf, inputs = tiny
    with pytest.raises(TypeError, match="has no locate"):
        register_locator("no_locate")(type("NoLocate", (), {"provenance": "x"}))
    with pytest.raises(TypeError, match="provenance"):
        register_locator("no_provenance")(type("NoProv", (), {"locate": lambda self, m, i, x: {}}))

    @register_locator("throwaway_locator")
    class Throwaway:
        provenance = "defined here (test)"
        out: dict = {}

        def locate(self, model, itf, inputs):
            return dict(self.out)

    try:
        Throwaway.out = dict.fromkeys(inputs.targets, 0.5)
        assert (
            locate_all(model, itf, inputs)["throwaway_locator"] == Throwaway.out
        )  # every registered locator
        Throwaway.out = {inputs.targets[0]: 0.5}
        with pytest.raises(LocatorOutputError, match="must return"):
            compute_locator_scores(Throwaway(), model, itf, inputs)
        Throwaway.out = {**dict.fromkeys(inputs.targets, 0.5), inputs.targets[0]: float("nan")}
        with pytest.raises(LocatorOutputError, match="non-finite"):
            compute_locator_scores(Throwaway(), model, itf, inputs)
    finally:
        LOCATORS.unregister("throwaway_locator")


def test_unknown_primary_locator_is_refused_before_any_work(tmp_path):
    from supportbench.benchmarks.base import get_benchmark

    with pytest.raises(UnknownLocatorError, match="Did you mean 'first_order'"):
        get_benchmark("controlled", cache_dir=tmp_path, primary_locator="first_ordr")
    assert (
        get_benchmark(
            "controlled", cache_dir=tmp_path, primary_locator="resample_ablation"
        ).primary_locator
        == "resample_ablation"
    )
