import pytest
import torch

from supportbench.errors import DivergenceError
from supportbench.unlearning.checkpoint import Checkpoint
from supportbench.unlearning.losses import reference_nll
from supportbench.unlearning.objectives import get_objective
from supportbench.unlearning.support import Support, discover_geometry
from supportbench.unlearning.train import SupportTrainer, TrainConfig, UnlearningData, batch_indices

CFG = TrainConfig(steps=6, lr=5e-3, batch_size=2, weight_decay=0.1, warmup_steps=2, seed=3)


def setup(model, sets, objective="npo", groups=(1, 5, 40, 50, 70)):
    geo = discover_geometry(model)
    obj = get_objective(objective)
    data = UnlearningData(sets["forget"], sets["retain"], reference_nll(model, sets["forget"]))
    return geo, obj, data, Support.of(geo, groups)


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("objective", ["npo", "simnpo", "graddiff", "ga"])
def test_frozen_coordinates_bitwise_unchanged(tiny_model, tiny_sets, objective):
    geo, obj, data, support = setup(tiny_model, tiny_sets, objective)
    before = snapshot(tiny_model)
    SupportTrainer(tiny_model, geo, support, obj, data, CFG, progress=False).run()
    after = snapshot(tiny_model)
    masks = support.mask()
    changed_inside = False
    for name, w0 in before.items():
        w1 = after[name]
        if name in masks:
            out = ~masks[name]
            assert torch.equal(w0[out], w1[out]), f"{name}: a frozen coordinate moved"
            changed_inside |= not torch.equal(w0[masks[name]], w1[masks[name]])
        else:
            assert torch.equal(w0, w1), f"{name}: a non-geometry tensor moved"
    assert changed_inside, "the support itself must be updated"


def test_only_geometry_tensors_require_grad(tiny_model, tiny_sets):
    geo, obj, data, support = setup(tiny_model, tiny_sets)
    SupportTrainer(tiny_model, geo, support, obj, data, CFG, progress=False)
    grads = {n for n, p in tiny_model.named_parameters() if p.requires_grad}
    assert grads <= set(geo.by_name) and grads


def test_minibatches_are_pure_function_of_seed():
    a = [batch_indices(7, 3, k, seed=5).tolist() for k in range(10)]
    b = [batch_indices(7, 3, k, seed=5).tolist() for k in range(10)]
    c = [batch_indices(7, 3, k, seed=6).tolist() for k in range(10)]
    assert a == b and a != c
    # each epoch is a permutation: first 7 draws cover all indices
    flat = [i for batch in a for i in batch]
    assert sorted(flat[:7]) == list(range(7))


def test_restore_and_continue_is_bitwise(tiny_model, tiny_sets, tmp_path):
    geo, obj, data, support = setup(tiny_model, tiny_sets)
    theta0 = snapshot(tiny_model)
    tr = SupportTrainer(tiny_model, geo, support, obj, data, CFG, progress=False)
    tr.run()
    uninterrupted, losses = snapshot(tiny_model), list(tr.losses)

    tiny_model.load_state_dict(theta0)
    tr = SupportTrainer(tiny_model, geo, support, obj, data, CFG, progress=False)
    tr.run(until=3)
    tr.checkpoint().save(tmp_path / "c3")
    torch.manual_seed(999)  # disturb global RNG and weights: restore must undo both
    with torch.no_grad():
        geo.tensors[0].param.add_(1.0)
    ck = Checkpoint.load(tmp_path / "c3")
    tr2 = SupportTrainer.restore(tiny_model, geo, ck, obj, data, CFG, progress=False)
    rest = tr2.run()
    for k, v in uninterrupted.items():
        assert torch.equal(v, tiny_model.state_dict()[k]), k
    assert losses[3:] == rest


def test_branches_are_independent(tiny_model, tiny_sets):
    geo, obj, data, support = setup(tiny_model, tiny_sets)
    tr = SupportTrainer(tiny_model, geo, support, obj, data, CFG, progress=False)
    tr.run(until=2)
    ck = tr.checkpoint()
    SupportTrainer.restore(tiny_model, geo, ck, obj, data, CFG, progress=False).run()
    a = snapshot(tiny_model)
    other = Support.of(geo, (1, 5, 40, 50, 71))
    SupportTrainer.restore(tiny_model, geo, ck, obj, data, CFG, support=other, progress=False).run()
    SupportTrainer.restore(tiny_model, geo, ck, obj, data, CFG, progress=False).run()
    b = snapshot(tiny_model)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoint_detects_corruption(tiny_model, tiny_sets, tmp_path):
    geo, obj, data, support = setup(tiny_model, tiny_sets)
    tr = SupportTrainer(tiny_model, geo, support, obj, data, CFG, progress=False)
    tr.run(until=1)
    tr.checkpoint().save(tmp_path / "c")
    p = tmp_path / "c.safetensors"
    raw = bytearray(p.read_bytes())
    raw[-1] ^= 0xFF
    p.write_bytes(bytes(raw))
    with pytest.raises(Exception, match="sha256"):
        Checkpoint.load(tmp_path / "c")


def test_nonfinite_loss_stops_with_step(tiny_model, tiny_sets):
    geo, obj, data, support = setup(tiny_model, tiny_sets, "ga")
    calls = {"n": 0}

    class Exploding(type(obj)):
        def loss(self, *a, **k):
            calls["n"] += 1
            value = super().loss(*a, **k)
            return value * float("nan") if calls["n"] == 3 else value

    bad = Exploding(**{**obj.hyperparameters(), "name": "ga"})
    before = geo.tensors[0].param.detach().clone()
    tr = SupportTrainer(tiny_model, geo, support, bad, data, CFG, progress=False)
    with pytest.raises(DivergenceError, match=r"non-finite loss nan at step 2") as err:
        tr.run()
    assert err.value.step == 2 and tr.step == 2  # the failing step applied no update
    assert not torch.equal(before, geo.tensors[0].param)  # the two good steps did


def test_masked_injection_never_moves_a_coordinate_outside_the_batchs_group(tiny_model, tiny_sets):
    """LACUNA's masked loop, exact: in a batch of group g a scalar outside g's mask keeps its value
    bitwise, although neutral batches before it gave it Adam momentum and weight decay is on
    (upstream only masks the gradient, so both would move it). Observed after every step, over a
    seeded random group sequence."""
    from supportbench.unlearning.train import FinetuneConfig, _fit

    data = tiny_sets["forget"]
    gen = torch.Generator().manual_seed(0)
    named = dict(tiny_model.named_parameters())
    masks = {
        n: (torch.randint(0, 4, p.shape, generator=gen, dtype=torch.int32))
        for n, p in named.items()
        if p.ndim == 2
    }  # bits 0 and 1: groups 0 and 1; 1-D tensors have no entry (never move in a group)
    order = [-1, -1, 0, 1, -1, 1, 0, 0, -1, 1]
    idx = torch.arange(min(2, len(data)))
    seen = []

    def batches():
        for grp in order:
            seen.append(
                {n: p.detach().clone() for n, p in named.items()}
            )  # the state before this step
            yield grp, idx
        seen.append({n: p.detach().clone() for n, p in named.items()})

    cfg = FinetuneConfig(epochs=1, lr=1e-2, batch_size=2, weight_decay=0.1, warmup_frac=0.1, seed=0)
    _fit(tiny_model, data, batches(), len(order), masks, cfg, False, "test")
    moved_inside = False
    for k, grp in enumerate(order):
        before, after = seen[k], seen[k + 1]
        for n in named:
            if grp < 0:
                continue
            inside = (
                ((masks[n] >> grp) & 1).bool()
                if n in masks
                else torch.zeros_like(before[n], dtype=torch.bool)
            )
            assert torch.equal(before[n][~inside], after[n][~inside]), (
                f"step {k} (group {grp}): {n} moved outside"
            )
            moved_inside |= not torch.equal(before[n][inside], after[n][inside])
    assert moved_inside, "a group's own scalars must be trained"
    assert any(
        not torch.equal(seen[0][n], seen[2][n]) for n in named if n not in masks
    )  # neutral: everything


def _group_masks(model, n_groups=3, seed=0):
    """Disjoint element masks: each 2-D scalar owned by one group (bit g) or by none (0)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for n, p in model.named_parameters():
        if p.ndim == 2:
            k = torch.randint(0, n_groups + 1, p.shape, generator=gen)
            out[n] = torch.where(
                k < n_groups, torch.tensor(1, dtype=torch.int32) << k.int(), 0
            ).int()
    return out


def test_group_dropout_trains_with_other_groups_at_theta_pre_and_unowned_scalars_never_move(
    tiny_model, tiny_sets
):
    """The isolation options of LACUNA's injection (docs/benchmarks.md): in a batch of group g each
    dropped group's scalars sit at theta_pre for that step, and are back afterwards (so theta_0
    keeps every delta); with unowned_frozen a scalar no group owns (and a tensor without a mask)
    never moves, neutral batches included. The coins are a pure function of the seed."""
    from supportbench.unlearning import train as train_module

    data = tiny_sets["forget"]
    masks = _group_masks(tiny_model)
    start = snapshot(tiny_model)
    named = dict(tiny_model.named_parameters())
    groups = torch.tensor([i % 4 - 1 for i in range(len(data))])  # groups -1 (neutral), 0, 1, 2
    cfg = train_module.FinetuneConfig(
        epochs=3, lr=1e-2, batch_size=2, weight_decay=0.1, warmup_frac=0.1, seed=0
    )
    during, real = [], train_module._with_group_dropout

    def spy(model, batches, masks_, n_groups, p, seed):  # the state each step sees
        for grp, idx in real(model, batches, masks_, n_groups, p, seed):
            during.append((grp, {n: q.detach().clone() for n, q in named.items()}))
            yield grp, idx

    train_module._with_group_dropout = spy
    try:
        train_module.masked_finetune(
            tiny_model,
            data,
            groups,
            masks,
            cfg,
            progress=False,
            group_dropout=0.5,
            unowned_frozen=True,
            dropout_seed=7,
        )
    finally:
        train_module._with_group_dropout = real
    dropped_seen = 0
    for k, (grp, state) in enumerate(during):
        if grp >= 3 or k == 0:
            continue
        prev = during[k - 1][1]
        for h in range(3):
            if h == grp:
                continue
            own = {n: ((m >> h) & 1).bool() for n, m in masks.items()}
            at_pre = all(torch.equal(state[n][own[n]], start[n][own[n]]) for n in masks)
            moved_before = any(not torch.equal(prev[n][own[n]], start[n][own[n]]) for n in masks)
            dropped_seen += (
                at_pre and moved_before
            )  # a group that had a delta, set to theta_pre for g's step
    assert dropped_seen > 0, "no step saw another group's delta dropped"
    final = snapshot(tiny_model)
    for n, q in named.items():
        unowned = (masks[n] == 0) if n in masks else torch.ones_like(q, dtype=torch.bool)
        assert torch.equal(final[n][unowned], start[n][unowned]), f"{n}: an unowned scalar moved"
    assert any(not torch.equal(final[n], start[n]) for n in masks)


def test_group_dropout_is_a_pure_function_of_its_seed(tiny_model, tiny_sets):
    import copy

    from supportbench.unlearning.train import FinetuneConfig, masked_finetune

    data = tiny_sets["forget"]
    masks = _group_masks(tiny_model)
    groups = torch.tensor([i % 3 for i in range(len(data))])
    cfg = FinetuneConfig(epochs=2, lr=1e-2, batch_size=2, weight_decay=0.1, warmup_frac=0.1, seed=0)

    def train(p, seed):
        m = copy.deepcopy(tiny_model)
        masked_finetune(
            m, data, groups, masks, cfg, progress=False, group_dropout=p, dropout_seed=seed
        )
        return snapshot(m)

    a, b, c, none = train(0.5, 1), train(0.5, 1), train(0.5, 2), train(0.0, 1)
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert any(not torch.equal(a[n], c[n]) for n in a) and any(
        not torch.equal(a[n], none[n]) for n in a
    )


@pytest.mark.parametrize("p", [-0.1, 1.0, float("nan")])
def test_group_dropout_out_of_range_is_refused(tiny_model, tiny_sets, p):
    from supportbench.errors import SpecError
    from supportbench.unlearning.train import FinetuneConfig, masked_finetune

    data = tiny_sets["forget"]
    with pytest.raises(SpecError, match="group_dropout"):
        masked_finetune(
            tiny_model,
            data,
            torch.zeros(len(data), dtype=torch.long),
            {},
            FinetuneConfig(epochs=1),
            progress=False,
            group_dropout=p,
        )


def test_group_dropout_puts_every_dropped_delta_back_after_the_step(tiny_model):
    """Driven by hand: each "step" adds 1 to the current group's own scalars only. A dropped group's
    scalars sit at theta_pre during another group's step and get their delta back afterwards, so at
    the end every group's scalars are theta_pre + the number of its own steps (a lost put-back
    leaves them short)."""
    from supportbench.unlearning.train import _with_group_dropout

    masks = _group_masks(tiny_model)
    named = dict(tiny_model.named_parameters())
    start = {n: q.detach().clone() for n, q in named.items()}
    own = {h: {n: ((m >> h) & 1).bool() for n, m in masks.items()} for h in range(3)}
    order = [0, 1, 2, 0, 0, 1, 2, 2, 1, 0, -1, 1, 2]
    done = {0: 0, 1: 0, 2: 0}  # steps each group has had so far
    drops = 0
    with torch.no_grad():
        for grp, _ in _with_group_dropout(
            tiny_model, [(g, None) for g in order], masks, 3, 0.6, seed=5
        ):
            for h in range(
                3
            ):  # another group with a delta, sitting at theta_pre for this step: dropped
                if (
                    h != grp
                    and grp >= 0
                    and done[h]
                    and all(torch.equal(named[n][own[h][n]], start[n][own[h][n]]) for n in masks)
                ):
                    drops += 1
            if grp >= 0:
                for n in masks:
                    named[n][own[grp][n]] += 1.0
                done[grp] += 1
    for h in range(3):
        for n in masks:
            want = start[n][own[h][n]] + order.count(h)
            assert torch.allclose(named[n][own[h][n]], want, atol=1e-5), (
                f"group {h}'s delta in {n} was not put back"
            )
    assert drops > 0, "no step dropped another group's delta"
