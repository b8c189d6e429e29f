"""Enforcement on record: the scalars a run changed inside and outside the coordinates it was
allowed to change, counted exactly against theta_0 (issue 35).

Support-constrained training is exact by construction (``SupportTrainer`` writes only the support's
coordinates), and tests hold it; a record should *show* it as well. ``count_changes`` compares the
trained model with theta_0's snapshot tensor by tensor -- one tensor's comparison at a time on the
model's device, never a second copy of the model -- and counts the scalars that differ (``!=``: a
NaN counts as changed, a ``-0.0`` written over ``0.0`` does not). ``allowed`` maps a parameter's
name to a boolean mask of the coordinates the run may change (``SupportMasks``: a support's
columns); a name absent from it may not change at all. A run whose ``outside`` count is not zero is
stored as failed (``EnforcementError``), before it is scored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from supportbench.errors import SupportbenchError
from supportbench.unlearning.support import Support


class EnforcementError(SupportbenchError):
    """A run changed scalars outside the coordinates it was allowed to change."""


@dataclass(frozen=True)
class Changes:
    """What a run changed, against theta_0: scalars inside and outside its allowed coordinates, the
    allowed coordinates' number (the support's size in scalars), and the tensors compared."""

    inside: int
    outside: int
    allowed: int
    tensors: int
    worst: tuple[str, ...] = ()  # up to three tensors with changes outside, by name

    def as_record(self) -> dict:
        return {
            "changed_inside": self.inside,
            "changed_outside": self.outside,
            "allowed_scalars": self.allowed,
            "tensors_checked": self.tensors,
        }


@torch.no_grad()
def count_changes(
    model: torch.nn.Module,
    theta0: Mapping[str, torch.Tensor],
    allowed: Mapping[str, torch.Tensor],
) -> Changes:
    """Scalars of ``model`` that differ from ``theta0`` inside and outside ``allowed`` (exact).

    ``theta0`` is the snapshot the run started from (parameters and buffers, any device); every
    entry is compared, so a tensor the run has no business touching (an embedding, a norm, a
    buffer) counts too. A parameter missing from the model, or of another shape, is a change of
    every scalar."""
    state = model.state_dict(keep_vars=False)
    inside = outside = n_allowed = 0
    worst = []
    unknown = sorted(set(allowed) - set(theta0))
    if unknown:
        raise KeyError(f"allowed coordinates name tensors theta_0 lacks: {unknown[:3]}")
    for name, ref in theta0.items():
        cur = state.get(name)
        if cur is None or cur.shape != ref.shape:
            outside += ref.numel()
            worst.append(name)
            continue
        diff = cur != ref.to(cur.device, non_blocking=False)
        changed = int(diff.sum())
        mask = allowed.get(name)
        if mask is None:
            out = changed
        else:
            mask = _on(mask, diff.device)
            n_allowed += int(mask.sum())
            if changed:
                got = int((diff & mask).sum())
                inside += got
                out = changed - got
            else:
                out = 0
        if out:
            outside += out
            worst.append(name)
        del diff
    return Changes(inside, outside, n_allowed, len(theta0), tuple(worst[:3]))


def _on(mask: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``mask`` on ``device``; a broadcast view (stride 0) moves as its one column vector and is
    expanded there, never materialised on the way."""
    if mask.device == device:
        return mask
    if 0 in mask.stride():
        base = mask
        for dim, stride in enumerate(mask.stride()):
            if stride == 0:
                base = base.narrow(dim, 0, 1)
        return base.to(device).expand(mask.shape)
    return mask.to(device)


class SupportMasks(Mapping):
    """The coordinates the supports ``supports`` (of one geometry) allow, as ``count_changes``'
    ``allowed``: per geometry tensor the union of their groups' columns, built when the tensor is
    compared (a broadcast view of one column vector: never every mask of a large model at once)."""

    def __init__(self, supports: Sequence[Support]):
        if not supports:
            raise ValueError("SupportMasks needs at least one support")
        self.geometry = supports[0].geometry
        self._groups = torch.zeros(self.geometry.n_groups, dtype=torch.bool)
        for s in supports:
            self._groups |= s.group_mask()

    def __getitem__(self, name: str) -> torch.Tensor:
        t = self.geometry.by_name[name]  # KeyError: not a geometry tensor, nothing allowed
        col = self._groups[t.offset : t.offset + t.n]
        shape = [1, 1]
        shape[t.axis] = t.n
        return col.view(shape).expand(tuple(t.param.shape))

    def __iter__(self) -> Iterator[str]:
        return iter(self.geometry.by_name)

    def __len__(self) -> int:
        return len(self.geometry.by_name)


def enforce(changes: Changes) -> None:
    """Refuse a run that changed anything outside its allowed coordinates, naming where."""
    if changes.outside:
        raise EnforcementError(
            f"{changes.outside} scalar(s) changed outside the run's support (in "
            f"{', '.join(changes.worst)}): the support constraint was broken; the run is not "
            f"scored (inside: {changes.inside} of {changes.allowed} allowed scalar(s) changed; "
            f"{changes.tensors} tensors checked)"
        )
