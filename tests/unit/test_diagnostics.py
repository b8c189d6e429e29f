import pytest
import torch

from supportbench.methods.base import compute_scores, get_method, list_methods
from supportbench.methods.diagnostics import Diagnostics
from supportbench.unlearning.data import DiagnosticRecords, sequence_nll
from supportbench.unlearning.objectives import get_objective
from supportbench.unlearning.support import discover_geometry


def full_grad(model, params, loss_fn):
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    return torch.autograd.grad(loss_fn(), params)


def reference_intervention_score(model, rec, objective, eps):
    """Eq. 9-10 from separately taken full-batch gradients, column by column."""
    geo = discover_geometry(model)
    params = [t.param for t in geo.tensors]
    obj = get_objective(objective)

    def mean_nll(data):
        s, n = sequence_nll(model, data)
        return s.sum() / n.sum()

    def unl():
        s, n = sequence_nll(model, rec.F)
        rs, rn = sequence_nll(model, rec.R)
        return (
            obj.forget_coef * obj.forget_term(s, n, s.detach())
            + obj.retain_coef * rs.sum() / rn.sum()
        )

    u0 = full_grad(model, params, unl)
    g = {q: full_grad(model, params, lambda q=q: mean_nll(getattr(rec, q))) for q in "FRPN"}
    out = []
    for k, t in enumerate(geo.tensors):
        for j in range(t.n):
            e = {q: -float((g[q][k][:, j].double() * u0[k][:, j].double()).sum()) for q in "FRPN"}
            out.append((e["F"] - max(e["R"], e["P"], 0.0)) / (abs(e["N"]) + eps))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("objective", ["npo", "simnpo", "graddiff"])
def test_intervention_score_matches_equation(tiny_model, diag_records, objective):
    diag = Diagnostics(tiny_model, diag_records, objective, batch_size=3)  # chunked on purpose
    got = compute_scores(get_method("intervention_score", eps=1e-8), diag)
    want = reference_intervention_score(tiny_model, diag_records, objective, 1e-8)
    torch.testing.assert_close(got, want, rtol=2e-4, atol=1e-6)


def test_each_diagnostic_computed_once_for_all_methods(tiny_model, diag_records):
    diag = Diagnostics(tiny_model, diag_records, "npo")
    for name in list_methods():
        compute_scores(get_method(name), diag)
    for name in list_methods():
        compute_scores(get_method(name), diag)
    assert diag.computed and set(diag.computed.values()) == {1}
    assert {"grad:F", "objective_direction", "attribution:corrupted", "random_label_grad:R"} <= set(
        diag.computed
    )


def test_diagnostics_refuse_anything_but_diagnostic_records(tiny_model, tiny_sets):
    with pytest.raises(TypeError, match="only DiagnosticRecords"):
        Diagnostics(tiny_model, tiny_sets, "npo")

    class EvalSplit(type(tiny_sets["forget"])):  # an evaluation split is a different type
        pass

    ev = EvalSplit(
        *[getattr(tiny_sets["forget"], f) for f in ("input_ids", "attention_mask", "labels")]
    )
    with pytest.raises(
        TypeError, match="DiagnosticRecords.F must be a TokenizedSet of diagnostic records"
    ):
        DiagnosticRecords(
            F=ev, R=tiny_sets["retain"], P=tiny_sets["protected"], N=tiny_sets["neutral"]
        )


def test_fisher_and_grad_chunking_is_exact(tiny_model, diag_records):
    """No diagnostic depends on the forward batch size: the Fisher's micro-batch is its own (FILA's
    4)."""
    a = Diagnostics(tiny_model, diag_records, "npo", batch_size=1)
    b = Diagnostics(tiny_model, diag_records, "npo", batch_size=64)
    c = Diagnostics(
        tiny_model, diag_records, "npo", batch_size=3
    )  # micro-batches of 4 straddle batches of 3
    for k in a.role_grad("F"):
        torch.testing.assert_close(a.role_grad("F")[k], b.role_grad("F")[k], rtol=1e-4, atol=1e-7)
        for d in (b, c):
            torch.testing.assert_close(
                a.role_grad("F", "sum")[k], d.role_grad("F", "sum")[k], rtol=1e-4, atol=1e-7
            )
            torch.testing.assert_close(a.fisher("F")[k], d.fisher("F")[k], rtol=1e-4, atol=1e-9)
            torch.testing.assert_close(
                a.random_label_grad("R")[k], d.random_label_grad("R")[k], rtol=1e-4, atol=1e-8
            )
    # the Fisher depends on its micro-batch by definition; with 1 it is sum_i n_i g_i^2 / N
    assert not torch.allclose(a.fisher("F", 1)[k], a.fisher("F", 64)[k])
    assert a.fisher("F")[k] is a.get("fisher:F@4")[k]


def test_attribution_matches_leaf_patching_on_last_layer(tiny_model, diag_records):
    diag = Diagnostics(tiny_model, diag_records, "npo", batch_size=64)
    got = diag.attribution("corrupted")["signed"]
    geo = diag.geometry
    last = geo.tensors[-1]
    mod = dict(tiny_model.named_modules())[last.module_name]
    captured = {}

    def leaf(_m, args):
        h = args[0].detach().requires_grad_(True)
        captured["h"] = h
        return (h,)

    for p in tiny_model.parameters():
        p.requires_grad_(False)
    hd = mod.register_forward_pre_hook(leaf)
    s, _ = sequence_nll(tiny_model, diag_records.F)
    (-s.sum()).backward()
    h_clean, grad = captured["h"].detach(), captured["h"].grad
    with torch.no_grad():
        c = diag.corrupted_inputs("corrupted")
        tiny_model(input_ids=c.input_ids, attention_mask=c.attention_mask)
    hd.remove()
    mask = diag_records.F.attention_mask.bool().unsqueeze(-1)
    want = (((captured["h"].detach() - h_clean) * grad) * mask).sum((0, 1)).double()
    torch.testing.assert_close(got[last.offset : last.offset + last.n], want, rtol=1e-4, atol=1e-6)
    assert not torch.equal(c.input_ids, diag_records.F.input_ids)
    outside = ~diag_records.F.subject_mask
    assert torch.equal(c.input_ids[outside], diag_records.F.input_ids[outside])


def test_counterfactual_swaps_in_another_subject(tiny_model, diag_records):
    diag = Diagnostics(tiny_model, diag_records, "npo")
    cf = diag.corrupted_inputs("counterfactual")
    F = diag_records.F
    assert not torch.equal(cf.input_ids[0][F.subject_mask[0]], F.input_ids[0][F.subject_mask[0]])


@pytest.mark.parametrize("method", ["activation", "activation_down", "storage", "wagle"])
def test_column_with_amplified_neuron_ranks_first(tiny_model, diag_records, method):
    """Scaling up_proj row j by 100 scales neuron j's activation and the gradient of its down-proj
    column."""
    j = 7
    with torch.no_grad():
        tiny_model.model.layers[1].mlp.up_proj.weight[j] *= 100.0
    diag = Diagnostics(tiny_model, diag_records, "npo")
    scores = compute_scores(get_method(method), diag)
    geo = diag.geometry
    assert int(torch.argmax(scores)) == geo.tensors[1].offset + j


def test_counterfactual_borrows_retain_names_when_forget_has_one_subject(
    tiny_tokenizer, tiny_model
):
    from supportbench.unlearning.data import tokenize_pairs

    def make(pairs, subjects):
        return tokenize_pairs(
            tiny_tokenizer,
            [f"Q: {q}\nA: " for q, _ in pairs],
            [a for _, a in pairs],
            subjects=subjects,
        )

    one = [
        ("Where was Ada Quill born?", "Port Varnel."),
        ("What does Ada Quill write?", "Sea novels."),
    ]
    other = [("Which city does Cy Morrow live in?", "Elder Bay.")]
    rec = DiagnosticRecords(
        F=make(one, ["Ada Quill"] * 2),
        R=make(other, ["Cy Morrow"]),
        P=make(other, None),
        N=make(other, None),
    )
    cf = Diagnostics(tiny_model, rec, "npo").corrupted_inputs("counterfactual")
    m = rec.F.subject_mask[0]
    assert not torch.equal(cf.input_ids[0][m], rec.F.input_ids[0][m])
    no_donor = DiagnosticRecords(F=rec.F, R=make(other, None), P=rec.P, N=rec.N)
    with pytest.raises(Exception, match="need a second subject name"):
        Diagnostics(tiny_model, no_donor, "npo").corrupted_inputs("counterfactual")


def _autograd_batches(model, params, data, batch_size):
    """Per-batch gradients of the mean-token answer NLL, the textbook way (parameter .grad): the
    upstream loops (WAGLE's generate_mask.py, FILA's measure_importance.py, KnowUnDo's compute_info)
    at that batch size."""
    out = []
    for b in data.batches(batch_size):
        s, n = sequence_nll(model, b)
        out.append((torch.autograd.grad(s.sum() / n.sum(), params), int(n.sum())))
    return out


def _frozen_except(model, params):
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)


def test_fused_contractions_equal_parameter_gradients(tiny_model, diag_records):
    """mean / per-example sum / Fisher and the random-label gradient, against autograd on the
    weights, each with its upstream's batching: WAGLE batch 1 summed, FILA batch 4, KnowUnDo batch 1
    / dataset length."""
    diag = Diagnostics(tiny_model, diag_records, "npo", batch_size=3)
    diag.prepare(["grad:F", "grad_sum:F", "fisher:F", "random_label_grad:R"])
    geo = diag.geometry
    params = [t.param for t in geo.tensors]
    _frozen_except(tiny_model, params)
    per = _autograd_batches(tiny_model, params, diag_records.F, 1)
    per4 = _autograd_batches(tiny_model, params, diag_records.F, 4)
    total = sum(n for _, n in per)
    for i, t in enumerate(geo.tensors):
        want_mean = sum(g[i] * n for g, n in per) / total
        want_sum = sum(g[i] for g, _ in per)
        want_fisher = sum(n * g[i] ** 2 for g, n in per4) / total
        torch.testing.assert_close(diag.role_grad("F")[t.name], want_mean, rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(
            diag.role_grad("F", "sum")[t.name], want_sum, rtol=1e-4, atol=1e-7
        )
        torch.testing.assert_close(diag.fisher("F")[t.name], want_fisher, rtol=1e-4, atol=1e-9)
    copies = [diag._random_label_copy(diag_records.R, c) for c in range(diag.random_label_copies)]
    examples = [
        (g, n) for copy in copies for g, n in _autograd_batches(tiny_model, params, copy, 1)
    ]
    for i, t in enumerate(geo.tensors):
        want = sum(g[i] for g, _ in examples) / len(examples)  # every example weighs the same
        torch.testing.assert_close(diag.random_label_grad("R")[t.name], want, rtol=1e-4, atol=1e-7)


def test_fused_gradients_on_gpt2_conv1d_layout(tiny_tokenizer, diag_records):
    """GPT-2 stores the down-projection transposed (Conv1D [d_ff, d_model]); the contraction
    follows."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    eos = tiny_tokenizer.eos_token_id
    model = GPT2LMHeadModel(
        GPT2Config(
            n_embd=16,
            n_layer=2,
            n_head=2,
            n_inner=40,
            n_positions=64,
            vocab_size=len(tiny_tokenizer),
            bos_token_id=eos,
            eos_token_id=eos,
        )
    ).eval()
    diag = Diagnostics(model, diag_records, "graddiff", batch_size=3)
    got = diag.objective_direction()
    params = [t.param for t in diag.geometry.tensors]
    _frozen_except(model, params)
    s, n = sequence_nll(model, diag_records.F)
    rs, rn = sequence_nll(model, diag_records.R)
    want = torch.autograd.grad(-s.sum() / n.sum() + rs.sum() / rn.sum(), params)
    for t, w in zip(diag.geometry.tensors, want):
        assert t.axis == 0
        torch.testing.assert_close(got[t.name], w, rtol=1e-4, atol=1e-7)


def test_prepare_runs_each_record_batch_through_the_model_once(tiny_model, diag_records):
    union = sorted({k for m in list_methods() for k in get_method(m).requires})
    shared = Diagnostics(tiny_model, diag_records, "npo", batch_size=2)
    shared.prepare(union)
    batches = lambda data: -(-len(data) // 2)  # noqa: E731
    F, R = diag_records.F, diag_records.R
    want = (
        sum(batches(getattr(diag_records, q)) for q in "FRPN")
        + shared.random_label_copies * (batches(F) + batches(R))
        + 2 * batches(F)
    )  # the corrupted and the counterfactual run of F
    assert shared.passes == want
    for m in list_methods():
        compute_scores(get_method(m), shared)
    assert shared.passes == want  # everything was prepared; scoring runs nothing more
    rows = shared.plan_rows(union)
    assert rows == {
        "backward_rows": len(F)
        + len(R)
        + len(diag_records.P)
        + len(diag_records.N)
        + shared.random_label_copies * (len(F) + len(R)),
        "forward_only_rows": 2 * len(F),
    }
    one_by_one = Diagnostics(tiny_model, diag_records, "npo", batch_size=2)
    for m in list_methods():
        compute_scores(get_method(m), one_by_one)
    assert one_by_one.passes > want  # F is revisited for activations and attribution


def test_only_requested_reductions_are_kept(tiny_model, diag_records):
    """A real model's down-projections are ~1.4e9 scalars: no full-size buffer nobody asked for."""
    diag = Diagnostics(tiny_model, diag_records, "simnpo", batch_size=2)
    diag.prepare(["grad:P", "objective_direction"])
    assert set(diag._cache) == {"grad:P", "objective_direction", "grad:R"}  # u0 = ... + alpha * g_R
    passes = diag.passes
    diag.fisher("P")  # asked later: computed then, on its own
    assert set(diag._cache) == {"grad:P", "objective_direction", "grad:R", "fisher:P@4"}
    assert diag.passes == passes + -(-len(diag_records.P) // 2)


def _per_example(model, params, data):
    return [g for g, _ in _autograd_batches(model, params, data, 1)]


def test_wagle_sums_per_example_gradients_like_its_tofu_configs(tiny_model, diag_records):
    """generate_mask.py at batch size 1: g = sum_i grad(mean-token NLL of example i); |(theta -
    g_r/mu) g_f|."""
    diag = Diagnostics(tiny_model, diag_records, "npo", batch_size=16)
    got = compute_scores(get_method("wagle"), diag)
    geo = diag.geometry
    params = [t.param for t in geo.tensors]
    _frozen_except(tiny_model, params)
    gf = [
        sum(g[i] for g in _per_example(tiny_model, params, diag_records.F))
        for i in range(len(params))
    ]
    gr = [
        sum(g[i] for g in _per_example(tiny_model, params, diag_records.R))
        for i in range(len(params))
    ]
    want = []
    for i, t in enumerate(geo.tensors):
        elem = ((t.param.detach().double() - gr[i].double() / 1e-6) * gf[i].double()).abs()
        want.append(elem.sum(0))
    torch.testing.assert_close(got, torch.cat(want), rtol=1e-4, atol=1e-6)
    other = compute_scores(
        get_method("wagle"), Diagnostics(tiny_model, diag_records, "npo", batch_size=5)
    )
    torch.testing.assert_close(
        got, other, rtol=1e-4, atol=1e-6
    )  # no longer a function of the batch size


def test_memflex_weighs_every_random_label_example_equally(tiny_model, diag_records):
    """KnowUnDo's compute_info: batch size 1, gradients summed and divided by the dataset length."""
    diag = Diagnostics(tiny_model, diag_records, "npo", batch_size=4)
    got = compute_scores(get_method("memflex"), diag)
    geo = diag.geometry
    params = [t.param for t in geo.tensors]
    _frozen_except(tiny_model, params)

    def rl(q):
        data = getattr(diag_records, q)
        ex = [
            g
            for c in range(3)
            for g in _per_example(tiny_model, params, diag._random_label_copy(data, c))
        ]
        return [sum(g[i] for g in ex).double() / len(ex) for i in range(len(params))]

    gu, gr = rl("F"), rl("R")
    dot = torch.cat([(u * r).sum(0) for u, r in zip(gu, gr)])
    nu = torch.cat([u.pow(2).sum(0).sqrt() for u in gu])
    nr = torch.cat([r.pow(2).sum(0).sqrt() for r in gr])
    cos = dot / (nu * nr)
    mag = torch.cat([u.abs().mean(0) for u in gu])
    eligible = (cos < 0.92) & (mag > mag.median())
    want = sorted(range(len(mag)), key=lambda j: (not bool(eligible[j]), -float(mag[j]), j))
    assert torch.argsort(-got, stable=True).tolist() == want
    assert 0 < int(eligible.sum()) < len(mag)  # the eligibility rule is exercised both ways


@pytest.mark.parametrize("objective", ["npo", "graddiff"])
def test_every_method_scores_the_same_fused_or_one_at_a_time(tiny_model, objective):
    """A key's value does not depend on which keys share its pass: every registered method's scores
    from one fused pass equal those from passes taken method by method, releasing keys no later
    method reads (what the runner does when a cell's buffers do not fit the GPU)."""
    from supportbench.unlearning.data import TokenizedSet

    def rows(n, seed):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(3, 300, (n, 12), generator=g)
        labels = ids.clone()
        labels[:, :6] = -100
        subject = torch.zeros_like(ids, dtype=torch.bool)
        subject[:, 2:4] = True
        return TokenizedSet(ids, torch.ones_like(ids), labels, subject)

    recs = DiagnosticRecords(rows(6, 1), rows(5, 2), rows(4, 3), rows(3, 4))
    names = list_methods()
    fused = Diagnostics(tiny_model, recs, objective, batch_size=4)
    fused.prepare(sorted({r for n in names for r in get_method(n).requires}))
    one_by_one = Diagnostics(tiny_model, recs, objective, batch_size=4)
    for i, n in enumerate(names):
        got = compute_scores(get_method(n), one_by_one)
        one_by_one.release(r for later in names[i + 1 :] for r in get_method(later).requires)
        assert torch.equal(got, compute_scores(get_method(n), fused)), n
        assert set(one_by_one._cache) <= {
            k for later in names[i + 1 :] for k in map(_key, get_method(later).requires)
        }
    assert one_by_one.passes > fused.passes


def _key(k):
    from supportbench.methods.diagnostics import _cache_key

    return _cache_key(k)


@pytest.mark.parametrize("objective", ["npo", "simnpo", "graddiff"])
def test_objective_direction_is_the_autograd_gradient_beside_a_role_gradient(
    tiny_model, diag_records, objective
):
    """u0 taken in the same pass as grad:F (the F block then holds both) equals the autograd
    gradient of the objective at theta_0. (SimNPO weighs each row differently unless its sigmoid
    saturates, as it does on this tiny model: the streamed contraction once dropped the per-row term
    beside a role gradient, and only a LACUNA theta_0 showed it; this test does not reach that
    case.)"""
    from supportbench.unlearning.objectives import get_objective

    _direction_is_the_autograd_gradient(tiny_model, diag_records, get_objective(objective))


def _direction_is_the_autograd_gradient(tiny_model, diag_records, obj) -> None:
    """u0, taken in one pass with grad:F, against autograd's gradient of ``obj`` at theta_0."""
    diag = Diagnostics(tiny_model, diag_records, obj, batch_size=3)
    diag.prepare(["objective_direction", "grad:F"])
    got = diag.objective_direction()
    params = [t.param for t in diag.geometry.tensors]
    _frozen_except(tiny_model, params)
    s, n = sequence_nll(tiny_model, diag_records.F)
    rs, rn = sequence_nll(tiny_model, diag_records.R)
    loss = (
        obj.forget_coef * obj.forget_term(s, n, s.detach()) + obj.retain_coef * rs.sum() / rn.sum()
    )
    want = torch.autograd.grad(loss, params)
    for p in tiny_model.parameters():
        p.requires_grad_(False)
    for t, w in zip(diag.geometry.tensors, want):
        torch.testing.assert_close(got[t.name], w, rtol=1e-4, atol=1e-7)


def test_simnpo_direction_with_unequal_row_weights_beside_a_role_gradient(tiny_model, diag_records):
    """The case the test above cannot reach: SimNPO's margin delta set to the forget rows' median
    mean-token NLL and a steep beta, so its sigmoid does not saturate and each row has its own
    weight (checked), while grad:F shares the pass.
    The streamed contraction once dropped this per-row term (found only on LACUNA's theta_0)."""
    s, n = sequence_nll(tiny_model, diag_records.F)
    per_token = (s / n.clamp(min=1)).detach()
    # the random tiny model's rows differ by ~0.02
    # nat/token: a steep sigmoid (beta = 200) spreads them
    obj = get_objective("simnpo", beta=200.0, delta=float(per_token.median()))
    weights = torch.sigmoid(
        -obj.beta * (per_token - obj.delta)
    )  # d loss / d (nll/|y|) per row, up to -2/N
    assert float(weights.max() - weights.min()) > 0.2, weights  # the rows really differ
    _direction_is_the_autograd_gradient(tiny_model, diag_records, obj)
