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
model applies it.

An ``Objective`` with ``chunked_loss=True`` computes its NLLs here (``harness.resolve`` sets it from
the run's spec); without it, nothing changes (the default path is bitwise as before).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from supportbench.errors import SpecError
from supportbench.unlearning.data import IGNORE, TokenizedSet, model_device

# Answer tokens per output-head chunk: at a 128k vocabulary one fp32 chunk of logits is 0.12 GiB,
# and a [256, d_model] x [d_model, vocab] product still fills a GPU.
CHUNK_TOKENS = 256


def _head(model):
    """(the decoder that returns last hidden states, the output head, its soft-cap or None)."""
    head = model.get_output_embeddings()
    decoder = model.get_decoder()
    if head is None or decoder is model:
        raise SpecError(
            f"chunked_loss needs a causal LM with a separate decoder and output head; "
            f"{type(model).__name__} has none (set chunked_loss = false)"
        )
    cap = getattr(model.config, "final_logit_softcapping", None)
    return decoder, head, cap


def _chunk_nll(h: torch.Tensor, labels: torch.Tensor, head, cap) -> torch.Tensor:
    logits = head(h).float()
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return F.cross_entropy(logits, labels, reduction="none")


def chunked_sequence_nll(
    model, batch: TokenizedSet, chunk: int = CHUNK_TOKENS
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of answer-token NLL per sequence [B], answer-token count per sequence [B]), as
    ``data.sequence_nll`` returns them, with one chunk of logits alive at a time (module doc)."""
    if chunk < 1:
        raise SpecError(f"chunk must be at least 1 answer token, got {chunk}")
    decoder, head, cap = _head(model)
    dev = model_device(model)
    hidden = decoder(
        input_ids=batch.input_ids.to(dev), attention_mask=batch.attention_mask.to(dev)
    ).last_hidden_state
    labels = batch.labels[:, 1:].to(dev)
    rows, cols = torch.nonzero(labels != IGNORE, as_tuple=True)
    h = hidden[:, :-1][rows, cols]  # [answer tokens, d_model]
    y = labels[rows, cols]
    parts = [
        checkpoint(_chunk_nll, h[s : s + chunk], y[s : s + chunk], head, cap, use_reentrant=False)
        for s in range(0, len(y), chunk)
    ]
    nll = torch.cat(parts) if parts else h.new_zeros(0, dtype=torch.float32)
    sums = torch.zeros(labels.shape[0], dtype=nll.dtype, device=dev).index_add(0, rows, nll)
    return sums, (labels != IGNORE).sum(1)
