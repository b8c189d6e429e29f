"""Evaluation metrics: the terminal score J (paper Eq. 19) and TOFU's metrics with open-unlearning's
definitions (src/evals/metrics). Pure functions on per-item numbers, so each is checked by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from scipy import stats


def terminal_score(
    forget_delta: torch.Tensor, retain_delta: torch.Tensor, protected_delta: torch.Tensor
) -> dict:
    """J = G_F - D_coll with G_F = mean forget NLL increase, D_coll = max(0, mean retain increase) +
    max(0, mean protected increase); increases are summed answer NLL relative to theta_0 (nats)."""
    g_f = float(forget_delta.double().mean())
    r = float(retain_delta.double().mean()) if len(retain_delta) else 0.0
    p = float(protected_delta.double().mean()) if len(protected_delta) else 0.0
    d = max(0.0, r) + max(0.0, p)
    return {"J": g_f - d, "G_F": g_f, "D_coll": d, "retain_increase": r, "protected_increase": p}


def bounded_terminal_score(
    forget_drop: torch.Tensor, retain_drop: torch.Tensor, protected_drop: torch.Tensor
) -> dict:
    """J's bounded twin (defined here; the controlled separation records it beside J), on answer
    probabilities instead of summed NLL. Per item, drop = p_theta0 - p_theta with p = exp(-mean
    answer-token NLL), so each drop lies in [-1, 1] (in [p_theta0 - 1, p_theta0]):

        G_F_bounded    = mean drop over forget items                                       in [-1,
                       1]
        D_coll_bounded = max(0, mean drop over retain) + max(0, mean drop over protected)   in [0,
        2]
        J_bounded      = G_F_bounded - D_coll_bounded                                       in [-3,
                       1]

    Like G_F, G_F_bounded is not clipped: a run that makes the forget answers more likely scores
    below 0. Also recorded: ``retain_prob_drop``, ``protected_prob_drop`` (the unclamped means)."""
    g_f = float(forget_drop.double().mean())
    r = float(retain_drop.double().mean()) if len(retain_drop) else 0.0
    p = float(protected_drop.double().mean()) if len(protected_drop) else 0.0
    d = max(0.0, r) + max(0.0, p)
    return {
        "J_bounded": g_f - d,
        "G_F_bounded": g_f,
        "D_coll_bounded": d,
        "retain_prob_drop": r,
        "protected_prob_drop": p,
    }


# open-unlearning's guard in probability_w_options and truth_ratio
# (src/evals/metrics/memorization.py)
EPS = 1e-10


def mean_token_nll(nll_sum: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    """Per item: summed answer NLL / answer tokens (open-unlearning's ``avg_loss``)."""
    return nll_sum.double() / n_tokens.double().clamp(min=1)


def probability(nll_sum: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    """Per item: exp(-mean answer-token NLL)."""
    return torch.exp(-mean_token_nll(nll_sum, n_tokens))


def normalised_probability(nll_true: torch.Tensor, nll_perturbed: torch.Tensor) -> torch.Tensor:
    """Real authors / world facts (open-unlearning ``probability_w_options``): c / (c + sum_k w_k +
    1e-10) with c = exp(-avg NLL of the true answer), w_k = exp(-avg NLL of perturbed answer k);
    ``nll_perturbed`` is [N, K]. Computed in log space (same value, no underflow to 0/0)."""
    lc = -nll_true.double()
    terms = torch.cat(
        [lc[:, None], -nll_perturbed.double(), torch.full_like(lc[:, None], math.log(EPS))], 1
    )
    return torch.exp(lc - torch.logsumexp(terms, 1))


def truth_ratio(nll_correct: torch.Tensor, nll_perturbed: torch.Tensor) -> torch.Tensor:
    """open-unlearning ``truth_ratio``: tr = exp(-mean_k avgNLL(perturbed_k)) /
    (exp(-avgNLL(correct)) + 1e-10), in log space: exp(-mean_k nll_k - logaddexp(-nll_c, log
    1e-10))."""
    lw = -nll_perturbed.double().mean(1)
    lc = -nll_correct.double()
    return torch.exp(lw - torch.logaddexp(lc, torch.full_like(lc, math.log(EPS))))


def truth_ratio_forget(tr: torch.Tensor) -> float:
    """Forget set (``closer_to_1_better``): mean(min(tr, 1/(tr + 1e-10)))."""
    tr = tr.double()
    return float(torch.minimum(tr, 1.0 / (tr + EPS)).mean())


def truth_ratio_keep(tr: torch.Tensor) -> float:
    """Retain / real authors / world facts (``true_better``): mean(max(0, 1 - tr))."""
    return float(torch.clamp(1.0 - tr.double(), min=0.0).mean())


def forget_quality(tr_unlearned: Sequence[float], tr_retain_model: Sequence[float]) -> float:
    """KS-test p-value between truth-ratio distributions of the unlearned and the retain model."""
    return float(stats.ks_2samp(np.asarray(tr_unlearned), np.asarray(tr_retain_model)).pvalue)


@torch.no_grad()
def greedy_answers(
    model, tokenizer, prompts: Sequence[str], max_new_tokens: int, batch_size: int = 32, fmt=None
) -> list[str]:
    """Greedy generations after each prompt: left-padded batches, stop at eos or ``max_new_tokens``.
    ``fmt`` (an ``unlearning.formats`` format) turns each question into the generation prompt's ids;
    without one, a prompt string is tokenized as is, without special tokens."""
    from supportbench.unlearning.data import model_device
    from supportbench.unlearning.formats import RawFormat

    fmt = fmt or RawFormat()
    outs = []
    for s in range(0, len(prompts), batch_size):
        chunk = prompts[s : s + batch_size]
        enc = [fmt.prompt_ids(tokenizer, p) for p in chunk]
        L = max(len(e) for e in enc)
        ids = torch.full((len(enc), L), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(enc), L), dtype=torch.long)
        for i, e in enumerate(enc):
            ids[i, L - len(e) :] = torch.tensor(e)
            mask[i, L - len(e) :] = 1
        max_new = max(
            1,
            min(
                max_new_tokens,
                getattr(model.config, "max_position_embeddings", L + max_new_tokens) - L,
            ),
        )
        dev = model_device(model)
        gen_ids = model.generate(
            input_ids=ids.to(dev),
            attention_mask=mask.to(dev),
            max_new_tokens=max_new,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        outs += tokenizer.batch_decode(gen_ids[:, L:].cpu(), skip_special_tokens=True)
    return [o.strip() for o in outs]


@torch.no_grad()
def token_match(model, data, batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, open-unlearning's exact memorization and extraction strength (``memorization.py``
    through ``tokenwise_vocab_logprobs``): both score the label positions **except the last**
    (upstream: "-1 to ignore eos prediction"; dropped whatever the last token is). With n such
    positions, EM = share the argmax predicts; ES = 1 - k/n, k the first position from which the
    argmax suffix equals the label suffix (upstream's loop leaves k = n - 1 when none does, so ES is
    never below 1/n). A row with no scored position (one label token or none) gets EM NaN (upstream:
    None, left out of the mean; take ``nanmean``) and ES 0 (upstream's 0)."""
    from supportbench.unlearning.data import IGNORE, model_device

    em, es = [], []
    dev = model_device(model)
    for s in range(0, len(data), batch_size):
        b = data.take(torch.arange(s, min(s + batch_size, len(data))))
        logits = model(
            input_ids=b.input_ids.to(dev), attention_mask=b.attention_mask.to(dev)
        ).logits
        pred = logits[:, :-1].argmax(-1).cpu()
        lab = b.labels[:, 1:]
        for i in range(len(b)):
            where = (lab[i] != IGNORE).nonzero(as_tuple=True)[0][:-1]
            y, p = lab[i][where], pred[i][where]
            n = len(y)
            if n == 0:
                em.append(float("nan"))
                es.append(0.0)
                continue
            em.append(float((p == y).sum()) / n)
            k = n - 1
            for j in range(n):
                if torch.equal(p[j:], y[j:]):
                    k = j
                    break
            es.append(1.0 - k / n)
    return torch.tensor(em, dtype=torch.float64), torch.tensor(es, dtype=torch.float64)


def rouge_l_recall(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return [scorer.score(ref, pred)["rougeL"].recall for pred, ref in zip(predictions, references)]


def model_utility(values: Sequence[float]) -> float:
    """Harmonic mean of the nine retain / real-author / world-fact values; 0 if any value is 0."""
    v = np.asarray(values, dtype=np.float64)
    if (v <= 0).any():
        return 0.0
    return float(stats.hmean(v))
