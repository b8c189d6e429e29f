"""Tokenised record sets held as tensors: tokenise once per benchmark, never inside a training
step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from supportbench.errors import SpecError
from supportbench.unlearning.formats import QAFormat, RawFormat

IGNORE = -100


@dataclass(frozen=True)
class TokenizedSet:
    """Right-padded prompt+answer sequences; ``labels`` is -100 everywhere except answer tokens
    (+eos)."""

    input_ids: torch.Tensor  # [N, L] int64
    attention_mask: torch.Tensor  # [N, L] int64
    labels: torch.Tensor  # [N, L] int64
    subject_mask: torch.Tensor | None = None  # [N, L] bool: prompt tokens naming the subject

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def take(self, idx) -> TokenizedSet:
        idx = torch.as_tensor(idx, dtype=torch.long)
        # trim trailing all-pad columns so a batch of short sequences costs less
        am = self.attention_mask[idx]
        width = int(am.sum(1).max()) if len(idx) else 1
        sm = self.subject_mask[idx, :width] if self.subject_mask is not None else None
        return TokenizedSet(
            self.input_ids[idx, :width], am[:, :width], self.labels[idx, :width], sm
        )

    def batches(self, batch_size: int):
        for s in range(0, len(self), batch_size):
            yield self.take(range(s, min(s + batch_size, len(self))))

    @property
    def n_answer_tokens(self) -> torch.Tensor:
        return (self.labels[:, 1:] != IGNORE).sum(1)


def tokenize_pairs(
    tokenizer,
    prompts: Sequence[str],
    answers: Sequence[str],
    max_length: int = 256,
    subjects: Sequence[str | None] | None = None,
    append_eos: bool = True,
) -> TokenizedSet:
    """Tokenise ``prompt + answer (+ eos)``, each alone without special tokens
    (``formats.RawFormat``); the loss covers the answer tokens (and eos) only.

    ``subjects`` (optional, one per prompt) marks the prompt tokens overlapping the first occurrence
    of the subject string; corrupted and counterfactual diagnostics replace exactly those tokens.
    """
    return tokenize_qa(
        tokenizer, RawFormat(append_eos=append_eos), prompts, answers, max_length, subjects
    )


def tokenize_qa(
    tokenizer,
    fmt: QAFormat,
    questions: Sequence[str],
    answers: Sequence[str],
    max_length: int = 256,
    subjects: Sequence[str | None] | None = None,
) -> TokenizedSet:
    """Tokenise every (question, answer) row through a text format (``unlearning.formats``): labels
    are -100 on the format's prompt tokens and the token ids elsewhere; sequences longer than
    ``max_length`` are cut as the format's upstream cuts them (``formats``)."""
    if len(questions) != len(answers):
        raise ValueError(f"{len(questions)} prompts but {len(answers)} answers")
    # the format applies max_length its own way (open-unlearning's tag path cuts, then appends EOS)
    encs = [
        fmt.encode(
            tokenizer,
            q,
            a,
            subjects[k] if subjects is not None else None,
            subjects is not None,
            max_length=max_length,
        )
        for k, (q, a) in enumerate(zip(questions, answers))
    ]
    L = max((len(e.ids) for e in encs), default=1) or 1
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(encs), L), pad, dtype=torch.long)
    labels = torch.full((len(encs), L), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(encs), L), dtype=torch.long)
    smask = torch.zeros((len(encs), L), dtype=torch.bool) if subjects is not None else None
    for i, e in enumerate(encs):
        ids = e.ids
        n = len(ids)
        input_ids[i, :n] = torch.tensor(ids)
        labels[i, e.n_prompt : n] = torch.tensor(ids[e.n_prompt :], dtype=torch.long)
        mask[i, :n] = 1
        if smask is not None:
            m = e.subject[:n]
            smask[i, : len(m)] = torch.tensor(m, dtype=torch.bool)
    return TokenizedSet(input_ids, mask, labels, smask)


def concat_sets(sets: Sequence[TokenizedSet], pad_id: int) -> TokenizedSet:
    """The rows of several sets, in order, right-padded with ``pad_id`` to the widest."""
    L = max(s.input_ids.shape[1] for s in sets)

    def pad(t, value):
        return F.pad(t, (0, L - t.shape[1]), value=value)

    ids = torch.cat([pad(s.input_ids, pad_id) for s in sets])
    subj = None
    if all(s.subject_mask is not None for s in sets):
        subj = torch.cat([pad(s.subject_mask, False) for s in sets])
    return TokenizedSet(
        ids,
        torch.cat([pad(s.attention_mask, 0) for s in sets]),
        torch.cat([pad(s.labels, IGNORE) for s in sets]),
        subj,
    )


def answer_positions(batch: TokenizedSet) -> torch.Tensor:
    """[B, L] bool: positions whose next-token prediction is an answer token (the trained
    outputs)."""
    pos = torch.zeros_like(batch.labels, dtype=torch.bool)
    pos[:, :-1] = batch.labels[:, 1:] != IGNORE
    return pos


def model_device(model) -> torch.device:
    """Where the model's weights live; record sets stay on the CPU and travel batch by batch."""
    return next(model.parameters()).device


def token_nll(model, batch: TokenizedSet) -> torch.Tensor:
    """Per-token NLL of the answer tokens, [B, L-1], zero where not an answer token (on the model's
    device)."""
    dev = model_device(model)
    logits = model(
        input_ids=batch.input_ids.to(dev), attention_mask=batch.attention_mask.to(dev)
    ).logits
    labels = batch.labels[:, 1:].to(dev)
    nll = F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=IGNORE,
        reduction="none",
    )
    return nll.view(labels.shape)


def sequence_nll(model, batch: TokenizedSet) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of answer-token NLL per sequence [B], answer-token count per sequence [B])."""
    nll = token_nll(model, batch)
    return nll.sum(1), (batch.labels[:, 1:] != IGNORE).sum(1).to(nll.device)


@torch.no_grad()
def dataset_nll(
    model, data: TokenizedSet, batch_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
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
    """Records reserved for support selection; benchmarks guarantee they are disjoint from
    evaluation."""

    F: TokenizedSet
    R: TokenizedSet
    P: TokenizedSet
    N: TokenizedSet

    def __post_init__(self):
        for q in ROLES:
            v = getattr(self, q)
            if type(v) is not TokenizedSet:
                raise TypeError(
                    f"DiagnosticRecords.{q} must be a TokenizedSet of diagnostic records, "
                    f"got {type(v).__name__}"
                )
            if len(v) == 0:
                raise SpecError(f"DiagnosticRecords.{q} is empty")

    def role(self, q: str) -> TokenizedSet:
        if q not in ROLES:
            raise SpecError(f"unknown diagnostic role {q!r}; allowed: {', '.join(ROLES)}")
        return getattr(self, q)
