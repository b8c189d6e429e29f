"""``column_grads``: the support's gradients by per-column contractions in hooks, without autograd's
whole-tensor buffers, are the same gradients (to the order of a sum) as the default's; the frozen
coordinates stay bitwise; activation checkpointing and bf16 weights work the same way."""

from __future__ import annotations

import copy

import pytest
import torch

from supportbench.errors import SpecError
from supportbench.unlearning.column_grads import (
    ColumnLeaves,
    remove_column_hooks,
    use_column_grads,
)
from supportbench.unlearning.losses import reference_nll
from supportbench.unlearning.objectives import get_objective
from supportbench.unlearning.support import Support, discover_geometry
from supportbench.unlearning.train import (
    SupportLeaves,
    SupportTrainer,
    TrainConfig,
    UnlearningData,
    set_activation_checkpointing,
)

GROUPS = (1, 5, 40, 47, 50, 70, 95)  # both layers (48 columns each), first and last columns


def _data(model, sets):
    return UnlearningData(sets["forget"], sets["retain"], reference_nll(model, sets["forget"]))


def _grads(model, sets, columns: bool, objective="npo", checkpointing=False):
    """The leaves' gradients after one forward and backward of the objective's loss."""
    if checkpointing:
        set_activation_checkpointing(model, True)
    geo = discover_geometry(model)
    cfg = TrainConfig(steps=1, lr=1e-3, batch_size=3, seed=2)
    tr = SupportTrainer(
        model,
        geo,
        Support.of(geo, GROUPS),
        get_objective(objective),
        _data(model, sets),
        cfg,
        progress=False,
    )
    use_column_grads(tr, columns)
    grads = {}
    orig = tr.optimizer.step

    def capture():  # the gradients the optimizer sees, then its step as usual
        for t, _, leaf in tr.leaves.slots:
            grads[t.name] = leaf.grad.detach().clone()
        orig()

    tr.optimizer.step = capture
    tr.train_step()
    tr.leaves.release()
    return grads, tr


@pytest.mark.parametrize("objective", ["npo", "graddiff", "ga"])
def test_column_grads_equal_tensor_grads(tiny_model, tiny_sets, objective):
    want, _ = _grads(copy.deepcopy(tiny_model), tiny_sets, False, objective)
    got, tr = _grads(copy.deepcopy(tiny_model), tiny_sets, True, objective)
    assert set(got) == set(want) and len(got) == 2
    for name in want:
        assert got[name].abs().max() > 0, name  # a gradient that is there
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-7)
    # no tensor of the model ever required grad or held a gradient buffer
    assert not any(p.requires_grad or p.grad is not None for p in tr.model.parameters())


def test_column_grads_with_checkpointing_and_bf16(tiny_model, tiny_sets):
    want, _ = _grads(copy.deepcopy(tiny_model), tiny_sets, False)
    got, _ = _grads(copy.deepcopy(tiny_model), tiny_sets, True, checkpointing=True)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-7)
    # bf16 weights: the column contraction is fp32, the default's buffer bf16; both approximate
    # the fp32 gradient, the contraction at least as closely
    b_want, _ = _grads(copy.deepcopy(tiny_model).to(torch.bfloat16), tiny_sets, False)
    b_got, _ = _grads(copy.deepcopy(tiny_model).to(torch.bfloat16), tiny_sets, True)
    for name in want:
        err_col = (b_got[name] - want[name]).norm() / want[name].norm()
        err_tensor = (b_want[name] - want[name]).norm() / want[name].norm()
        assert err_col < 0.05 and err_col <= err_tensor * 1.5, (name, err_col, err_tensor)


def test_column_grads_train_the_same_run(tiny_model, tiny_sets):
    """Six steps: the trained support agrees with the default's within float32 summation noise, and
    every coordinate outside the support is bitwise unchanged."""
    out = {}
    for columns in (False, True):
        model = copy.deepcopy(tiny_model)
        geo = discover_geometry(model)
        support = Support.of(geo, GROUPS)
        cfg = TrainConfig(steps=6, lr=5e-3, batch_size=2, seed=3)
        tr = SupportTrainer(
            model, geo, support, get_objective("npo"), _data(model, tiny_sets), cfg, progress=False
        )
        use_column_grads(tr, columns).run()
        out[columns] = (model.state_dict(), tr.losses, support.mask())
    (plain, l0, masks), (cols, l1, _) = out[False], out[True]
    start = tiny_model.state_dict()
    for name, w in cols.items():
        if name in masks:
            m = masks[name]
            assert torch.equal(w[~m], start[name][~m]), name
            assert not torch.equal(w[m], start[name][m]), name  # it trained
            torch.testing.assert_close(w[m], plain[name][m], rtol=1e-4, atol=1e-5)
        else:
            assert torch.equal(w, start[name]), name
    torch.testing.assert_close(torch.tensor(l1), torch.tensor(l0), rtol=1e-4, atol=1e-5)


def test_column_grads_hooks_leave_with_the_trainer(tiny_model, tiny_sets):
    """One set of hooks per model: a second trainer's switch removes the first's; release removes
    them; under no_grad they do nothing."""
    model = copy.deepcopy(tiny_model)
    geo = discover_geometry(model)
    cfg = TrainConfig(steps=1, lr=1e-3, batch_size=2)

    def trainer():
        return SupportTrainer(
            model,
            geo,
            Support.of(geo, GROUPS),
            get_objective("ga"),
            _data(model, tiny_sets),
            cfg,
            progress=False,
        )

    first = use_column_grads(trainer())
    assert isinstance(first.leaves, ColumnLeaves)
    hooked = [m for m in model.modules() if m._forward_hooks]
    assert len(hooked) == 2  # the two down-projections that hold support columns
    assert not any(p.requires_grad for p in model.parameters())
    second = use_column_grads(trainer())
    assert sum(len(m._forward_hooks) for m in model.modules()) == 2  # not 4
    with torch.no_grad():  # inference is untouched
        x = torch.randint(0, 50, (1, 5))
        assert torch.equal(model(x).logits, tiny_model(x).logits)
    second.leaves.release()
    assert not any(m._forward_hooks for m in model.modules())
    use_column_grads(trainer())  # a run that fails mid-training never releases its trainer:
    remove_column_hooks(model)  # the runner's reset to theta_0 takes the hooks off
    assert not any(m._forward_hooks for m in model.modules())
    assert use_column_grads(trainer(), False).leaves.__class__ is SupportLeaves
    with pytest.raises(SpecError, match="applies to a support of the geometry"):
        use_column_grads(first)  # already switched: its leaves are ColumnLeaves


def test_column_grads_refuse_a_geometry_that_is_not_linear(tiny_model, tiny_sets):
    model = copy.deepcopy(tiny_model)
    geo = discover_geometry(model)
    t = geo.tensors[0]
    bad = copy.copy(t)
    object.__setattr__(bad, "module_name", t.module_name.rsplit(".", 1)[0])  # the MLP, not a Linear
    geo.tensors[0] = bad
    tr = SupportTrainer(
        model,
        geo,
        Support.of(geo, GROUPS),
        get_objective("ga"),
        _data(model, tiny_sets),
        TrainConfig(steps=1),
        progress=False,
    )
    with pytest.raises(SpecError, match="column_grads needs the geometry.s tensors to be nn"):
        use_column_grads(tr)


def test_a_trainer_whose_hooks_were_taken_puts_them_back(tiny_model, tiny_sets):
    """DIR-R builds probe trainers on the model of a trainer that trains on after them: each step
    runs under its own trainer's hooks, so the first trainer's later steps are the steps it would
    have taken alone (not steps on zero gradients)."""
    runs = {}
    for interleave in (False, True):
        model = copy.deepcopy(tiny_model)
        geo = discover_geometry(model)
        data = _data(model, tiny_sets)

        def trainer(groups, model=model, geo=geo, data=data):
            cfg = TrainConfig(steps=4, lr=5e-3, batch_size=2, seed=1)
            tr = SupportTrainer(
                model, geo, Support.of(geo, groups), get_objective("npo"), data, cfg, progress=False
            )
            return use_column_grads(tr)

        main = trainer(GROUPS)
        main.run(until=2)
        if interleave:  # another trainer on the same model takes the hooks, and steps once
            before = {k: v.clone() for k, v in model.state_dict().items()}
            other = trainer((2, 60))
            other.train_step()
            assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())
            model.load_state_dict(before)  # back to main's state before main goes on
        main.run(until=4)
        runs[interleave] = (
            list(main.losses),
            {k: v.clone() for k, v in model.state_dict().items()},
        )
    assert runs[True][0][2:] == runs[False][0][2:]
    for k, v in runs[False][1].items():
        torch.testing.assert_close(runs[True][1][k], v, rtol=0, atol=0, msg=k)


def test_a_step_whose_hooks_never_ran_is_refused(tiny_model, tiny_sets):
    model = copy.deepcopy(tiny_model)
    geo = discover_geometry(model)
    tr = SupportTrainer(
        model,
        geo,
        Support.of(geo, GROUPS),
        get_objective("ga"),
        _data(model, tiny_sets),
        TrainConfig(steps=1, batch_size=2),
        progress=False,
    )
    use_column_grads(tr)
    tr.leaves.clear_grads()
    with pytest.raises(RuntimeError, match="no gradient reached the support of .*step would train"):
        tr.leaves.collect_grads()  # no loss ran between: no hook wrote a gradient
    tr.leaves.release()


def test_a_dropped_model_with_hooks_on_it_is_freed(tiny_model, tiny_sets):
    """A run that fails leaves its trainer unreleased; once nothing else holds the model, the hook
    registry must not keep it (at 8B: 16 GiB of GPU memory)."""
    import gc
    import weakref

    model = copy.deepcopy(tiny_model)
    geo = discover_geometry(model)
    tr = SupportTrainer(
        model,
        geo,
        Support.of(geo, GROUPS),
        get_objective("ga"),
        _data(model, tiny_sets),
        TrainConfig(steps=1, batch_size=2),
        progress=False,
    )
    use_column_grads(tr).train_step()
    alive = weakref.ref(model)
    del model, geo, tr
    gc.collect()
    assert alive() is None
