"""Localization precision (LACUNA's ``scripts/precision_metrics.py``), streamed one tensor chunk at
a time.

Score per scalar: |W_after − W_before|. Ground truth per scalar: (mask & bits) != 0, for the
forget groups (bits 1|4|16 = 21 for groups {0, 2, 4}) and for all groups (63). A tensor enters a
ground truth only when that ground truth has both classes in it (norms, embeddings and ``lm_head``
are left out by the caller, as upstream). Metrics over all entering scalars together:

* ROC-AUC = P(score of a positive > score of a negative) + ½ P(equal)  (Mann–Whitney, ties as
  halves);
* precision@k% = share of positives among the top floor(N·k/100) scores; scores tied at the
  boundary count by their share of positives (the expected value over tie orders).

**Exact** when the entering scalars number at most ``max_exact``: their scores and labels are
gathered (5 bytes each) and ranked. **Histogram** above it: one bin for exact zeros (untouched
scalars: real ties, handled exactly) and ``bins`` log-spaced bins between the smallest non-zero and
the largest score. Pairs inside one non-zero bin are counted as ties, so the AUROC error is at most
½·Σ_b pos_b·neg_b / (P·N), and precision@k's at most (scalars of the boundary bin still to
take) / K; both bounds are computed and returned with the values. Memory is a few ``chunk``-sized
buffers plus the bin counts, whatever the model size (upstream holds ~14 bytes per parameter:
~100 GB at 7B).

A *source* is ``(name, numel, read)``, ``read(start, end) -> (scores float, mask int32)`` for a
slice of the flattened tensor, so the caller never needs a whole tensor's scores resident either.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

Source = tuple[str, int, Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]]
KS = (0.1, 1.0, 5.0, 10.0)


@dataclass
class Precision:
    auroc: float | None
    precision_at: dict[str, float | None]
    n: int
    positives: int
    tensors: int
    mode: str  # "exact" or "histogram"
    auroc_bound: float = 0.0  # |error| bound of the AUROC (0 when exact)
    precision_bound: float = 0.0  # largest |error| bound of the precision@k values (0 when exact)
    skipped: list[str] = field(default_factory=list)  # tensors whose ground truth lacks a class

    def to_dict(self, prefix: str) -> dict:
        out = {
            f"{prefix}_auroc": self.auroc,
            f"{prefix}_n": self.n,
            f"{prefix}_positives": self.positives,
            f"{prefix}_tensors": self.tensors,
            f"{prefix}_mode_exact": float(self.mode == "exact"),
            f"{prefix}_auroc_bound": self.auroc_bound,
            f"{prefix}_precision_bound": self.precision_bound,
        }
        out.update({f"{prefix}_precision_at_{k}": v for k, v in self.precision_at.items()})
        return out


def _bits(bits: int) -> torch.Tensor:
    return torch.tensor(bits - (1 << 32) if bits >= 1 << 31 else bits, dtype=torch.int32)


def _chunks(numel: int, chunk: int):
    for s in range(0, numel, chunk):
        yield s, min(numel, s + chunk)


def localization_precision(
    sources: Callable[[], Iterable[Source]],
    truths: dict[str, int],
    *,
    ks=KS,
    max_exact: int = 1 << 24,
    bins: int = 1 << 16,
    chunk: int = 1 << 20,
) -> dict[str, Precision]:
    """One ``Precision`` per ground truth in ``truths`` ({name: group bits}); ``sources()`` is
    called once per pass (two passes)."""
    masks = {t: _bits(b) for t, b in truths.items()}
    # pass 1: which tensors enter each ground truth, class counts, and the score range
    enter = {t: set() for t in truths}
    skipped = {t: [] for t in truths}
    n = dict.fromkeys(truths, 0)
    lo, hi = math.inf, 0.0
    for name, numel, read in sources():
        pos = dict.fromkeys(truths, 0)
        for s, e in _chunks(numel, chunk):
            sc, m = read(s, e)
            for t, b in masks.items():
                pos[t] += int(((m & b) != 0).sum())
            nz = sc[sc > 0]
            if nz.numel():
                lo = min(lo, float(nz.min()))
                hi = max(hi, float(nz.max()))
        for t in truths:
            if 0 < pos[t] < numel:
                enter[t].add(name)
                n[t] += numel
            else:
                skipped[t].append(name)
    exact = {t: n[t] <= max_exact for t in truths}
    # pass 2: gather (exact) or bin (histogram)
    gathered = {t: ([], []) for t in truths if exact[t]}
    edges = None
    if not all(exact.values()) and math.isfinite(lo):
        # float32 edges: bucketize compares in the scores' dtype without a float64 copy of every
        # chunk
        edges = torch.logspace(
            math.log10(lo), math.log10(hi) + 1e-12, bins + 1, dtype=torch.float64
        ).float()
    # [neg/pos, bin]
    hist = {t: torch.zeros(2, bins + 1, dtype=torch.float64) for t in truths if not exact[t]}
    for name, numel, read in sources():
        if not any(name in enter[t] for t in truths):
            continue
        for s, e in _chunks(numel, chunk):
            sc, m = read(s, e)
            sc = sc.float()
            for t, b in masks.items():
                if name not in enter[t]:
                    continue
                lab = (m & b) != 0
                if exact[t]:
                    gathered[t][0].append(sc.clone())
                    gathered[t][1].append(lab.clone())
                else:
                    idx = torch.zeros(sc.shape, dtype=torch.long)
                    if edges is not None:
                        nzm = sc > 0
                        idx[nzm] = torch.bucketize(sc[nzm], edges[1:-1]) + 1
                    h = hist[t]
                    h[0] += torch.bincount(idx[~lab], minlength=bins + 1)
                    h[1] += torch.bincount(idx[lab], minlength=bins + 1)
    out = {}
    for t in truths:
        if exact[t]:
            sc = torch.cat(gathered[t][0]) if gathered[t][0] else torch.zeros(0)
            lab = torch.cat(gathered[t][1]) if gathered[t][1] else torch.zeros(0, dtype=torch.bool)
            auroc, prec = exact_metrics(sc, lab, ks)
            out[t] = Precision(
                auroc,
                prec,
                int(lab.numel()),
                int(lab.sum()),
                len(enter[t]),
                "exact",
                skipped=skipped[t],
            )
        else:
            auroc, ab, prec, pb = histogram_metrics(hist[t], ks)
            out[t] = Precision(
                auroc,
                prec,
                int(hist[t].sum()),
                int(hist[t][1].sum()),
                len(enter[t]),
                "histogram",
                ab,
                pb,
                skipped[t],
            )
    return out


def _key(k: float) -> str:
    return f"{k:g}"


def exact_metrics(scores: torch.Tensor, labels: torch.Tensor, ks=KS) -> tuple[float | None, dict]:
    """Rank-based AUROC (ties as halves) and tie-aware precision@k on gathered scores."""
    n = labels.numel()
    P = int(labels.sum())
    N = n - P
    if P == 0 or N == 0:
        return None, {_key(k): None for k in ks}
    s = scores.double()
    order = torch.argsort(s)
    ss, ll = s[order], labels[order]
    _, counts = torch.unique_consecutive(ss, return_counts=True)
    ends = torch.cumsum(counts, 0)
    starts = ends - counts
    avg_rank = (starts + ends + 1).double() / 2  # 1-based average rank of each tie group
    ranks = torch.repeat_interleave(avg_rank, counts)
    auroc = float((ranks[ll].sum() - P * (P + 1) / 2) / (P * N))
    # precision@k from the top: whole tie groups, the boundary group by its share of positives
    pos_per_group = torch.zeros(len(counts), dtype=torch.float64).index_add_(
        0, torch.repeat_interleave(torch.arange(len(counts)), counts), ll.double()
    )
    cnt_desc, pos_desc = counts.flip(0).double(), pos_per_group.flip(0)
    prec = {}
    for k in ks:
        K = int(n * k / 100)
        prec[_key(k)] = _take_top(cnt_desc, pos_desc, K)[0] if K > 0 else None
    return auroc, prec


def _take_top(cnt_desc: torch.Tensor, pos_desc: torch.Tensor, K: int) -> tuple[float, float]:
    """(precision of the top K, scalars taken from the boundary group) with groups in descending
    order."""
    cum = torch.cumsum(cnt_desc, 0)
    b = int(torch.searchsorted(cum, torch.tensor(float(K), dtype=torch.float64)))
    before = float(cum[b - 1]) if b > 0 else 0.0
    take = K - before
    pos = float(pos_desc[:b].sum()) + (take * float(pos_desc[b] / cnt_desc[b]) if take > 0 else 0.0)
    return pos / K, take


def histogram_metrics(h: torch.Tensor, ks=KS) -> tuple[float | None, float, dict, float]:
    """AUROC, its error bound, precision@k and the largest precision error bound from [neg, pos] x
    bin counts (bin 0 holds exact zeros: real ties, no error)."""
    neg, pos = h[0], h[1]
    P, N = float(pos.sum()), float(neg.sum())
    if P == 0 or N == 0:
        return None, 0.0, {_key(k): None for k in ks}, 0.0
    neg_below = torch.cumsum(neg, 0) - neg
    auroc = float((pos * (neg_below + 0.5 * neg)).sum() / (P * N))
    bound = float(0.5 * (pos[1:] * neg[1:]).sum() / (P * N))
    cnt_desc, pos_desc = (neg + pos).flip(0), pos.flip(0)
    n = P + N
    prec, pbound = {}, 0.0
    nonzero_desc = torch.ones_like(cnt_desc, dtype=torch.bool)
    nonzero_desc[-1] = False  # the last bin in descending order is the exact-zero bin
    for k in ks:
        K = int(n * k / 100)
        if K <= 0:
            prec[_key(k)] = None
            continue
        p, take = _take_top(cnt_desc, pos_desc, K)
        prec[_key(k)] = p
        cum = torch.cumsum(cnt_desc, 0)
        b = int(torch.searchsorted(cum, torch.tensor(float(K), dtype=torch.float64)))
        if take > 0 and bool(nonzero_desc[b]):
            pbound = max(pbound, take / K)
    return auroc, bound, prec, pbound
