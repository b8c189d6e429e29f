"""Shared, lazily computed diagnostics for selection methods (paper §4.2, Algorithm 1 line 1).

Everything a selection method may read lives here and is computed at most once per ``Diagnostics``
(one model state, one benchmark's diagnostic records, one objective, one seed), however many methods
ask. Methods declare what they need in ``requires``; ``prepare(requires)`` computes the union.

Diagnostics only ever see ``DiagnosticRecords``: a distinct type that benchmarks build from records
disjoint from their evaluation splits. Passing anything else is a TypeError.

All keys a ``prepare`` call asks for come from one fused pass (see ``Diagnostics``): the gradient of
a down-projection weight is a contraction of its input and output gradient, so one backward serves
every gradient-based key at once, and the clean forget rows serve the activations and attribution
too.

Keys
  grad:Q                  mean-token answer-NLL gradient on role Q in {F, R, P, N}
  grad_sum:Q              sum over records of each record's mean-token gradient (WAGLE's
                          generate_mask.py at batch size 1, as its TOFU configs run it): independent
                          of ``batch_size``
  fisher:Q[@B]            F_Q / N_Q with F = sum over micro-batches of B consecutive records of
                          n_tokens * grad^2 (FILA's measure_importance.py; B = 4, upstream's, by
                          default) (the three come from the same pass; each is only kept when asked
                          for)
  objective_direction     u0 = grad of the unlearning objective at theta_0 (no preconditioner)
  activations             per column: mean |h_j| and mean h_j over forget answer positions
  random_label_grad:Q     mean over records x copies of each random-label record's mean-token
                          gradient (KnowUnDo's compute_info at batch size 1, divided by the dataset
                          length; MemFlex and GRAIL read it)
  attribution:corrupted / attribution:counterfactual
                          per column: sum_{b,t} (h^corr - h^clean)_j * dm/dh_j and sum_{b,t} |...|,
                          m = summed answer log-prob of the clean answer
  <plugin name>           any diagnostic registered with ``@register_diagnostic(name)``: a function
                          of the ``Diagnostics`` object (model, records, geometry, seed, and every
                          key above), computed at most once per cell and shared by every method that
                          requires it
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from supportbench._registry import Registry
from supportbench.errors import SpecError, UnknownNameError
from supportbench.unlearning.data import (
    IGNORE,
    ROLES,
    DiagnosticRecords,
    TokenizedSet,
    answer_positions,
    token_nll,
)
from supportbench.unlearning.objectives import Objective, get_objective
from supportbench.unlearning.support import Geometry, discover_geometry

RANDOM_LABEL_ROLES = ("F", "R")
ATTRIBUTION_KINDS = ("corrupted", "counterfactual")
REDUCTIONS = {
    "mean": "grad",
    "sum": "grad_sum",
    "fisher": "fisher",
}  # role-gradient reduction -> key
FISHER_BATCH = (
    4  # FILA's measure_importance.py batch size; the Fisher depends on it by construction
)

DIAGNOSTICS: Registry = Registry("diagnostic", entry_point_group="supportbench.diagnostics")


def register_diagnostic(name: str):
    """Register a plugin diagnostic: ``@register_diagnostic("my_key")`` on
    ``fn(diagnostics) -> value``.

    ``fn`` receives the ``Diagnostics`` object (``model``, ``records`` — diagnostic records only —,
    ``geometry``, ``seed``, ``batch_size`` and every built-in key through its accessors). The value
    is computed at most once per ``Diagnostics`` (one sweep cell) and shared by every method whose
    ``requires`` names it; read it with ``diagnostics.get("my_key")``."""
    if (
        name in KNOWN_KEYS
    ):  # plugin names are identifiers, so they never collide with "key:role" forms
        raise SpecError(f"diagnostic name {name!r} is a built-in key")
    return DIAGNOSTICS.register(name)


@dataclass
class _Block:
    """One record set run through the fused pass, and what is collected from it."""

    name: str  # "F", "R", "P", "N" or "rl:F:0" (random-label copy 0 of F)
    data: TokenizedSet
    stats: tuple[str, ...] = ()  # reductions of the role gradient kept: "mean", "sum"
    fisher: tuple[int, ...] = ()  # Fisher micro-batch sizes kept
    u0: bool = False  # forget part of the objective direction (F only)
    activations: bool = False  # down-proj inputs at answer positions (F only)
    attribution: tuple[str, ...] = ()  # corrupted runs to patch against (F only)
    random_label: bool = False

    @property
    def needs_grad(self) -> bool:
        return (
            bool(self.stats)
            or bool(self.fisher)
            or self.u0
            or self.random_label
            or bool(self.attribution)
        )


class Diagnostics:
    """Lazy, cached diagnostics for one model state, one set of diagnostic records, one objective,
    one seed.

    ``prepare(keys)`` computes every listed key that is not cached yet in **one fused pass**: each
    diagnostic record set it needs (F, R, P, N and the random-label copies) goes through the model
    once, ``batch_size`` rows to a forward (and backward) pass. Hooks on the down-projections keep
    their inputs ``a`` and output gradients ``d``; every gradient the methods read
    is a contraction of the two (``sum_t d_t a_t^T`` per batch, exact for a linear layer), so one
    backward of the summed per-sequence NLL serves the role gradients, WAGLE's per-batch sums,
    FILA's Fisher, the objective direction (per-sequence weights), the activations and the
    attribution terms at once. Asking for a key that was not prepared computes it on its own (still
    once). Plugin diagnostics (``register_diagnostic``) are computed after the fused pass, once
    each.
    """

    def __init__(
        self,
        model,
        records: DiagnosticRecords,
        objective: Objective | str,
        *,
        seed: int = 0,
        batch_size: int = 16,
        geometry: Geometry | None = None,
        random_label_copies: int = 3,
        random_label_fraction: float = 0.5,
        progress: bool = False,
    ):
        if not isinstance(records, DiagnosticRecords):
            raise TypeError(
                f"Diagnostics reads only DiagnosticRecords, got {type(records).__name__}: "
                "evaluation data must never reach a selection method"
            )
        if batch_size < 1:
            raise SpecError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.records = records
        self.objective = get_objective(objective) if isinstance(objective, str) else objective
        self.seed = seed
        self.batch_size = batch_size
        self.geometry = geometry or discover_geometry(model)
        self.random_label_copies = random_label_copies
        self.random_label_fraction = random_label_fraction
        self.progress = progress
        self._cache: dict[str, object] = {}
        self.computed = Counter()  # cache key -> number of times computed (tests assert <= 1)
        self.passes = 0  # forward passes run (record batches + patched runs)

    # ---- public accessors ------------------------------------------------------------------------
    def role_grad(self, q: str, reduce: str = "mean") -> dict[str, torch.Tensor]:
        if reduce not in ("mean", "sum"):
            raise SpecError(f"reduce must be 'mean' or 'sum', got {reduce!r}")
        return self._lookup(f"grad:{q}" if reduce == "mean" else f"grad_sum:{q}")

    def fisher(self, q: str, batch_size: int = FISHER_BATCH) -> dict[str, torch.Tensor]:
        return self._lookup(f"fisher:{q}@{batch_size}")

    def objective_direction(self) -> dict[str, torch.Tensor]:
        return self._lookup("objective_direction")

    def activations(self) -> dict[str, torch.Tensor]:
        return self._lookup("activations")

    def random_label_grad(self, q: str) -> dict[str, torch.Tensor]:
        return self._lookup(f"random_label_grad:{q}")

    def attribution(self, kind: str) -> dict[str, torch.Tensor]:
        if kind not in ATTRIBUTION_KINDS:
            raise SpecError(
                f"attribution kind must be 'corrupted' or 'counterfactual', got {kind!r}"
            )
        return self._lookup(f"attribution:{kind}")

    def get(self, key: str):
        """Any key by name: built-in (see the module docstring), ``weights``, or a plugin
        diagnostic."""
        if key == "weights":
            return self.geometry.weights()
        return self._lookup(key)

    def prepare(self, requires: Iterable[str]) -> None:
        """Compute every listed key not cached yet, together, in one fused pass (e.g. a sweep's
        union)."""
        wanted = []
        for key in requires:
            ck = _cache_key(key)
            if ck is not None and ck not in self._cache and ck not in wanted:
                wanted.append(ck)
        self._compute(wanted)

    def release(self, keep: Iterable[str] = ()) -> None:
        """Drop every cached diagnostic except those ``keep`` names (methods' ``requires`` keys):
        their memory is freed, and a later request computes them again (the same values: a key does
        not depend on which other keys shared its pass)."""
        wanted = {_cache_key(k) for k in keep} - {None}
        for k in [k for k in self._cache if k not in wanted]:
            del self._cache[k]

    # ---- machinery -------------------------------------------------------------------------------
    def _lookup(self, key: str):
        ck = _cache_key(key)
        if ck not in self._cache:
            self._compute([ck])
        return self._cache[ck]

    def _plan(self, keys: list[str], cached=()) -> list[_Block]:
        ks = {k for k in keys if k not in DIAGNOSTICS}
        u0 = "objective_direction" in ks
        if u0 and self.objective.uses_retain and "grad:R" not in cached:
            ks.add("grad:R")  # u0's retain term is alpha * g_R
        blocks = []
        for q in ROLES:
            f_extra = q == "F"
            stats = tuple(r for r in ("mean", "sum") if f"{REDUCTIONS[r]}:{q}" in ks)
            fisher = tuple(sorted(int(k.split("@")[1]) for k in ks if k.startswith(f"fisher:{q}@")))
            b = _Block(
                q,
                self.records.role(q),
                stats=stats,
                fisher=fisher,
                u0=f_extra and u0,
                activations=f_extra and "activations" in ks,
                attribution=tuple(
                    k for k in ATTRIBUTION_KINDS if f_extra and f"attribution:{k}" in ks
                ),
            )
            if b.stats or b.fisher or b.u0 or b.activations or b.attribution:
                blocks.append(b)
        for q in RANDOM_LABEL_ROLES:
            if f"random_label_grad:{q}" in ks:
                data = self.records.role(q)
                blocks += [
                    _Block(f"rl:{q}:{c}", self._random_label_copy(data, c), random_label=True)
                    for c in range(self.random_label_copies)
                ]
        return blocks

    def _compute(self, keys: list[str]) -> None:
        plugins = [k for k in keys if k in DIAGNOSTICS]
        builtin = [k for k in keys if k not in plugins]
        if builtin:
            self._fused(builtin)
        for key in plugins:
            self._cache[key] = DIAGNOSTICS.get(key)(self)
            self.computed[key] += 1

    def _fused(self, keys: list[str]) -> None:
        blocks = self._plan(keys, cached=self._cache)
        acc = _Accumulators(self, blocks)
        corrupted = {k: self.corrupted_inputs(k) for b in blocks for k in b.attribution}
        n_batches = sum(-(-len(b.data) // self.batch_size) for b in blocks)
        with (
            self._frozen(),
            tqdm(
                total=n_batches,
                desc="diagnostics " + " ".join(keys),
                unit="batch",
                disable=not self.progress,
                leave=False,
            ) as bar,
        ):
            for b in blocks:
                for s in range(0, len(b.data), self.batch_size):
                    bar.update()
                    idx = torch.arange(s, min(s + self.batch_size, len(b.data)))
                    part = b.data.take(idx)
                    nll, a, d = self._forward(part, grads=b.needs_grad)
                    acc.add(b, idx, part, nll, a, d)
                    for k in b.attribution:  # the patched run of the same rows, no grad
                        _, h_corr, _ = self._forward(corrupted[k].take(idx), grads=False)
                        acc.add_attribution(k, part, a, d, h_corr)
        for key, value in acc.finish().items():
            self._cache[key] = value
            self.computed[key] += 1

    def plan_rows(self, requires: Iterable[str]) -> dict[str, int]:
        """What ``prepare(requires)`` would run from scratch: record rows with a backward pass, rows
        forward only."""
        blocks = self._plan(
            [k for k in map(_cache_key, requires) if k is not None and k not in DIAGNOSTICS]
        )
        grad = sum(len(b.data) for b in blocks if b.needs_grad)
        fwd = sum(len(b.data) for b in blocks if not b.needs_grad) + sum(
            len(b.data) * len(b.attribution) for b in blocks
        )
        return {"backward_rows": grad, "forward_only_rows": fwd}

    @contextlib.contextmanager
    def _frozen(self):
        """Eval mode, every parameter frozen (gradients are taken at the down-proj outputs); restore
        after."""
        saved = [(p, p.requires_grad) for p in self.model.parameters()]
        was_training = self.model.training
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.model.eval()
        try:
            yield
        finally:
            for p, r in saved:
                p.requires_grad_(r)
            self.model.train(was_training)

    @contextlib.contextmanager
    def _capture(self, grads: bool):
        """Hook every down-projection: keep its input a [B, L, d_ff] and, if ``grads``, the gradient
        d of its output [B, L, d_model]. Outputs that do not require grad (the first layer's, with
        everything frozen) become leaves, so the backward pass stops there."""
        inputs: dict[str, torch.Tensor] = {}
        outgrads: dict[str, torch.Tensor] = {}
        modules = dict(self.model.named_modules())
        handles = []
        for t in self.geometry.tensors:
            mod = modules[t.module_name]

            def pre(_m, args, name=t.name):
                inputs[name] = args[0].detach()

            handles.append(mod.register_forward_pre_hook(pre))
            if grads:

                def post(_m, _args, out, name=t.name):
                    if not out.requires_grad:
                        out = out.detach().requires_grad_(True)
                    out.register_hook(lambda g: outgrads.__setitem__(name, g.detach()))
                    return out

                handles.append(mod.register_forward_hook(post))
        try:
            yield inputs, outgrads
        finally:
            for h in handles:
                h.remove()

    def _zeros_like_params(self) -> dict[str, torch.Tensor]:
        return {
            t.name: torch.zeros_like(t.param, dtype=torch.float32) for t in self.geometry.tensors
        }

    def _forward(self, rows: TokenizedSet, grads: bool):
        with self._capture(grads) as (a, d), torch.set_grad_enabled(grads):
            nll = token_nll(self.model, rows).sum(1)
            if grads and nll.requires_grad:
                nll.sum().backward()
        self.passes += 1
        return nll.detach(), a, d

    def _random_label_copy(self, data: TokenizedSet, copy: int) -> TokenizedSet:
        g = torch.Generator().manual_seed(self.seed * 7907 + copy)
        ids, labels = data.input_ids.clone(), data.labels.clone()
        is_answer = labels != IGNORE
        flip = is_answer & (torch.rand(ids.shape, generator=g) < self.random_label_fraction)
        vocab = int(self.model.get_input_embeddings().num_embeddings)
        rand = torch.randint(0, vocab, ids.shape, generator=g)
        ids[flip] = rand[flip]
        labels[flip] = rand[flip]
        return TokenizedSet(ids, data.attention_mask, labels, data.subject_mask)

    def corrupted_inputs(self, kind: str) -> TokenizedSet:
        """F with its subject tokens replaced: random tokens ('corrupted') or another subject's name
        tokens (from F, else from R), cycled to the same length ('counterfactual'). Positions stay
        aligned."""
        F = self.records.F
        if F.subject_mask is None or not bool(F.subject_mask.any()):
            raise SpecError(
                "attribution diagnostics need subject spans in the F records "
                "(tokenize_pairs(..., subjects=...)); this benchmark provides none"
            )
        ids = F.input_ids.clone()
        if kind == "corrupted":
            g = torch.Generator().manual_seed(self.seed * 104729 + 1)
            vocab = int(self.model.get_input_embeddings().num_embeddings)
            rand = torch.randint(0, vocab, ids.shape, generator=g)
            ids[F.subject_mask] = rand[F.subject_mask]
            return TokenizedSet(ids, F.attention_mask, F.labels, F.subject_mask)
        spans = [F.input_ids[i][F.subject_mask[i]] for i in range(len(F))]
        R = self.records.R  # other people's names (retain subjects) are donors too
        has_r = R.subject_mask is not None
        spans_r = [R.input_ids[i][R.subject_mask[i]] for i in range(len(R))] if has_r else []
        n = len(F)
        for i in range(n):
            k = int(F.subject_mask[i].sum())
            if k == 0:
                continue
            pool = [spans[(i + j) % n] for j in range(1, n)] + spans_r
            donor = next((d for d in pool if len(d) and not torch.equal(d, spans[i])), None)
            if donor is None:
                raise SpecError(
                    "counterfactual inputs need a second subject name (in the F or R diagnostic "
                    "records); this benchmark's diagnostics name only one"
                )
            ids[i][F.subject_mask[i]] = donor.repeat(k // len(donor) + 1)[:k]
        return TokenizedSet(ids, F.attention_mask, F.labels, F.subject_mask)


class _Accumulators:
    """Running sums of one fused pass; ``finish`` turns them into the cached diagnostics."""

    def __init__(self, diag: Diagnostics, blocks: list[_Block]):
        self.diag, self.geo, self.obj = diag, diag.geometry, diag.objective
        self.blocks = blocks
        zeros = diag._zeros_like_params
        cols = lambda: {  # noqa: E731
            t.name: torch.zeros(t.n, dtype=torch.float64) for t in self.geo.tensors
        }
        self.stats = {b.name: {r: zeros() for r in b.stats} for b in blocks if b.stats}
        self.fisher = {b.name: {bs: zeros() for bs in b.fisher} for b in blocks if b.fisher}
        self._open: dict[
            tuple[str, int], list
        ] = {}  # (block, B) -> [micro-batch id, summed grads, tokens]
        self.tokens = {b.name: int(b.data.n_answer_tokens.sum()) for b in blocks}
        self.u0 = zeros() if any(b.u0 for b in blocks) else None
        self.act = {"abs": cols(), "signed": cols(), "count": 0}
        self.attr = {k: {"signed": cols(), "abs": cols()} for b in blocks for k in b.attribution}
        self.rl = {
            q: zeros()
            for q in RANDOM_LABEL_ROLES
            if any(b.name.startswith(f"rl:{q}:") for b in blocks)
        }

    def _outer(
        self, d: dict, a: dict, row_weights: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """sum_{b,t} w_b d_bt a_bt^T in each geometry tensor's layout (Linear [d_model, d_ff];
        Conv1D transposed)."""
        return {t.name: self._outer_one(t, d, a, row_weights) for t in self.geo.tensors}

    @staticmethod
    def _outer_one(t, d: dict, a: dict, row_weights: torch.Tensor | None = None) -> torch.Tensor:
        """``_outer`` for the one geometry tensor ``t``."""
        dd, aa = d[t.name].float(), a[t.name].float()
        if row_weights is not None:
            dd = dd * row_weights.to(dd.device, dd.dtype).view(-1, 1, 1)
        dd, aa = dd.reshape(-1, dd.shape[-1]), aa.reshape(-1, aa.shape[-1])
        return dd.T @ aa if t.axis == 1 else aa.T @ dd

    def add(self, b: _Block, idx, part: TokenizedSet, nll: torch.Tensor, a: dict, d: dict) -> None:
        """Add one forward batch to every running sum of its block. Tensor by tensor: each
        contraction is added to its sums and dropped before the next tensor's is formed, so a
        batch's transient memory is one down-projection's, not a second copy of all of them (at 8B:
        0.2 GiB instead of 7 GiB per copy)."""
        per_record = 1.0 / part.n_answer_tokens.double().clamp_min(
            1
        )  # each record's mean over its own tokens
        mean = "mean" in b.stats
        total = max(self.tokens[b.name], 1)
        c = self._forget_weights(b.data, idx, nll) if b.u0 else None
        shared = c is not None and bool(
            (c == c[0]).all()
        )  # e.g. NPO at theta_0, GradDiff: reuse the contraction
        if b.random_label:
            q = b.name.split(":")[1]
            w = per_record / (
                len(b.data) * self.diag.random_label_copies
            )  # every record weighs the same
        for t in self.geo.tensors:
            k = t.name
            if mean or shared:
                g = self._outer_one(t, d, a)
                if mean:
                    self.stats[b.name]["mean"][k] += g / total
                if shared:
                    self.u0[k] += c[0] * g
                del g
            if (
                c is not None and not shared
            ):  # per-row weights (e.g. SimNPO): a contraction of its own
                self.u0[k] += self._outer_one(t, d, a, c)
            if "sum" in b.stats:
                self.stats[b.name]["sum"][k] += self._outer_one(t, d, a, per_record)
            if b.random_label:
                self.rl[q][k] += self._outer_one(t, d, a, w)
        for bs in b.fisher:
            self._add_fisher(b.name, bs, idx, part, a, d)
        if b.activations:
            pos = answer_positions(part)
            self.act["count"] += int(pos.sum())
            for t in self.geo.tensors:
                h = a[t.name][pos.to(a[t.name].device)].double()
                self.act["abs"][t.name] += h.abs().sum(0).cpu()
                self.act["signed"][t.name] += h.sum(0).cpu()

    def _add_fisher(self, name: str, bs: int, idx, part: TokenizedSet, a: dict, d: dict) -> None:
        """F += n_tokens * (mean-token grad)^2 per micro-batch of ``bs`` consecutive records (record
        i is in micro-batch i // bs). A micro-batch split across two forward batches stays open
        until it is whole."""
        mb = torch.div(idx, bs, rounding_mode="floor")
        for m in torch.unique_consecutive(mb).tolist():
            rows = (mb == m).nonzero().squeeze(1)
            g = self._outer(
                {k: v[rows.to(v.device)] for k, v in d.items()},
                {k: v[rows.to(v.device)] for k, v in a.items()},
            )
            n = int(part.n_answer_tokens[rows].sum())
            cur = self._open.get((name, bs))
            if cur is not None and cur[0] == m:
                for k in g:
                    cur[1][k] += g[k]
                cur[2] += n
                continue
            self._close_fisher(name, bs)
            self._open[(name, bs)] = [m, g, n]

    def _close_fisher(self, name: str, bs: int) -> None:
        cur = self._open.pop((name, bs), None)
        if cur is not None:
            for k, g in cur[1].items():
                self.fisher[name][bs][k] += g * g / max(cur[2], 1)

    def _forget_weights(self, data: TokenizedSet, idx, nll: torch.Tensor) -> torch.Tensor:
        """c_i = d(gamma * L_f)/d nll_i at theta_0 for the rows ``idx``. Every forget term is a sum
        of per-sequence terms normalised by counts (sequences or tokens), so the derivative at row i
        reads only row i and the counts: the other rows may hold any value."""
        x = torch.zeros(len(data), dtype=torch.float32)
        x[idx] = nll.float().cpu()
        x.requires_grad_(True)
        term = self.obj.forget_coef * self.obj.forget_term(x, data.n_answer_tokens, x.detach())
        (c,) = torch.autograd.grad(term, x)
        return c[idx]

    def add_attribution(
        self, kind: str, part: TokenizedSet, a: dict, d: dict, h_corr: dict
    ) -> None:
        """sum_{b,t} (h^corr - h)_j * dm/dh_j with m = summed answer log-prob: dm/dh = -d W (Linear)
        or -d W^T."""
        valid = part.attention_mask.bool().unsqueeze(-1)
        for t in self.geo.tensors:
            W = t.param.detach().float()
            grad = -(d[t.name].float() @ (W if t.axis == 1 else W.T))
            term = ((h_corr[t.name].float() - a[t.name].float()) * grad).double() * valid.to(
                W.device
            )
            self.attr[kind]["signed"][t.name] += term.sum((0, 1)).cpu()
            self.attr[kind]["abs"][t.name] += term.abs().sum((0, 1)).cpu()

    def finish(self) -> dict[str, object]:
        cat = lambda x: torch.cat([x[t.name] for t in self.geo.tensors])  # noqa: E731
        out: dict[str, object] = {}
        for name, s in self.stats.items():
            for r, v in s.items():
                out[f"{REDUCTIONS[r]}:{name}"] = v
        for name, per_bs in self.fisher.items():
            total = max(self.tokens[name], 1)
            for bs, v in per_bs.items():
                self._close_fisher(name, bs)
                out[f"fisher:{name}@{bs}"] = {k: x / total for k, x in v.items()}
        if self.u0 is not None:
            u = self.u0
            if self.obj.uses_retain:  # in place, tensor by tensor: the sums are this pass's own
                gR = out["grad:R"] if "grad:R" in out else self.diag._cache["grad:R"]
                for k, v in u.items():
                    v += self.obj.retain_coef * gR[k]
            out["objective_direction"] = u
        if any(b.activations for b in self.blocks):
            c = max(self.act["count"], 1)
            out["activations"] = {
                "mean_abs": cat(self.act["abs"]) / c,
                "mean": cat(self.act["signed"]) / c,
            }
        for kind, v in self.attr.items():
            out[f"attribution:{kind}"] = {"signed": cat(v["signed"]), "abs": cat(v["abs"])}
        for q, g in self.rl.items():
            out[f"random_label_grad:{q}"] = g
        return out


def _cache_key(key: str) -> str | None:
    """The cache entry behind a diagnostic key; None for ``weights`` (read from the model, never
    cached). ``fisher:Q`` and ``fisher:Q@B`` name the Fisher at micro-batch B (default
    ``FISHER_BATCH``)."""
    base, at, bs = key.partition("@")
    if base.startswith("fisher:") and base in KNOWN_KEYS:
        if at and not (bs.isdigit() and int(bs) >= 1):
            raise SpecError(
                f"diagnostic {key!r}: the Fisher micro-batch after '@' must be a whole number >= 1"
            )
        return f"{base}@{int(bs) if at else FISHER_BATCH}"
    if key in KNOWN_KEYS:
        return None if key == "weights" else key
    if key in DIAGNOSTICS:
        return key
    raise UnknownNameError(
        "diagnostic", key, set(KNOWN_KEYS) | set(DIAGNOSTICS.names()), set(DIAGNOSTICS.plugins())
    )


KNOWN_KEYS = (
    {f"{k}:{q}" for k in REDUCTIONS.values() for q in ROLES}
    | {f"random_label_grad:{q}" for q in RANDOM_LABEL_ROLES}
    | {f"attribution:{k}" for k in ATTRIBUTION_KINDS}
    | {"objective_direction", "activations", "weights"}
)
