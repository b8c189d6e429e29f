"""Mini LACUNA end to end: the masked injection is real, precision tells oracle from random, runs
record it."""

import pytest
import torch

from supportbench.benchmarks.base import get_benchmark
from supportbench.benchmarks.lacuna.reader import LacunaFormatError, bits_set
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner
from supportbench.unlearning.data import dataset_nll
from supportbench.unlearning.models import load_model
from supportbench.unlearning.relearn import leaked, relearning_attack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lacuna(cache):
    b = get_benchmark("lacuna", cache_dir=cache, progress=False, people=12)
    b.prepare("tiny-olmo3")
    return b


def _theta0(b):
    """A fresh copy of theta_0 (the tests mutate it; the prepared model and the cache stay
    untouched)."""
    return load_model(b._prepared.path, device=b.device)[0]


def _rows_of_group(b, g):
    return [r for f in b.FIELDS for r in b.rows(f, "full") if r["group_id"] == g]


def _mean_nll(model, b, rows):
    s, n = dataset_nll(model, b._tok(rows))
    return float((s / n).mean())


def test_masked_injection_is_real(lacuna):
    """theta_pre does not know the facts; theta_0 does; restoring group 0's masked scalars to their
    pre-injection values removes group 0's facts, and group 0's the most. Full isolation (every
    group's ratio < 0.1) is asserted at the demo's size in test_lacuna_isolation.py; this fixture is
    smaller."""
    model, pre = _theta0(lacuna), lacuna.theta_pre()
    groups = {g: _rows_of_group(lacuna, g) for g in range(6)}
    before = {g: _mean_nll(model, lacuna, rows) for g, rows in groups.items()}
    assert max(before.values()) < 0.5  # every group memorised
    assert (
        min(_mean_nll(pre, lacuna, rows) for rows in groups.values()) > 2.0
    )  # not before injection
    pre_params = dict(pre.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            sel = bits_set(lacuna._mask[name], 1 << 0).view_as(p)
            p[sel] = pre_params[name][sel]
    after = {g: _mean_nll(model, lacuna, rows) for g, rows in groups.items()}
    assert after[0] > before[0] + 2.0, (before, after)  # group 0's facts are gone
    assert after[0] > max(after[g] for g in range(1, 6)), (
        before,
        after,
    )  # and group 0 is hit hardest


def test_precision_separates_an_oracle_update_from_a_random_one(lacuna):
    roles = lacuna.roles("Email_Address", 4099)
    forget_bits = sum(1 << g for g in roles.notes["forget_groups"])
    gen = torch.Generator().manual_seed(0)
    oracle, rand = _theta0(lacuna), _theta0(lacuna)
    with torch.no_grad():
        for (name, p), (_, q) in zip(oracle.named_parameters(), rand.named_parameters()):
            if name not in lacuna._mask:
                continue
            sel = bits_set(lacuna._mask[name], forget_bits).view_as(p)
            p[sel] += 0.01 * torch.randn(int(sel.sum()), generator=gen)  # exactly the forget bits
            pick = (torch.rand(p.shape, generator=gen) < sel.float().mean()).view_as(q)
            q[pick] += 0.01 * torch.randn(int(pick.sum()), generator=gen)  # as many random scalars
    o, r = lacuna.precision(oracle, roles), lacuna.precision(rand, roles)
    assert o["precision_forget_auroc"] > 0.99 and o["precision_forget_precision_at_1"] > 0.99
    assert abs(r["precision_forget_auroc"] - 0.5) < 0.05
    assert o["precision_forget_mode_exact"] == 1.0 and o["precision_forget_tensors"] > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_oracle_edit_scores_auroc_one_in_the_runs_dtype(lacuna, dtype):
    """The run casts theta_0 to its dtype before unlearning; precision compares with theta_0 cast
    the same way, so untouched scalars differ by exactly 0 and an edit of exactly the forget bits is
    ranked perfectly."""
    roles = lacuna.roles("Email_Address", 4099)
    forget_bits = sum(1 << g for g in roles.notes["forget_groups"])
    oracle = _theta0(lacuna).to(dtype)
    with torch.no_grad():
        for name, p in oracle.named_parameters():
            if (
                name in lacuna._mask
            ):  # the smallest edit: each forget scalar moves by one unit in the last place,
                sel = bits_set(lacuna._mask[name], forget_bits).view_as(
                    p
                )  # so the comparison must be exact
                p.view(torch.int16 if dtype == torch.bfloat16 else torch.int32)[sel] += 1
    o = lacuna.precision(oracle, roles)
    assert o["precision_forget_auroc"] == 1.0 and o["precision_forget_precision_at_1"] == 1.0


def test_a_run_records_j_and_precision(lacuna, cache, tmp_path):
    runner = Runner(tmp_path, cache_dir=cache, progress=False)
    spec = RunSpec(
        "lacuna",
        "Phone_Number",
        "npo",
        "intervention_score",
        seed=0,
        T=4,
        budget=0.1,
        model="tiny-olmo3",
        hyperparameters={"benchmark.people": 12, "lr": 0.01},
    )
    rec = runner.run(spec).record
    assert rec.status == "ok", rec.error
    c = rec.outcome.components
    assert rec.outcome.G_F > 0 and 0 <= c["precision_forget_auroc"] <= 1
    assert {"precision_all_auroc", "precision_forget_precision_at_0.1", "forget_prob"} <= set(c)
    assert c["evaluation_set"].startswith("eval")
    assert rec.roles["retain_field"] == "Birth_City"  # upstream's cross-field pairing


def test_forget_group_without_mask_bits_is_an_error(lacuna, tmp_path):
    empty = {n: torch.zeros_like(t) for n, t in lacuna._mask.items()}
    saved = lacuna._mask
    lacuna._mask, lacuna._roles = empty, {}
    try:
        with pytest.raises(
            LacunaFormatError, match=r"forget group\(s\) \[0, 2, 4\] have no mask bits"
        ):
            lacuna.roles("Email_Address", 1)
    finally:
        lacuna._mask = saved


def test_relearning_attack_probes_people_and_trains_outside_every_role(lacuna):
    """Upstream's attack (relearn.py + extraction_leakage.py) on the mini LACUNA: a unit is a
    person of the evaluation forget split, probed by their questions, the PII the target; the
    attacker's people are in no split; seeded, so the same counts in every process."""
    roles = lacuna.roles("Email_Address", 7)
    rs = lacuna.relearn_set(roles)
    split = roles.splits["eval"]["forget"]
    assert {p.unit for p in rs.probes} == {str(r["ID"]) for r in split.rows}
    assert sum(len(p.prompts) for p in rs.probes) == len(split.rows)
    from supportbench.benchmarks.lacuna.reader import read_relearn

    attack = read_relearn(lacuna._data_dir)
    rows = [r for part in roles.splits.values() for s in part.values() for r in s.rows]
    assert attack and not {r["ID"] for r in attack} & {r["ID"] for r in rows}
    # nor a person's name: the question's opening clause names the person
    people = {r["question"].split(",")[0] for r in rows}
    assert not {r["question"].split(",")[0] for r in attack} & people
    known = leaked(_theta0(lacuna), rs)
    assert len(known) > 0.5 * len(rs.probes)  # theta_0 knows most of the forget people's PII
    a = relearning_attack(_theta0(lacuna), rs, steps=3, lr=1e-4, batch_size=8, seed=7)
    b = relearning_attack(_theta0(lacuna), rs, steps=3, lr=1e-4, batch_size=8, seed=7)
    assert a == b
    assert a["total_forget_people"] == len(rs.probes)
    assert a["still_leaking_after_unlearn"] == len(known)
    assert a["forgotten_by_unlearn"] == len(rs.probes) - len(known)
