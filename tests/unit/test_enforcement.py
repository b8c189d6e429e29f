"""Enforcement on record (issue 35): the scalars a run changed inside and outside its support,
counted exactly against theta_0, hand-checked on a tiny model; the union of a DIR-R run's two
supports; and a refusal naming where the constraint broke."""

import pytest
import torch

from supportbench.unlearning.enforcement import (
    EnforcementError,
    SupportMasks,
    _on,
    count_changes,
    enforce,
)
from supportbench.unlearning.support import Geometry, GeometryTensor, Support


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(3, 4, bias=False)
        self.down = torch.nn.Linear(4, 3, bias=False)  # weight 3 x 4: groups are its 4 columns
        self.register_buffer("scale", torch.ones(2))


def _setup():
    torch.manual_seed(0)
    m = Tiny()
    geo = Geometry([GeometryTensor("down.weight", "down", m.down.weight, 1, 0, 4)])
    theta0 = {k: v.detach().clone() for k, v in m.state_dict().items()}
    return m, geo, theta0


def test_counts_inside_and_outside_by_hand():
    m, geo, theta0 = _setup()
    support = Support.of(geo, [1, 3])  # columns 1 and 3 of down.weight: 2 x 3 = 6 scalars
    with torch.no_grad():
        m.down.weight[:, 1] += 1.0  # 3 inside
        m.down.weight[0, 3] = float("nan")  # 1 inside (NaN != NaN counts)
        m.down.weight[2, 0] += 0.5  # 1 outside: a column not in the support
        m.up.weight[1, 2] -= 1.0  # 1 outside: a tensor with no allowed coordinate
        m.scale[0] = 2.0  # 1 outside: a buffer
    c = count_changes(m, theta0, SupportMasks([support]))
    assert (c.inside, c.outside, c.allowed, c.tensors) == (4, 3, 6, 3)
    assert set(c.worst) == {"down.weight", "up.weight", "scale"}
    with pytest.raises(EnforcementError, match=r"3 scalar\(s\) changed outside the run's support"):
        enforce(c)


def test_untouched_model_and_signed_zero_count_nothing():
    m, geo, theta0 = _setup()
    with torch.no_grad():
        m.up.weight[0, 0] = 0.0
    theta0["up.weight"][0, 0] = -0.0  # -0.0 == 0.0: not a change
    c = count_changes(m, theta0, SupportMasks([Support.of(geo, [0])]))
    assert (c.inside, c.outside, c.allowed) == (0, 0, 3)
    enforce(c)  # nothing outside: no error


def test_a_dirr_run_may_change_both_supports_and_nothing_else():
    m, geo, theta0 = _setup()
    s0, branch = Support.of(geo, [0, 1]), Support.of(geo, [1, 2])
    with torch.no_grad():
        m.down.weight[:, 0] += 1.0  # S0 only (before the checkpoint)
        m.down.weight[:, 2] += 1.0  # the branch only (after it)
    both = SupportMasks([s0, branch])
    assert [bool(both["down.weight"][0, j]) for j in range(4)] == [True, True, True, False]
    c = count_changes(m, theta0, both)
    assert (c.inside, c.outside, c.allowed) == (6, 0, 9)
    c = count_changes(m, theta0, SupportMasks([s0]))  # S0 alone would not allow column 2
    assert (c.inside, c.outside) == (3, 3)


def test_masks_are_views_not_copies():
    m, geo, _ = _setup()
    mask = SupportMasks([Support.of(geo, [2])])["down.weight"]
    assert mask.shape == m.down.weight.shape and mask.stride()[0] == 0  # a broadcast column
    with pytest.raises(KeyError):
        SupportMasks([Support.of(geo, [2])])["up.weight"]
    # to another device it travels as its column and is expanded there ("meta" stands for a GPU),
    # with the same coordinates set
    moved = _on(mask, torch.device("meta"))
    assert moved.shape == mask.shape and moved.stride()[0] == 0
    base = mask.narrow(0, 0, 1)
    assert torch.equal(base.expand(mask.shape), mask) and base.numel() == mask.shape[1]


def test_the_audit_counts_the_runs_checked_and_lists_a_record_that_changed_outside(tmp_path):
    from supportbench.registry import synthetic as syn
    from supportbench.registry.audit import audit
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect

    res = tmp_path / "res"
    counts = {"changed_inside": 6, "allowed_scalars": 6, "tensors_checked": 3}
    for seed, outside in ((1, 0), (2, 5), (3, None)):  # None: a record without the counts
        comps = {"forget_prob": 0.1}
        if outside is not None:
            comps |= {**counts, "changed_outside": outside}
        syn.write(res, syn.record(experiment="e", seed=seed, components=comps))
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    rep = audit(con, "e")
    assert rep.enforced == {"ok": 3, "checked": 2, "outside": 1}
    assert [r["seed"] for r in rep.changed_outside] == [2] and not rep.ok
    assert "enforcement on record: 2 of 3 ok runs checked against theta_0 (1 with a change" in (
        rep.text()
    )
