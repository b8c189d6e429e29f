"""Chunked loss (the ``chunked_loss`` run setting): the answer-token NLLs without the whole batch's
logits.

``data.sequence_nll`` asks the model for every position's logits, casts them to fp32 and takes a
log-softmax: at Llama 3 8B (vocabulary 128,256) a batch of 8 x 256 tokens holds ~1 GiB per fp32
copy, several copies at once and one per batch (forget, retain) until the backward pass: what
keeps a support-constrained step above 1.3 x the bf16 weights (docs/scaling.md, "Measured on a
GPU"). Here the decoder's last hidden states are gathered at the answer tokens only (the positions
whose next token is labelled), and the output head, its fp32 cast and the cross-entropy run on
``CHUNK_TOKENS`` of them at a time under activation checkpointing: a chunk's logits are recomputed
in backward, so only the hidden states are kept and one chunk's logits exist at a time. The same
NLLs as ``sequence_nll`` up to the order of a matrix product's sums
(``tests/unit/test_chunked_loss.py``); the output head's soft-capping (Gemma 2) is applied as the
model applies it, in the head's dtype. The first use on a model checks, on one sequence, that its
logits are its head applied to its decoder's last hidden states (capped as above): a model whose
forward rescales them (Granite, Cohere) is refused rather than given other NLLs. The NLLs of
diagnostics and of NPO's cached reference are computed as before (no gradient: their logits are not
held for a backward pass).

An ``Objective`` with ``chunked_loss=True`` computes its NLLs here (``harness.resolve`` sets it from
the run's spec); without it, nothing changes (the default path is bitwise as before).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from supportbench.errors import SpecError
from supportbench.unlearning.data import IGNORE, TokenizedSet, model_device

# Answer tokens per output-head chunk: at a 128k vocabulary one fp32 chunk of logits is 0.12 GiB,
# and a [256, d_model] x [d_model, vocab] product still fills a GPU.
CHUNK_TOKENS = 256


_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # models whose head was checked


def _head(model, probe: TokenizedSet):
    """(the decoder that returns last hidden states, the output head, its soft-cap or None), once
    checked on ``probe``'s first sequence against the model's own logits: a model whose forward
    rescales them (Granite's ``logits_scaling``, Cohere's ``logit_scale``) is refused, not
    mis-computed."""
    head = model.get_output_embeddings()
    decoder = model.get_decoder()
    if head is None or decoder is model:
        raise SpecError(
            "chunked_loss needs a causal LM whose decoder (get_decoder()) is a module apart from "
            f"its output head (get_output_embeddings()); {type(model).__name__} gives "
            f"{'no output head' if head is None else 'itself as its decoder'} "
            "(allowed for it: chunked_loss = false)"
        )
    cap = getattr(model.config, "final_logit_softcapping", None)
    if model not in _CHECKED:
        _check_head(model, decoder, head, cap, probe)
        _CHECKED[model] = True
    return decoder, head, cap


@torch.no_grad()
def _check_head(model, decoder, head, cap, probe: TokenizedSet) -> None:
    dev = model_device(model)
    ids, mask = probe.input_ids[:1].to(dev), probe.attention_mask[:1].to(dev)
    want = model(input_ids=ids, attention_mask=mask).logits.float()
    got = _logits(head, decoder(input_ids=ids, attention_mask=mask).last_hidden_state, cap)
    err = float((got - want).abs().max())
    if not err <= 1e-3 * max(float(want.abs().max()), 1.0):
        raise SpecError(
            f"chunked_loss: {type(model).__name__}'s logits are not its output head applied to its "
            f"decoder's last hidden states (largest difference {err:.3g} on a probe sequence): its "
            "forward rescales or caps them in a way chunked_loss does not reproduce; allowed: "
            "models whose logits are head(hidden), soft-capped as Gemma 2's (chunked_loss = false "
            "for any other)"
        )


def _logits(head, h: torch.Tensor, cap) -> torch.Tensor:
    """The model's logits at ``h`` in fp32: capped in the head's dtype first, as Gemma 2's forward
    caps them."""
    logits = head(h)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits.float()


def _chunk_nll(h: torch.Tensor, labels: torch.Tensor, head, cap) -> torch.Tensor:
    return F.cross_entropy(_logits(head, h, cap), labels, reduction="none")


def chunked_sequence_nll(
    model, batch: TokenizedSet, chunk: int = CHUNK_TOKENS
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of answer-token NLL per sequence [B], answer-token count per sequence [B]), as
    ``data.sequence_nll`` returns them, with one chunk of logits alive at a time (module doc)."""
    if chunk < 1:
        raise SpecError(f"chunk must be at least 1 answer token, got {chunk}")
    decoder, head, cap = _head(model, batch)
    dev = model_device(model)
    hidden = decoder(
        input_ids=batch.input_ids.to(dev), attention_mask=batch.attention_mask.to(dev)
    ).last_hidden_state[:, :-1]
    labels = batch.labels[:, 1:].to(dev)
    rows, cols = torch.nonzero(labels != IGNORE, as_tuple=True)
    h = hidden[rows, cols]  # [answer tokens, d_model]
    y = labels[rows, cols]
    parts = [
        checkpoint(_chunk_nll, h[s : s + chunk], y[s : s + chunk], head, cap, use_reentrant=False)
        for s in range(0, len(y), chunk)
    ]
    # per token into [B, L-1] (each position written once: deterministic), summed per sequence in
    # the default's order; no answer token at all: zeros still on the graph, as the default's
    if parts:
        nll = hidden.new_zeros(labels.shape, dtype=torch.float32).index_put(
            (rows, cols), torch.cat(parts)
        )
    else:
        nll = hidden[..., :0].float().sum(-1)
    return nll.sum(1), (labels != IGNORE).sum(1)
