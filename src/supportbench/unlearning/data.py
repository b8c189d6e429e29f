"""Tokenised record sets held as tensors: tokenise once per benchmark, never inside a training step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from supportbench.errors import SpecError

IGNORE = -100


@dataclass(frozen=True)
class TokenizedSet:
    """Right-padded prompt+answer sequences; ``labels`` is -100 everywhere except answer tokens (+eos)."""

    input_ids: torch.Tensor       # [N, L] int64
    attention_mask: torch.Tensor  # [N, L] int64
    labels: torch.Tensor          # [N, L] int64
    subject_mask: torch.Tensor | None = None  # [N, L] bool: prompt tokens naming the subject

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def take(self, idx) -> TokenizedSet:
        idx = torch.as_tensor(idx, dtype=torch.long)
        # trim trailing all-pad columns so a batch of short sequences costs less
        am = self.attention_mask[idx]
        width = int(am.sum(1).max()) if len(idx) else 1
        sm = self.subject_mask[idx, :width] if self.subject_mask is not None else None
        return TokenizedSet(self.input_ids[idx, :width], am[:, :width], self.labels[idx, :width], sm)

    def batches(self, batch_size: int):
        for s in range(0, len(self), batch_size):
            yield self.take(range(s, min(s + batch_size, len(self))))

    @property
    def n_answer_tokens(self) -> torch.Tensor:
        return (self.labels[:, 1:] != IGNORE).sum(1)


def tokenize_pairs(tokenizer, prompts: Sequence[str], answers: Sequence[str], max_length: int = 256,
                   subjects: Sequence[str | None] | None = None, append_eos: bool = True) -> TokenizedSet:
    """Tokenise ``prompt + answer (+ eos)``; the loss covers the answer tokens (and eos) only.

    ``subjects`` (optional, one per prompt) marks the prompt tokens overlapping the first occurrence
    of the subject string; corrupted and counterfactual diagnostics replace exactly those tokens.
    """
    if len(prompts) != len(answers):
        raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers")
    ids, lab, subj = [], [], []
    eos = tokenizer.eos_token_id
    for k, (p, a) in enumerate(zip(prompts, answers)):
        enc = tokenizer(p, add_special_tokens=False, return_offsets_mapping=subjects is not None)
        pi = enc["input_ids"]
        if subjects is not None:
            mark = [False] * len(pi)
            s = subjects[k]
            at = p.find(s) if s else -1
            if at >= 0:
                for j, (b, e) in enumerate(enc["offset_mapping"]):
                    mark[j] = b < at + len(s) and e > at
            subj.append(mark)
        ai = tokenizer(a, add_special_tokens=False)["input_ids"] + ([eos] if append_eos else [])
        seq = (pi + ai)[:max_length]
        lbl = ([IGNORE] * len(pi) + ai)[:max_length]
        ids.append(seq)
        lab.append(lbl)
    L = max(len(s) for s in ids) if ids else 1
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(ids), L), pad, dtype=torch.long)
    labels = torch.full((len(ids), L), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(ids), L), dtype=torch.long)
    smask = torch.zeros((len(ids), L), dtype=torch.bool) if subjects is not None else None
    for i, (s, lb) in enumerate(zip(ids, lab)):
        input_ids[i, : len(s)] = torch.tensor(s)
        labels[i, : len(lb)] = torch.tensor(lb)
        mask[i, : len(s)] = 1
        if smask is not None:
            m = subj[i][: len(s)]
            smask[i, : len(m)] = torch.tensor(m, dtype=torch.bool)
    return TokenizedSet(input_ids, mask, labels, smask)


def answer_positions(batch: TokenizedSet) -> torch.Tensor:
    """[B, L] bool: positions whose next-token prediction is an answer token (the trained outputs)."""
    pos = torch.zeros_like(batch.labels, dtype=torch.bool)
    pos[:, :-1] = batch.labels[:, 1:] != IGNORE
    return pos


def model_device(model) -> torch.device:
    """Where the model's weights live; record sets stay on the CPU and travel batch by batch."""
    return next(model.parameters()).device


def token_nll(model, batch: TokenizedSet) -> torch.Tensor:
    """Per-token NLL of the answer tokens, [B, L-1], zero where not an answer token (on the model's device)."""
    dev = model_device(model)
    logits = model(input_ids=batch.input_ids.to(dev), attention_mask=batch.attention_mask.to(dev)).logits
    labels = batch.labels[:, 1:].to(dev)
    nll = F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
        ignore_index=IGNORE, reduction="none",
    )
    return nll.view(labels.shape)


def sequence_nll(model, batch: TokenizedSet) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of answer-token NLL per sequence [B], answer-token count per sequence [B])."""
    nll = token_nll(model, batch)
    return nll.sum(1), (batch.labels[:, 1:] != IGNORE).sum(1).to(nll.device)


@torch.no_grad()
def dataset_nll(model, data: TokenizedSet, batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed answer NLL and token count for every sequence, batched, without grad (on the CPU)."""
    sums, counts = [], []
    for b in data.batches(batch_size):
        s, c = sequence_nll(model, b)
        sums.append(s.cpu())
        counts.append(c.cpu())
    return torch.cat(sums), torch.cat(counts)


ROLES = ("F", "R", "P", "N")  # forget, retain, protected, neutral (paper §4.2)


@dataclass(frozen=True)
class DiagnosticRecords:
    """Records reserved for support selection; benchmarks guarantee they are disjoint from evaluation."""

    F: TokenizedSet
    R: TokenizedSet
    P: TokenizedSet
    N: TokenizedSet

    def __post_init__(self):
        for q in ROLES:
            v = getattr(self, q)
            if type(v) is not TokenizedSet:
                raise TypeError(f"DiagnosticRecords.{q} must be a TokenizedSet of diagnostic records, "
                                f"got {type(v).__name__}")
            if len(v) == 0:
                raise SpecError(f"DiagnosticRecords.{q} is empty")

    def role(self, q: str) -> TokenizedSet:
        if q not in ROLES:
            raise SpecError(f"unknown diagnostic role {q!r}; allowed: {', '.join(ROLES)}")
        return getattr(self, q)
