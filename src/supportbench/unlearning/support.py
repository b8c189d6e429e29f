"""Editable geometry and supports (paper Eq. 2-3).

Default geometry: one group per *input column* of every MLP down-projection, i.e. the outgoing
weights of one intermediate neuron. For ``nn.Linear`` (weight ``[d_model, d_ff]``) group j is
``W[:, j]``; GPT-2's ``Conv1D`` stores the transpose (``[d_ff, d_model]``), so group j is
``W[j, :]``. A group's cost is its parameter count. ``select`` ranks by score (ties by group id) and
packs under the budget: ``c(S) = sum_g dim(theta_g) <= B`` (Eq. 2-3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from supportbench.errors import BudgetError, GeometryError

# (suffix of the module name, expected class name or None for nn.Linear) in priority order.
DOWN_PROJ_PATTERNS: tuple[tuple[str, str], ...] = (
    ("down_proj", "Linear"),  # Llama, Mistral, Qwen, Gemma, OLMo
    ("mlp.c_proj", "Conv1D"),  # GPT-2 (transposed storage)
    ("dense_4h_to_h", "Linear"),  # GPT-NeoX / Pythia, Falcon, BLOOM
    ("fc2", "Linear"),  # OPT, Phi
    ("mlp.fc_out", "Linear"),  # GPT-J
)


@dataclass
class GeometryTensor:
    name: str  # parameter name in model.named_parameters()
    module_name: str
    param: torch.nn.Parameter
    axis: int  # the axis that indexes groups (columns of the down-projection)
    offset: int  # global id of this tensor's first group
    n: int  # groups in this tensor

    @property
    def group_cost(self) -> int:
        return self.param.shape[1 - self.axis]


class Geometry:
    """The editable groups of a model. Only these tensors ever require grad during unlearning."""

    def __init__(self, tensors: Sequence[GeometryTensor], kind: str = "down_proj_columns"):
        self.tensors = list(tensors)
        self.kind = kind
        self.n_groups = sum(t.n for t in self.tensors)
        self.costs = (
            torch.cat([torch.full((t.n,), t.group_cost, dtype=torch.int64) for t in self.tensors])
            if self.tensors
            else torch.zeros(0, dtype=torch.int64)
        )
        self.total_cost = int(self.costs.sum())
        self.by_name = {t.name: t for t in self.tensors}

    # ---- reductions over groups ------------------------------------------------------------------
    def _reduce(self, t: GeometryTensor, x: torch.Tensor) -> torch.Tensor:
        """Per-group sums; group-level vectors always live on the CPU (they are small, and the costs
        do)."""
        return x.sum(dim=1 - t.axis).cpu()

    def per_group_sum(self, x: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Column sums of a per-element quantity given per tensor -> Tensor[n_groups]."""
        return torch.cat([self._reduce(t, x[t.name].double()) for t in self.tensors])

    def per_group_dot(
        self, a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """<P_g a, P_g b> for every group g -> Tensor[n_groups] (float64)."""
        return torch.cat(
            [self._reduce(t, a[t.name].double() * b[t.name].double()) for t in self.tensors]
        )

    def per_group_norm(self, x: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.per_group_dot(x, x).sqrt()

    def weights(self) -> dict[str, torch.Tensor]:
        return {t.name: t.param.detach() for t in self.tensors}

    def column_norms(self) -> torch.Tensor:
        """||W_down[:, j]||_2 for every group."""
        return self.per_group_norm(self.weights())

    def describe(self) -> str:
        return (
            f"{self.kind}: {len(self.tensors)} tensors, {self.n_groups} groups, "
            f"{self.total_cost} editable scalars"
        )


def discover_geometry(model: torch.nn.Module) -> Geometry:
    """Find the MLP down-projections of ``model`` (Llama/Mistral/Qwen/Gemma/OLMo, GPT-2,
    NeoX/Falcon, OPT)."""
    modules = dict(model.named_modules())
    params = dict(model.named_parameters())
    for suffix, cls in DOWN_PROJ_PATTERNS:
        found = [
            (n, m) for n, m in modules.items() if n.endswith(suffix) and type(m).__name__ == cls
        ]
        if not found:
            continue
        tensors, offset = [], 0
        for mname, _mod in found:
            pname = f"{mname}.weight"
            if pname not in params:
                raise GeometryError(f"module '{mname}' has no trainable weight parameter '{pname}'")
            w = params[pname]
            axis = 0 if cls == "Conv1D" else 1  # Conv1D weight is [d_ff, d_model]
            n = w.shape[axis]
            tensors.append(GeometryTensor(pname, mname, w, axis, offset, n))
            offset += n
        return Geometry(tensors)
    linear_like = [n for n, m in modules.items() if type(m).__name__ in {"Linear", "Conv1D"}]
    sample = ", ".join(linear_like[:12]) + (" ..." if len(linear_like) > 12 else "")
    wanted = ", ".join(f"*{s} ({c})" for s, c in DOWN_PROJ_PATTERNS)
    raise GeometryError(
        f"no MLP down-projection found in {type(model).__name__}. Looked for: {wanted}. "
        f"Linear/Conv1D modules present: {sample or '(none)'}"
    )


@dataclass(frozen=True)
class Support:
    """A set of editable groups (sorted ids) with its cost c(S) (Eq. 2)."""

    groups: tuple[int, ...]
    cost: int
    geometry: Geometry = field(compare=False, repr=False, hash=False)

    @classmethod
    def of(cls, geometry: Geometry, groups) -> Support:
        ids = sorted({int(g) for g in groups})
        if ids and (ids[0] < 0 or ids[-1] >= geometry.n_groups):
            raise GeometryError(
                f"group ids must lie in [0, {geometry.n_groups}), got {ids[0]}..{ids[-1]}"
            )
        cost = int(geometry.costs[ids].sum()) if ids else 0
        return cls(tuple(ids), cost, geometry)

    def __len__(self) -> int:
        return len(self.groups)

    def group_mask(self) -> torch.Tensor:
        m = torch.zeros(self.geometry.n_groups, dtype=torch.bool)
        if self.groups:
            m[list(self.groups)] = True
        return m

    def mask(self) -> dict[str, torch.Tensor]:
        """Boolean mask per geometry tensor, same shape as the parameter."""
        gm = self.group_mask()
        out = {}
        for t in self.geometry.tensors:
            col = gm[t.offset : t.offset + t.n]
            shape = [1, 1]
            shape[t.axis] = t.n
            out[t.name] = col.view(shape).expand_as(t.param).clone()
        return out

    def flat_indices(self) -> dict[str, torch.Tensor]:
        """Sorted flat indices (into ``param.view(-1)``) of the active coordinates, per tensor."""
        return {name: m.reshape(-1).nonzero().squeeze(1) for name, m in self.mask().items()}

    def jaccard(self, other: Support) -> float:
        a, b = set(self.groups), set(other.groups)
        return len(a & b) / len(a | b) if a | b else 1.0


def rank(scores: torch.Tensor) -> torch.Tensor:
    """Group ids ordered by score, highest first; ties broken by smaller group id."""
    s = torch.as_tensor(scores, dtype=torch.float64)
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {tuple(s.shape)}")
    if not torch.isfinite(s).all():
        bad = (~torch.isfinite(s)).nonzero().squeeze(1)[:5].tolist()
        raise ValueError(f"scores contain NaN/inf at group ids {bad}")
    return torch.argsort(-s, stable=True)


def check_budget(budget: int, costs: torch.Tensor) -> None:
    total = int(costs.sum())
    if not isinstance(budget, int | float) or budget <= 0:
        raise BudgetError(f"budget must be a positive number of editable scalars, got {budget!r}")
    if budget > total:
        raise BudgetError(
            f"budget {budget} exceeds the total editable cost {total} of the geometry"
        )
    if budget < int(costs.min()):
        raise BudgetError(
            f"budget {budget} is below the cheapest group's cost {int(costs.min())}: "
            "the support would be empty"
        )


def pack(scores: torch.Tensor, costs: torch.Tensor, budget: int) -> list[int]:
    """Greedy packing in rank order: take each group that still fits; never exceeds ``budget``.

    With equal costs this is exactly the top-floor(B/c) prefix of the ranking.
    """
    costs = torch.as_tensor(costs, dtype=torch.int64)
    if costs.shape != torch.as_tensor(scores).shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and costs {tuple(costs.shape)} differ in shape"
        )
    check_budget(budget, costs)
    order = rank(scores)
    if bool((costs == costs[0]).all()):
        return order[: int(budget // int(costs[0]))].tolist()
    chosen, left = [], int(budget)
    c = costs[order].tolist()
    for g, cg in zip(order.tolist(), c):
        if cg <= left:
            chosen.append(g)
            left -= cg
            if left < int(costs.min()):
                break
    return chosen


def select(scores: torch.Tensor, budget: int, geometry: Geometry) -> Support:
    """Rank groups by ``scores`` and pack them under ``budget`` (paper §4.2)."""
    if tuple(scores.shape) != (geometry.n_groups,):
        raise ValueError(
            f"scores must have shape ({geometry.n_groups},), got {tuple(scores.shape)}"
        )
    return Support.of(geometry, pack(scores, geometry.costs, budget))
