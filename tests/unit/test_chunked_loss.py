"""``chunked_loss``: the answer tokens' NLLs a chunk of logits at a time are ``sequence_nll``'s NLLs
(values and gradients, any chunk size, with soft-capping), an objective computes its loss through
them only when its spec asks, and the default run key does not move."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from supportbench.errors import SpecError
from supportbench.experiments.spec import RunSpec
from supportbench.unlearning.chunked_loss import chunked_sequence_nll
from supportbench.unlearning.data import sequence_nll
from supportbench.unlearning.losses import reference_nll
from supportbench.unlearning.objectives import get_objective


def _grads(model, fn, batch):
    model.zero_grad(set_to_none=True)
    s, n = fn(model, batch)
    (s / n).sum().backward()
    return (
        s.detach(),
        n,
        {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None},
    )


@pytest.mark.parametrize("chunk", [1, 3, 256])
def test_chunked_nll_and_grads_equal_sequence_nll(tiny_model, tiny_sets, chunk):
    model = copy.deepcopy(tiny_model)
    batch = tiny_sets["forget"]  # right-padded, answers of different lengths
    want_s, want_n, want_g = _grads(model, sequence_nll, batch)
    got_s, got_n, got_g = _grads(model, lambda m, b: chunked_sequence_nll(m, b, chunk), batch)
    assert want_s.min() > 0 and torch.equal(got_n, want_n)
    torch.testing.assert_close(got_s, want_s, rtol=1e-5, atol=1e-6)
    assert set(got_g) == set(want_g) and len(got_g) > 0
    for k in want_g:
        torch.testing.assert_close(got_g[k], want_g[k], rtol=1e-4, atol=1e-6, msg=k)


def test_chunked_nll_applies_the_heads_soft_cap(tiny_model, tiny_sets):
    """Gemma 2 caps its logits (cap * tanh(logits / cap)); a small cap changes the NLLs, and the
    chunked NLLs follow the model's own capped logits."""
    model = copy.deepcopy(tiny_model)
    batch = tiny_sets["retain"]
    plain = sequence_nll(model, batch)[0].detach()
    model.config.final_logit_softcapping = 0.01
    cap = 0.01
    with torch.no_grad():
        got = chunked_sequence_nll(model, batch, 2)[0]
        h = model.get_decoder()(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask
        ).last_hidden_state
        logits = torch.tanh(model.get_output_embeddings()(h).float() / cap) * cap
        nll = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]),
            batch.labels[:, 1:].reshape(-1),
            ignore_index=-100,
            reduction="none",
        ).view(batch.labels[:, 1:].shape)
    torch.testing.assert_close(got, nll.sum(1), rtol=1e-5, atol=1e-6)
    assert (got - plain).abs().max() > 0.1  # the cap mattered


def test_objective_loss_goes_through_the_chunks_only_when_asked(tiny_model, tiny_sets, monkeypatch):
    model = copy.deepcopy(tiny_model)
    f, r = tiny_sets["forget"], tiny_sets["retain"]
    ref = reference_nll(model, f)
    calls = []
    import supportbench.unlearning.chunked_loss as cl

    real = cl.chunked_sequence_nll
    monkeypatch.setattr(cl, "chunked_sequence_nll", lambda m, b: calls.append(len(b)) or real(m, b))
    for name in ("npo", "simnpo", "graddiff", "ga"):
        obj = get_objective(name)
        plain = obj.loss(model, f, r, ref)
        n_before = len(calls)
        chunked = replace(obj, chunked_loss=True).loss(model, f, r, ref)
        assert len(calls) - n_before == (2 if obj.uses_retain else 1), name
        torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=1e-6)
    assert len(calls) == 7


def test_chunked_loss_is_a_run_setting_out_of_the_default_key():
    base = RunSpec("tofu", "forget10", "npo", "wagle")
    on = RunSpec("tofu", "forget10", "npo", "wagle", hyperparameters={"chunked_loss": True})
    off = RunSpec("tofu", "forget10", "npo", "wagle", hyperparameters={"chunked_loss": False})
    assert "chunked_loss" not in base.canonical()["hyperparameters"]
    assert off.run_key == base.run_key != on.run_key
    with pytest.raises(SpecError, match="chunked_loss"):
        RunSpec("tofu", "forget10", "npo", "wagle", hyperparameters={"chunked_loss": "yes"})


def test_chunk_below_one_is_refused(tiny_model, tiny_sets):
    with pytest.raises(SpecError, match="chunk must be at least 1 answer token, got 0"):
        chunked_sequence_nll(tiny_model, tiny_sets["forget"], 0)


def test_plan_memory_counts_one_chunk_of_logits_instead_of_each_batchs():
    """By hand, Llama 3 8B's shapes, batch 8 x 256, NPO (forget + retain): the loss keeps each
    batch's hidden states (d_model bf16 per token) instead of its fp32 logits, plus one chunk's
    logits (256 x vocab x 14 bytes) once."""
    from supportbench.unlearning.memory import plan_memory

    tokens, V, d = 8 * 256, 128256, 4096
    whole = plan_memory("llama3-8b", 5996544, checkpointing=True, column_grads=True)
    lean = plan_memory(
        "llama3-8b", 5996544, checkpointing=True, column_grads=True, chunked_loss=True
    )
    diff = whole.components["activations"] - lean.components["activations"]
    assert diff == 2 * (tokens * V * 4 - tokens * d * 2) - 256 * V * 14
    assert lean.chunked_loss and lean.column_grads and not whole.chunked_loss
    assert {k: v for k, v in lean.components.items() if k != "activations"} == {
        k: v for k, v in whole.components.items() if k != "activations"
    }
