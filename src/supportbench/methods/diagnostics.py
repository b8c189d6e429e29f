"""Shared, lazily computed diagnostics for selection methods (paper §4.2, Algorithm 1 line 1).

Everything a selection method may read lives here and is computed at most once per ``Diagnostics``
(one model state, one benchmark's diagnostic records, one objective, one seed), however many methods
ask. Methods declare what they need in ``requires``; ``prepare(requires)`` computes the union.

Diagnostics only ever see ``DiagnosticRecords``: a distinct type that benchmarks build from records
disjoint from their evaluation splits. Passing anything else is a TypeError.

Keys
  grad:Q                  mean-token answer-NLL gradient on role Q in {F, R, P, N} (also the per-batch
                          sum used by WAGLE and the empirical Fisher used by FILA, from the same pass)
  fisher:Q                F_Q / N_Q with F = sum_batches n_tokens * grad^2 (FILA's measure_importance)
  objective_direction     u0 = grad of the unlearning objective at theta_0 (no preconditioner)
  activations             per column: mean |h_j| and mean h_j over forget answer positions
  random_label_grad:Q     mean signed gradient on random-label copies of role Q (MemFlex, GRAIL)
  attribution:corrupted / attribution:counterfactual
                          per column: sum_{b,t} (h^corr - h^clean)_j * dm/dh_j and sum_{b,t} |...|,
                          m = summed answer log-prob of the clean answer
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from supportbench.errors import SpecError
from supportbench.harness.data import IGNORE, TokenizedSet, answer_positions, sequence_nll
from supportbench.harness.objectives import Objective, get_objective
from supportbench.harness.support import Geometry, discover_geometry

ROLES = ("F", "R", "P", "N")


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


class Diagnostics:
    def __init__(self, model, records: DiagnosticRecords, objective: Objective | str, *, seed: int = 0,
                 batch_size: int = 16, geometry: Geometry | None = None, random_label_copies: int = 3,
                 random_label_fraction: float = 0.5):
        if not isinstance(records, DiagnosticRecords):
            raise TypeError(f"Diagnostics reads only DiagnosticRecords, got {type(records).__name__}: "
                            "evaluation data must never reach a selection method")
        self.model = model
        self.records = records
        self.objective = get_objective(objective) if isinstance(objective, str) else objective
        self.seed = seed
        self.batch_size = batch_size
        self.geometry = geometry or discover_geometry(model)
        self.random_label_copies = random_label_copies
        self.random_label_fraction = random_label_fraction
        self._cache: dict[str, object] = {}
        self.computed = Counter()  # key -> number of times computed (tests assert <= 1)

    # ---- public accessors ------------------------------------------------------------------------
    def role_grad(self, q: str, reduce: str = "mean") -> dict[str, torch.Tensor]:
        if reduce not in ("mean", "sum"):
            raise SpecError(f"reduce must be 'mean' or 'sum', got {reduce!r}")
        return self._role_pass(q)[reduce]

    def fisher(self, q: str) -> dict[str, torch.Tensor]:
        return self._role_pass(q)["fisher"]

    def objective_direction(self) -> dict[str, torch.Tensor]:
        return self._cached("objective_direction", self._compute_objective_direction)

    def activations(self) -> dict[str, torch.Tensor]:
        return self._cached("activations", self._compute_activations)

    def random_label_grad(self, q: str) -> dict[str, torch.Tensor]:
        return self._cached(f"random_label_grad:{q}", lambda: self._compute_random_label_grad(q))

    def attribution(self, kind: str) -> dict[str, torch.Tensor]:
        if kind not in ("corrupted", "counterfactual"):
            raise SpecError(f"attribution kind must be 'corrupted' or 'counterfactual', got {kind!r}")
        return self._cached(f"attribution:{kind}", lambda: self._compute_attribution(kind))

    def prepare(self, requires: Iterable[str]) -> None:
        """Compute every listed key now (e.g. the union over the methods of a sweep)."""
        for key in requires:
            self.get(key)

    def get(self, key: str):
        name, _, arg = key.partition(":")
        table: dict[str, Callable] = {
            "grad": lambda: self.role_grad(arg), "fisher": lambda: self.fisher(arg),
            "objective_direction": self.objective_direction, "activations": self.activations,
            "random_label_grad": lambda: self.random_label_grad(arg),
            "attribution": lambda: self.attribution(arg), "weights": self.geometry.weights,
        }
        if name not in table:
            raise SpecError(f"unknown diagnostic {key!r}; known: {', '.join(sorted(KNOWN_KEYS))}")
        return table[name]()

    # ---- machinery --------------------------------------------------------------------------------
    def _cached(self, key: str, fn: Callable):
        if key not in self._cache:
            self._cache[key] = fn()
            self.computed[key] += 1
        return self._cache[key]

    @contextlib.contextmanager
    def _geometry_grad(self, geometry: bool = True):
        """Freeze every parameter (then unfreeze the geometry's if asked); restore afterwards."""
        saved = [(p, p.requires_grad) for p in self.model.parameters()]
        was_training = self.model.training
        for p in self.model.parameters():
            p.requires_grad_(False)
        for t in self.geometry.tensors if geometry else ():
            t.param.requires_grad_(True)
        self.model.eval()
        try:
            with torch.enable_grad():
                yield [t.param for t in self.geometry.tensors]
        finally:
            for p, r in saved:
                p.requires_grad_(r)
            self.model.train(was_training)

    def _zeros(self) -> dict[str, torch.Tensor]:
        return {t.name: torch.zeros_like(t.param, dtype=torch.float32) for t in self.geometry.tensors}

    def _role_pass(self, q: str) -> dict:
        def compute():
            data = self.records.role(q)
            total = int(data.n_answer_tokens.sum())
            mean, summ, fish = self._zeros(), self._zeros(), self._zeros()
            with self._geometry_grad() as params:
                for b in data.batches(self.batch_size):
                    nll, n = sequence_nll(self.model, b)
                    nb = int(n.sum())
                    grads = torch.autograd.grad(nll.sum() / max(nb, 1), params)
                    for t, g in zip(self.geometry.tensors, grads):
                        g = g.float()
                        mean[t.name] += g * (nb / max(total, 1))
                        summ[t.name] += g
                        fish[t.name] += nb * g * g
            fish = {k: v / max(total, 1) for k, v in fish.items()}
            return {"mean": mean, "sum": summ, "fisher": fish}

        if q not in ROLES:
            raise SpecError(f"unknown diagnostic role {q!r}; allowed: {', '.join(ROLES)}")
        return self._cached(f"grad:{q}", compute)

    def _compute_objective_direction(self) -> dict[str, torch.Tensor]:
        """u0 = grad L_unl(theta_0) on the F (and R) diagnostic records.

        Exact shortcuts reuse the role gradients: at theta_0 NPO's per-sequence derivative
        d/dnll_i [-(2/beta) log sigmoid(beta (nll_i - ref_i))] = -1 (nll_i = ref_i), so
        u0_F = -gamma * (N_tok / N_seq) * g_F; GradDiff/GA's forget term is -gamma * g_F; every retain
        term is alpha * g_R (mean-token NLL on R). Only SimNPO (per-sequence weights) needs its own pass.
        """
        obj, F = self.objective, self.records.F
        n_seq, n_tok = len(F), int(F.n_answer_tokens.sum())
        if obj.name == "npo":
            scale = -obj.forget_coef * n_tok / n_seq
        elif obj.name in ("graddiff", "ga"):
            scale = -obj.forget_coef
        else:
            scale = None
        if scale is not None:
            gF = self.role_grad("F")
            u = {k: scale * v for k, v in gF.items()}
        else:
            u = self._zeros()
            with self._geometry_grad() as params:
                for b in F.batches(self.batch_size):
                    nll, n = sequence_nll(self.model, b)
                    # per-sequence mean loss: the chunk contributes (chunk mean) * chunk size / N.
                    term = obj.forget_term(nll, n, nll.detach()) * (len(nll) / n_seq)
                    for t, g in zip(self.geometry.tensors, torch.autograd.grad(obj.forget_coef * term, params)):
                        u[t.name] += g.float()
        if obj.uses_retain:
            gR = self.role_grad("R")
            for k in u:
                u[k] = u[k] + obj.retain_coef * gR[k]
        return u

    @contextlib.contextmanager
    def _capture_down_inputs(self, keep_grad: bool):
        """Hook every down-projection: record its input h ([B, L, d_ff]); optionally keep its grad."""
        store: dict[str, torch.Tensor] = {}
        modules = dict(self.model.named_modules())
        handles = []
        for t in self.geometry.tensors:
            def hook(_mod, args, name=t.name):
                h = args[0]
                if keep_grad and h.requires_grad:
                    h.retain_grad()
                store[name] = h
            handles.append(modules[t.module_name].register_forward_pre_hook(hook))
        if keep_grad:  # make everything downstream of the embeddings differentiable, params frozen
            emb = self.model.get_input_embeddings()
            handles.append(emb.register_forward_hook(lambda _m, _a, out: out.detach().requires_grad_(True)))
        try:
            yield store
        finally:
            for h in handles:
                h.remove()

    @torch.no_grad()
    def _compute_activations(self) -> dict[str, torch.Tensor]:
        F = self.records.F
        abs_sum = {t.name: torch.zeros(t.n, dtype=torch.float64) for t in self.geometry.tensors}
        sgn_sum = {t.name: torch.zeros(t.n, dtype=torch.float64) for t in self.geometry.tensors}
        count = 0
        with self._capture_down_inputs(keep_grad=False) as store:
            for b in F.batches(self.batch_size):
                self.model(input_ids=b.input_ids, attention_mask=b.attention_mask)
                pos = answer_positions(b)
                count += int(pos.sum())
                for t in self.geometry.tensors:
                    h = store[t.name][pos].double()  # [n_pos, d_ff]
                    abs_sum[t.name] += h.abs().sum(0)
                    sgn_sum[t.name] += h.sum(0)
        cat = lambda d: torch.cat([d[t.name] for t in self.geometry.tensors]) / max(count, 1)  # noqa: E731
        return {"mean_abs": cat(abs_sum), "mean": cat(sgn_sum)}

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

    def _compute_random_label_grad(self, q: str) -> dict[str, torch.Tensor]:
        data = self.records.role(q)
        out = self._zeros()
        with self._geometry_grad() as params:
            for c in range(self.random_label_copies):
                copy = self._random_label_copy(data, c)
                tok = int(copy.n_answer_tokens.sum())
                for b in copy.batches(self.batch_size):
                    nll, _ = sequence_nll(self.model, b)
                    grads = torch.autograd.grad(nll.sum() / tok / self.random_label_copies, params)
                    for t, g in zip(self.geometry.tensors, grads):
                        out[t.name] += g.float()
        return out

    def corrupted_inputs(self, kind: str) -> TokenizedSet:
        """F with its subject tokens replaced: random tokens ('corrupted') or another subject's name tokens
        (from F, else from R), cycled to the same length ('counterfactual'). Positions stay aligned."""
        F = self.records.F
        if F.subject_mask is None or not bool(F.subject_mask.any()):
            raise SpecError("attribution diagnostics need subject spans in the F records "
                            "(tokenize_pairs(..., subjects=...)); this benchmark provides none")
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
                raise SpecError("counterfactual inputs need a second subject name (in the F or R diagnostic "
                                "records); this benchmark's diagnostics name only one")
            ids[i][F.subject_mask[i]] = donor.repeat(k // len(donor) + 1)[:k]
        return TokenizedSet(ids, F.attention_mask, F.labels, F.subject_mask)

    def _compute_attribution(self, kind: str) -> dict[str, torch.Tensor]:
        F, corrupted = self.records.F, self.corrupted_inputs(kind)
        signed = {t.name: torch.zeros(t.n, dtype=torch.float64) for t in self.geometry.tensors}
        absol = {t.name: torch.zeros(t.n, dtype=torch.float64) for t in self.geometry.tensors}
        idx = torch.arange(len(F))
        with self._geometry_grad(geometry=False):
            self._attribution_batches(F, corrupted, idx, signed, absol)
        cat = lambda d: torch.cat([d[t.name] for t in self.geometry.tensors])  # noqa: E731
        return {"signed": cat(signed), "abs": cat(absol)}

    def _attribution_batches(self, F, corrupted, idx, signed, absol) -> None:
        for s in range(0, len(F), self.batch_size):
            bi = idx[s:s + self.batch_size]
            clean, corr = F.take(bi), corrupted.take(bi)
            with self._capture_down_inputs(keep_grad=True) as store:
                nll, _ = sequence_nll(self.model, clean)
                (-nll.sum()).backward()  # m = summed answer log-prob
                h_clean = {k: (v.detach(), v.grad) for k, v in store.items()}
            with torch.no_grad(), self._capture_down_inputs(keep_grad=False) as store:
                self.model(input_ids=corr.input_ids, attention_mask=corr.attention_mask)
                h_corr = {k: v.detach() for k, v in store.items()}
            valid = clean.attention_mask.bool().unsqueeze(-1)
            for t in self.geometry.tensors:
                hc, grad = h_clean[t.name]
                term = ((h_corr[t.name] - hc) * grad).double() * valid
                signed[t.name] += term.sum((0, 1))
                absol[t.name] += term.abs().sum((0, 1))


KNOWN_KEYS = {f"grad:{q}" for q in ROLES} | {f"fisher:{q}" for q in ROLES} | {
    "objective_direction", "activations", "weights", "random_label_grad:F", "random_label_grad:R",
    "attribution:corrupted", "attribution:counterfactual"}
