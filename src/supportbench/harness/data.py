"""Tokenised record sets held as tensors: tokenise once per benchmark, never inside a training step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE = -100


@dataclass(frozen=True)
class TokenizedSet:
    """Right-padded prompt+answer sequences; ``labels`` is -100 everywhere except answer tokens (+eos)."""

    input_ids: torch.Tensor       # [N, L] int64
    attention_mask: torch.Tensor  # [N, L] int64
    labels: torch.Tensor          # [N, L] int64

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def take(self, idx) -> TokenizedSet:
        idx = torch.as_tensor(idx, dtype=torch.long)
        # trim trailing all-pad columns so a batch of short sequences costs less
        am = self.attention_mask[idx]
        width = int(am.sum(1).max()) if len(idx) else 1
        return TokenizedSet(self.input_ids[idx, :width], am[:, :width], self.labels[idx, :width])

    def batches(self, batch_size: int):
        for s in range(0, len(self), batch_size):
            yield self.take(range(s, min(s + batch_size, len(self))))

    @property
    def n_answer_tokens(self) -> torch.Tensor:
        return (self.labels[:, 1:] != IGNORE).sum(1)


def tokenize_pairs(tokenizer, prompts: Sequence[str], answers: Sequence[str], max_length: int = 256) -> TokenizedSet:
    """Tokenise ``prompt + answer + eos``; the loss covers answer tokens and eos only."""
    if len(prompts) != len(answers):
        raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers")
    ids, lab = [], []
    eos = tokenizer.eos_token_id
    for p, a in zip(prompts, answers):
        pi = tokenizer(p, add_special_tokens=False)["input_ids"]
        ai = tokenizer(a, add_special_tokens=False)["input_ids"] + [eos]
        seq = (pi + ai)[:max_length]
        lbl = ([IGNORE] * len(pi) + ai)[:max_length]
        ids.append(seq)
        lab.append(lbl)
    L = max(len(s) for s in ids) if ids else 1
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(ids), L), pad, dtype=torch.long)
    labels = torch.full((len(ids), L), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(ids), L), dtype=torch.long)
    for i, (s, lb) in enumerate(zip(ids, lab)):
        input_ids[i, : len(s)] = torch.tensor(s)
        labels[i, : len(lb)] = torch.tensor(lb)
        mask[i, : len(s)] = 1
    return TokenizedSet(input_ids, mask, labels)


def token_nll(model, batch: TokenizedSet) -> torch.Tensor:
    """Per-token NLL of the answer tokens, [B, L-1], zero where not an answer token."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    labels = batch.labels[:, 1:]
    nll = F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
        ignore_index=IGNORE, reduction="none",
    )
    return nll.view(labels.shape)


def sequence_nll(model, batch: TokenizedSet) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of answer-token NLL per sequence [B], answer-token count per sequence [B])."""
    nll = token_nll(model, batch)
    return nll.sum(1), (batch.labels[:, 1:] != IGNORE).sum(1)


@torch.no_grad()
def dataset_nll(model, data: TokenizedSet, batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed answer NLL and token count for every sequence, batched, without grad."""
    sums, counts = [], []
    for b in data.batches(batch_size):
        s, c = sequence_nll(model, b)
        sums.append(s)
        counts.append(c)
    return torch.cat(sums), torch.cat(counts)
