import math
from types import SimpleNamespace

import pytest
import torch

from supportbench.errors import UnknownObjectiveError
from supportbench.unlearning.data import sequence_nll
from supportbench.unlearning.losses import npo_forget_loss, simnpo_forget_loss
from supportbench.unlearning.objectives import get_objective


def logsig(x):
    return -math.log1p(math.exp(-x))


def test_npo_forget_loss_hand_computed():
    nll, ref, beta = torch.tensor([3.0, 5.0]), torch.tensor([2.0, 6.0]), 0.1
    want = -(2 / beta) * (logsig(0.1 * 1.0) + logsig(0.1 * -1.0)) / 2
    assert npo_forget_loss(nll, ref, beta).item() == pytest.approx(want, rel=1e-6)
    # at theta_0 (nll == ref) the loss is -(2/beta) log(1/2)
    assert npo_forget_loss(ref, ref, beta).item() == pytest.approx(2 / beta * math.log(2), rel=1e-6)


def test_simnpo_forget_loss_hand_computed():
    nll, n = torch.tensor([6.0, 2.0]), torch.tensor([3, 4])
    beta, delta = 4.5, 0.5
    want = -(2 / beta) * (logsig(4.5 * (2.0 - 0.5)) + logsig(4.5 * (0.5 - 0.5))) / 2
    assert simnpo_forget_loss(nll, n, beta, delta).item() == pytest.approx(want, rel=1e-6)


def test_objective_losses_on_fixed_logits(tiny_model, tiny_sets):
    """Each objective's total equals the formula evaluated on separately computed NLLs."""
    f, r = tiny_sets["forget"], tiny_sets["retain"]
    with torch.no_grad():
        fn, fc = sequence_nll(tiny_model, f)
        rn, rc = sequence_nll(tiny_model, r)
        ref = fn - 0.7
        retain_mean = rn.sum() / rc.sum()
        forget_mean = fn.sum() / fc.sum()
        got = {
            o: get_objective(o).loss(tiny_model, f, r, ref).item()
            for o in ("npo", "simnpo", "graddiff", "ga")
        }
    want_npo = -(2 / 0.1) * torch.nn.functional.logsigmoid(0.1 * (fn - ref)).mean() + retain_mean
    want_sim = (
        0.125 * -(2 / 4.5) * torch.nn.functional.logsigmoid(4.5 * fn / fc).mean() + retain_mean
    )
    assert got["npo"] == pytest.approx(want_npo.item(), rel=1e-5)
    assert got["simnpo"] == pytest.approx(want_sim.item(), rel=1e-5)
    assert got["graddiff"] == pytest.approx((-forget_mean + retain_mean).item(), rel=1e-5)
    assert got["ga"] == pytest.approx(-forget_mean.item(), rel=1e-5)


def test_unknown_objective_suggests():
    with pytest.raises(
        UnknownObjectiveError, match=r"no objective 'simnp'. Did you mean 'simnpo'\?"
    ):
        get_objective("simnp")


def test_objective_override_and_bad_override():
    assert get_objective("npo", beta=0.2).beta == 0.2
    with pytest.raises(Exception, match="allowed"):
        get_objective("npo", gamma=2)


class _ElsewhereLM(torch.nn.Module):
    """A stand-in causal LM whose weights live on another device ('meta': shapes only, no data), and
    which refuses inputs that were not moved there -- the check a GPU run would make, on a CPU-only
    machine."""

    def __init__(self, vocab: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1, device="meta"))
        self.vocab = vocab

    def forward(self, input_ids, attention_mask):
        assert input_ids.device == attention_mask.device == self.w.device, "batch left on the CPU"
        return SimpleNamespace(
            logits=torch.zeros(*input_ids.shape, self.vocab, device="meta") * self.w
        )


@pytest.mark.parametrize("name", ["npo", "simnpo", "graddiff", "ga"])
def test_record_sets_follow_the_model_to_its_device(tiny_sets, name):
    """Record sets stay on the CPU; each batch, its labels and NPO's reference NLLs move to the
    model."""
    model = _ElsewhereLM(vocab=400)
    forget, retain = tiny_sets["forget"], tiny_sets["retain"]
    s, n = sequence_nll(model, forget)
    assert s.device.type == n.device.type == "meta"
    ref = torch.zeros(len(forget))  # computed once, kept on the CPU
    loss = get_objective(name).loss(model, forget, retain, ref)
    assert loss.device.type == "meta" and loss.shape == ()
