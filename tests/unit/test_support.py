import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from supportbench.errors import BudgetError, GeometryError
from supportbench.unlearning.support import Support, discover_geometry, pack, rank, select


def test_llama_geometry_is_down_proj_columns(tiny_model):
    geo = discover_geometry(tiny_model)
    names = [t.name for t in geo.tensors]
    assert names == [f"model.layers.{i}.mlp.down_proj.weight" for i in range(2)]
    assert geo.n_groups == 2 * 48 and set(geo.costs.tolist()) == {32}
    # group j of a Linear down_proj is column j: its mask covers W[:, j] only
    s = Support.of(geo, [3, 48 + 5])
    m = s.mask()
    w0 = m["model.layers.0.mlp.down_proj.weight"]
    assert w0[:, 3].all() and w0.sum() == 32
    assert m["model.layers.1.mlp.down_proj.weight"][:, 5].all()
    assert s.cost == 64


def test_gpt2_conv1d_geometry_is_transposed():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(
        GPT2Config(n_embd=16, n_layer=2, n_head=2, n_inner=40, vocab_size=50, n_positions=32)
    )
    geo = discover_geometry(model)
    assert [t.name for t in geo.tensors] == [
        "transformer.h.0.mlp.c_proj.weight",
        "transformer.h.1.mlp.c_proj.weight",
    ]
    t = geo.tensors[0]
    assert t.axis == 0 and t.param.shape == (40, 16) and t.n == 40 and t.group_cost == 16
    m = Support.of(geo, [7]).mask()["transformer.h.0.mlp.c_proj.weight"]
    assert m[7, :].all() and m.sum() == 16


def test_neox_geometry():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=24,
        vocab_size=50,
        max_position_embeddings=32,
    )
    geo = discover_geometry(GPTNeoXForCausalLM(cfg))
    assert geo.tensors[0].name.endswith("mlp.dense_4h_to_h.weight") and geo.n_groups == 24


def test_model_without_down_proj_names_modules_found():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    with pytest.raises(
        GeometryError, match=r"no MLP down-projection.*Linear/Conv1D modules present: 0"
    ):
        discover_geometry(model)


def test_rank_breaks_ties_by_group_id():
    assert rank(torch.tensor([1.0, 3.0, 3.0, 0.5, 3.0])).tolist() == [1, 2, 4, 0, 3]


def test_equal_cost_select_is_top_prefix(tiny_model):
    geo = discover_geometry(tiny_model)
    scores = torch.arange(geo.n_groups, dtype=torch.float64)
    s = select(scores, budget=32 * 5 + 7, geometry=geo)  # 5 whole columns fit
    assert s.groups == tuple(range(geo.n_groups - 5, geo.n_groups)) and s.cost == 160


@pytest.mark.parametrize("budget", [0, -3])
def test_nonpositive_budget(budget):
    with pytest.raises(BudgetError, match="positive"):
        pack(torch.ones(3), torch.ones(3, dtype=torch.long), budget)


def test_budget_above_total():
    with pytest.raises(BudgetError, match="exceeds the total editable cost 6"):
        pack(torch.ones(3), torch.full((3,), 2), 7)


def test_nan_scores_rejected():
    with pytest.raises(ValueError, match="NaN"):
        pack(torch.tensor([1.0, float("nan")]), torch.ones(2, dtype=torch.long), 1)


def test_heterogeneous_packing_skips_what_does_not_fit():
    scores = torch.tensor([5.0, 4.0, 3.0, 2.0])
    costs = torch.tensor([6, 5, 3, 1])
    # 6 fits (left 4); 5 does not; 3 fits (left 1); 1 fits (left 0)
    assert pack(scores, costs, 10) == [0, 2, 3]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-10, 10, allow_nan=False), st.integers(1, 20)), min_size=1, max_size=40
    ),
    st.data(),
)
def test_packing_never_over_budget_and_keeps_top_scores(items, data):
    scores = torch.tensor([s for s, _ in items], dtype=torch.float64)
    costs = torch.tensor([c for _, c in items])
    budget = data.draw(st.integers(int(costs.min()), int(costs.sum())))
    chosen = pack(scores, costs, budget)
    assert int(costs[chosen].sum()) <= budget
    assert chosen, "the best-ranked group that fits is always taken"
    # greedy rule: every group ranked above a chosen one was skipped only because it did not fit
    order = rank(scores).tolist()
    left = budget
    for g in order:
        if g in chosen:
            left -= int(costs[g])
        else:
            assert int(costs[g]) > left
    if bool((costs == costs[0]).all()):
        assert sorted(chosen) == sorted(order[: budget // int(costs[0])])
