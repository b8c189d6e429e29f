"""A run records what it changed against theta_0 (issue 35), and a run whose training wrote
outside its support is stored as failed with the reason, never scored."""

import pytest
import torch

from supportbench.experiments.spec import RunSpec
from supportbench.harness import runner as runner_module
from supportbench.harness.runner import Runner

pytestmark = pytest.mark.slow


def test_every_run_records_its_counts_and_a_broken_projection_fails(
    tofu, cache, tmp_path, monkeypatch
):
    spec = RunSpec("tofu", "forget01", "npo", "random", seed=0, T=2, experiment="enf")
    rec = Runner(tmp_path / "ok", cache_dir=cache, progress=False).run(spec).record
    assert rec.status == "ok", rec.error
    comps = rec.outcome.components
    assert comps["changed_outside"] == 0
    # every scalar of the support moved (lr > 0, two steps), nothing else; the size is the support's
    assert comps["allowed_scalars"] == rec.support.cost
    assert 0 < comps["changed_inside"] <= rec.support.cost

    original = runner_module.SupportTrainer.run

    def leaky(self, *a, **kw):  # a projection that forgot one coordinate outside the support
        out = original(self, *a, **kw)
        with torch.no_grad():
            next(self.model.parameters()).view(-1)[0] += 1.0
        return out

    monkeypatch.setattr(runner_module.SupportTrainer, "run", leaky)
    bad = Runner(tmp_path / "bad", cache_dir=cache, progress=False).run(spec).record
    assert bad.status == "failed" and bad.outcome is None
    assert bad.error.startswith("EnforcementError: 1 scalar(s) changed outside the run's support")
    # the count names what the run did inside too
    assert "inside:" in bad.error and f"of {rec.support.cost} allowed scalar(s)" in bad.error


def test_a_scatter_off_by_one_inside_training_fails_the_run(tofu, cache, tmp_path, monkeypatch):
    """The projection itself broken: every step writes the support's values one coordinate further
    along (a wrong index in the scatter back), so the run trains outside its support."""
    from supportbench.unlearning import train

    def shifted(self):
        with torch.no_grad():
            for t, i, leaf in self.slots:
                flat = t.param.view(-1)
                flat.index_copy_(0, (i + 1) % flat.numel(), leaf.detach().to(t.param.dtype))

    monkeypatch.setattr(train.SupportLeaves, "write_back", shifted)
    spec = RunSpec("tofu", "forget01", "npo", "random", seed=0, T=2, experiment="enf")
    bad = Runner(tmp_path, cache_dir=cache, progress=False).run(spec).record
    assert bad.status == "failed" and bad.outcome is None
    assert bad.error.startswith("EnforcementError: ")
    assert int(bad.error.split(" ")[1]) > 0  # scalars changed outside
