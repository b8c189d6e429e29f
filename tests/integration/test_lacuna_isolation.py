"""Mini LACUNA at the demo's size passes its construction gates (issue 22; docs/benchmarks.md):
every group's facts are memorised (theta_0 mean answer NLL < 0.5 nats) and isolated (isolation ratio
< 0.1: restoring a group's masked scalars to theta_pre removes its own facts, not the other
groups'). Both are decided on theta_pre and theta_0 alone, before any unlearning run."""

import pytest
import torch

from supportbench.benchmarks.base import get_benchmark
from supportbench.benchmarks.lacuna import generator as gen
from supportbench.benchmarks.lacuna.reader import bits_set
from supportbench.unlearning.data import dataset_nll
from supportbench.unlearning.models import load_model

pytestmark = pytest.mark.slow
NLL_GATE, RATIO_GATE = 0.5, 0.1


@pytest.fixture(scope="module")
def demo_lacuna(cache):
    b = get_benchmark(
        "lacuna", cache_dir=cache, progress=False
    )  # the demo's size: 24 people per field
    assert b.people == 24
    b.prepare("tiny-olmo3")
    return b


def test_every_group_is_memorised_and_isolated_at_the_demos_size(demo_lacuna):
    b = demo_lacuna
    rows = {
        g: [r for f in b.FIELDS for r in b.rows(f, "full") if r["group_id"] == g]
        for g in range(gen.N_GROUPS)
    }

    def nll(model):
        out = []
        for g in range(gen.N_GROUPS):
            s, n = dataset_nll(model, b._tok(rows[g]))
            out.append(float((s / n).mean()))
        return torch.tensor(out)

    theta0, pre = load_model(b._prepared.path, device="cpu")[0], b.theta_pre()
    before = nll(theta0)
    assert float(before.max()) < NLL_GATE, f"not memorised: per-group NLL {before.tolist()}"
    pre_params = dict(pre.named_parameters())
    for g in range(gen.N_GROUPS):
        lesioned = load_model(b._prepared.path, device="cpu")[0]
        with torch.no_grad():
            for name, p in lesioned.named_parameters():
                if name in b._mask:
                    sel = bits_set(b._mask[name], 1 << g).view_as(p)
                    p[sel] = pre_params[name][sel]
        rise = nll(lesioned) - before
        others = torch.cat([rise[:g], rise[g + 1 :]]).mean()
        assert float(rise[g]) > 2.0, (
            f"group {g}: restoring its scalars leaves its facts ({rise.tolist()})"
        )
        assert float(others / rise[g]) < RATIO_GATE, (
            f"group {g}: isolation ratio {float(others / rise[g]):.3f}"
        )
