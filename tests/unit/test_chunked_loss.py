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


def _tiny(cls_name: str, vocab: int, dtype=torch.float32, **extra):
    import transformers

    cfg = getattr(transformers, cls_name.replace("ForCausalLM", "Config"))(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        **extra,
    )
    torch.manual_seed(0)
    return getattr(transformers, cls_name)(cfg).to(dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_nll_caps_as_gemma2_does(tiny_model, tiny_sets, dtype):
    """Gemma 2 caps its logits (cap * tanh(logits / cap)) in the weights' dtype; the chunked NLLs
    are its own forward's (``sequence_nll``), and a small cap changes them."""
    vocab = tiny_model.config.vocab_size
    batch = tiny_sets["retain"]
    capped = _tiny("Gemma2ForCausalLM", vocab, dtype, final_logit_softcapping=0.05)
    with torch.no_grad():
        want = sequence_nll(capped, batch)[0]
        got = chunked_sequence_nll(capped, batch, 2)[0]
        uncapped = _tiny("Gemma2ForCausalLM", vocab, dtype, final_logit_softcapping=None)
        free = chunked_sequence_nll(uncapped, batch, 2)[0]
    # the same bf16 logits, summed in the same order: equal to well under the 5e-4 to 1e-3 that
    # capping after the fp32 cast moves these sums
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    assert (got - free).abs().max() > 0.1  # the cap mattered


def test_a_model_that_rescales_its_logits_is_refused(tiny_model, tiny_sets):
    """Granite divides its logits by ``logits_scaling`` in forward: head(hidden) is not its logits,
    so chunked NLLs would be other NLLs; refused at the first use, naming the setting to change."""
    model = _tiny("GraniteForCausalLM", tiny_model.config.vocab_size, logits_scaling=8.0)
    with pytest.raises(
        SpecError,
        match=r"GraniteForCausalLM's logits are not its output head.*"
        r"chunked_loss = false",
    ):
        chunked_sequence_nll(model, tiny_sets["forget"])


def test_one_chunk_of_logits_at_a_time_recomputed_in_backward(tiny_model, tiny_sets):
    """The memory property: the head never sees more than ``chunk`` rows at once, and backward
    runs it again per chunk (checkpointing: the chunk's logits were not kept)."""
    model = copy.deepcopy(tiny_model)
    batch = tiny_sets["forget"]
    rows = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda m, a, o: rows.append(a[0].reshape(-1, a[0].shape[-1]).shape[0])
    )
    chunked_sequence_nll(model, batch, 3)  # the first use also checks the head on one sequence
    rows.clear()
    s, n = chunked_sequence_nll(model, batch, 3)
    answers = int(n.sum())
    chunks = -(-answers // 3)
    assert rows == [3] * (answers // 3) + ([answers % 3] if answers % 3 else [])
    s.sum().backward()
    assert len(rows) == 2 * chunks and max(rows) <= 3
    hook.remove()


def test_a_batch_without_answer_tokens_gives_zeros_on_the_graph(tiny_model, tiny_sets):
    model = copy.deepcopy(tiny_model)
    b = tiny_sets["forget"]
    empty = type(b)(b.input_ids, b.attention_mask, torch.full_like(b.labels, -100))
    s, n = chunked_sequence_nll(model, empty)
    want_s, want_n = sequence_nll(model, empty)
    assert torch.equal(s, want_s) and torch.equal(n, want_n) and s.requires_grad
    s.sum().backward()  # as the default's: zero gradients, no error


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
