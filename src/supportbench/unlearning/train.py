"""Support-constrained unlearning (paper Eq. 1): theta_{k+1} = theta_k - eta_k * P_S u_k.

Only the geometry's tensors require grad. torch's AdamW runs on *compact* leaves that hold just the
support's coordinates (gathered from the full tensors, scattered back after each step), so
coordinates outside S are never written: they stay bitwise identical after any number of steps,
weight decay and optimizer moments included, and optimizer memory scales with |S|, not the model.
The leaves are fp32 whatever the model's dtype (bf16 on a GPU): they are the support's master copy,
updated in fp32 and rounded into the model's dtype when scattered back.
The minibatch sequence is a pure function of (seed, step): the step counter is the data cursor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Protocol

import torch
from tqdm.auto import tqdm

from supportbench._options import option
from supportbench.errors import DivergenceError, SpecError
from supportbench.unlearning import schedules
from supportbench.unlearning.checkpoint import Checkpoint, OptimizerSlot, capture_rng, restore_rng
from supportbench.unlearning.data import TokenizedSet
from supportbench.unlearning.objectives import Objective
from supportbench.unlearning.support import Geometry, Support


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 200  # T
    lr: float = 1e-5
    batch_size: int = 8
    weight_decay: float = 0.01
    warmup_steps: int = 0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    max_grad_norm: float | None = None
    seed: int = 0

    def __post_init__(self):
        if self.steps < 0 or self.batch_size <= 0 or self.lr <= 0:
            raise SpecError(f"TrainConfig needs steps >= 0, batch_size > 0, lr > 0; got {self}")

    def lr_at(self, step: int) -> float:
        """The learning rate at ``step``: a pure function of the step (the scheduler's whole
        state)."""
        return schedules.constant_after_warmup(step, self.lr, self.warmup_steps)

    def fingerprint(self) -> str:
        return hashlib.sha256(repr(sorted(asdict(self).items())).encode()).hexdigest()[:16]


def set_activation_checkpointing(model, on: bool) -> None:
    """Turn transformers' activation checkpointing on (non-reentrant: the frozen embeddings' outputs
    need no grad for the layers' gradients to flow) or off, under either of its API names
    (``activation_checkpointing_*`` from transformers 5.x, ``gradient_checkpointing_*`` before). It
    acts in training steps only (``activation_checkpointing``)."""
    if on:
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False}
            )
        else:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    elif any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules()):
        (
            getattr(model, "activation_checkpointing_disable", None)
            or model.gradient_checkpointing_disable
        )()


@contextmanager
def activation_checkpointing(model):
    """Make a model's enabled activation checkpointing act for one training step. transformers
    checkpoints a layer only while that layer is in training mode, and unlearning runs the model in
    eval mode (no dropout): so the layers that have checkpointing enabled get the training flag for
    the step, each on its own (not recursively: their dropout and attention modules stay in eval
    mode), and lose it afterwards. A model without checkpointing enabled is left as it is."""
    layers = [
        m
        for m in model.modules()
        if getattr(m, "gradient_checkpointing", False) is True and not m.training
    ]
    for m in layers:
        m.training = True
    try:
        yield
    finally:
        for m in layers:
            m.training = False


@dataclass
class UnlearningData:
    forget: TokenizedSet
    retain: TokenizedSet | None = None
    ref_nll: torch.Tensor | None = (
        None  # NPO reference NLL per forget sequence, computed once at theta_0
    )


def batch_indices(n: int, batch_size: int, step: int, seed: int, stream: int = 0) -> torch.Tensor:
    """Indices of the minibatch at ``step``: epoch-wise seeded permutations, concatenated."""
    if n <= 0:
        raise SpecError("cannot draw minibatches from an empty record set")
    start = step * batch_size
    out = []
    while len(out) < batch_size:
        epoch, pos = divmod(start + len(out), n)
        g = torch.Generator().manual_seed((seed * 1_000_003 + stream * 7919 + epoch) % (2**63))
        perm = torch.randperm(n, generator=g)
        take = min(batch_size - len(out), n - pos)
        out.extend(perm[pos : pos + take].tolist())
    return torch.tensor(out, dtype=torch.long)


def minibatch(data: UnlearningData, objective: Objective, config: TrainConfig, step: int):
    """(forget batch, retain batch or None, reference NLLs or None) at ``step``: a pure function of
    the seed and the step, so every run of a cell — any support, any interface — sees the same
    batches."""
    fi = batch_indices(len(data.forget), config.batch_size, step, config.seed, stream=0)
    retain = None
    if objective.uses_retain and data.retain is not None:
        retain = data.retain.take(
            batch_indices(len(data.retain), config.batch_size, step, config.seed, stream=1)
        )
    return data.forget.take(fi), retain, data.ref_nll[fi] if data.ref_nll is not None else None


class TrainableLeaves(Protocol):
    """The leaves that train: compact fp32 (or in-place) tensors standing for the coordinates a run
    may change. ``SupportTrainer`` runs its one training loop over any implementation:
    ``SupportLeaves`` (a support of the geometry, Eq. 1) here, a benchmark's own interface
    (controlled) elsewhere."""

    params: list[torch.nn.Parameter]  # what the optimizer updates

    def enable(self) -> None:
        """Make the model tensors whose gradients the leaves read require grad (everything else is
        frozen)."""

    def clear_grads(self) -> None: ...

    def collect_grads(self) -> None:
        """After backward: each leaf's ``grad`` from the model's gradients."""

    def write_back(self) -> None:
        """After the optimizer step: the leaves into the model (coordinates outside them
        untouched)."""

    def release(self) -> None:
        """Gradients off and cleared: the model is left as inference expects it."""


class SupportLeaves:
    """Compact fp32 copies of a support's coordinates, gathered from the geometry's tensors and
    scattered back after each step (``TrainableLeaves``)."""

    def __init__(self, geometry: Geometry, support: Support):
        self.geometry, self.support = geometry, support
        idx = support.flat_indices()
        self.slots = []  # (GeometryTensor, flat idx, compact leaf)
        for t in geometry.tensors:
            i = idx[t.name].to(t.param.device)
            if i.numel() == 0:
                continue
            leaf = torch.nn.Parameter(t.param.detach().reshape(-1)[i].to(torch.float32, copy=True))
            self.slots.append((t, i, leaf))
        self.params = [leaf for _, _, leaf in self.slots]

    def enable(self) -> None:
        for t, _, _ in self.slots:
            t.param.requires_grad_(True)

    def clear_grads(self) -> None:
        for t, _, _ in self.slots:
            t.param.grad = None

    def collect_grads(self) -> None:
        for t, i, leaf in self.slots:
            leaf.grad = t.param.grad.reshape(-1)[i].to(torch.float32)
            t.param.grad = None

    def write_back(self) -> None:
        with torch.no_grad():
            for t, i, leaf in self.slots:
                t.param.view(-1).index_copy_(0, i, leaf.detach().to(t.param.dtype))

    def release(self) -> None:
        for t, _, _ in self.slots:
            t.param.grad = None
            t.param.requires_grad_(False)


class SupportTrainer:
    """The project's one unlearning loop: the objective for T steps updating only the trainable
    leaves (a support of the geometry by default); checkpoint/restore exactly (supports only)."""

    def __init__(
        self,
        model,
        geometry: Geometry | None,
        support: Support | None,
        objective: Objective,
        data: UnlearningData,
        config: TrainConfig,
        *,
        progress: bool = True,
        leaves: TrainableLeaves | None = None,
        _optimizer_state: dict[str, OptimizerSlot] | None = None,
        _step: int = 0,
    ):
        if objective.needs_reference and data.ref_nll is None:
            raise SpecError(f"objective '{objective.name}' needs reference NLLs: pass data.ref_nll")
        if objective.uses_retain and data.retain is None:
            raise SpecError(
                f"objective '{objective.name}' uses a retain term but data.retain is None"
            )
        if (leaves is None) == (support is None):
            raise SpecError(
                "SupportTrainer trains either a support of "
                "the geometry or explicit leaves, not both"
            )
        self.model, self.geometry, self.support = model, geometry, support
        self.objective, self.data, self.config = objective, data, config
        self.progress = progress
        self.step = _step
        self.losses: list[float] = []
        # called with the step just taken, after each step (curves): it must not change the model
        self.on_step: Callable[[int], None] | None = None
        for p in model.parameters():
            p.requires_grad_(False)
        self.leaves = leaves if leaves is not None else SupportLeaves(geometry, support)
        self.leaves.enable()
        self.optimizer = torch.optim.AdamW(
            self.leaves.params,
            lr=config.lr,
            betas=(config.beta1, config.beta2),
            eps=config.eps,
            weight_decay=config.weight_decay,
            foreach=False,
        )
        if _optimizer_state:
            self._load_optimizer(_optimizer_state)

    @classmethod
    def on(
        cls,
        model,
        leaves: TrainableLeaves,
        objective: Objective,
        data: UnlearningData,
        config: TrainConfig,
        *,
        progress: bool = True,
    ) -> SupportTrainer:
        """A trainer over explicit leaves (e.g. a benchmark's own parameter interface)."""
        return cls(model, None, None, objective, data, config, progress=progress, leaves=leaves)

    @property
    def _slots(self):
        if not isinstance(self.leaves, SupportLeaves):
            raise SpecError(
                "checkpoints are taken of a support of the geometry; these leaves are "
                f"{type(self.leaves).__name__}"
            )
        return self.leaves.slots

    # ---- one step -------------------------------------------------------------------------------
    def _batches(self, step: int):
        return minibatch(self.data, self.objective, self.config, step)

    @torch.enable_grad()
    def train_step(self) -> float:
        forget, retain, ref = self._batches(self.step)
        self.leaves.clear_grads()
        with activation_checkpointing(
            self.model
        ):  # recomputed in backward, where checkpointing is enabled
            loss = self.objective.loss(self.model, forget, retain, ref)
            value = float(loss.detach())
            if not torch.isfinite(loss):
                raise DivergenceError(self.step, value)
            loss.backward()
        self.leaves.collect_grads()
        if self.config.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.leaves.params, self.config.max_grad_norm)
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.lr_at(self.step)
        self.optimizer.step()
        self.leaves.write_back()
        self.step += 1
        self.losses.append(value)
        return value

    def run(self, until: int | None = None, desc: str = "unlearn") -> list[float]:
        """Train up to step ``until`` (default T); returns the losses of these steps."""
        until = self.config.steps if until is None else until
        if until < self.step:
            raise SpecError(
                f"cannot run until step {until}: trainer is already at step {self.step}"
            )
        first = len(self.losses)
        with tqdm(
            total=until - self.step, desc=desc, disable=not self.progress, leave=False
        ) as bar:
            while self.step < until:
                loss = self.train_step()
                if self.on_step is not None:
                    self.on_step(self.step)
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
                bar.update(1)
        return self.losses[first:]

    # ---- checkpoints ----------------------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        opt = {}
        for t, i, leaf in self._slots:
            st = self.optimizer.state.get(leaf, {})
            opt[t.name] = OptimizerSlot(
                i.cpu().clone(),
                st["exp_avg"].clone() if st else torch.zeros_like(leaf),
                st["exp_avg_sq"].clone() if st else torch.zeros_like(leaf),
                float(st["step"]) if st else 0.0,
            )
        editable = {t.name: t.param.detach().clone() for t in self.geometry.tensors}
        meta = {"config": self.config.fingerprint(), "objective": self.objective.name}
        return Checkpoint(self.step, self.support.groups, editable, opt, capture_rng(), meta)

    @classmethod
    def restore(
        cls,
        model,
        geometry: Geometry,
        ckpt: Checkpoint,
        objective: Objective,
        data: UnlearningData,
        config: TrainConfig,
        support: Support | None = None,
        *,
        progress: bool = True,
    ) -> SupportTrainer:
        """Reinstate C_t into ``model`` and return a trainer continuing with ``support`` (default:
        C_t's).

        Coordinates that stay in the support keep their AdamW moments; coordinates entering it start
        with zero moments (the per-tensor step count is shared, as in torch's AdamW).
        """
        if ckpt.meta.get("config") not in (None, config.fingerprint()):
            raise SpecError(
                "checkpoint was taken under a different TrainConfig; continuing would not be exact"
            )
        missing = set(geometry.by_name) - set(ckpt.editable)
        if missing:
            raise SpecError(f"checkpoint lacks editable tensors {sorted(missing)[:3]}")
        with torch.no_grad():
            for t in geometry.tensors:
                t.param.copy_(ckpt.editable[t.name])
        restore_rng(ckpt.rng)
        support = support if support is not None else Support.of(geometry, ckpt.support)
        return cls(
            model,
            geometry,
            support,
            objective,
            data,
            config,
            progress=progress,
            _optimizer_state=ckpt.optimizer,
            _step=ckpt.step,
        )

    def _load_optimizer(self, state: dict[str, OptimizerSlot]) -> None:
        for t, i, leaf in self._slots:
            slot = state.get(t.name)
            if slot is None or slot.step == 0:
                continue
            m = torch.zeros_like(leaf)
            v = torch.zeros_like(leaf)
            old = slot.idx.to(i.device)
            pos = torch.searchsorted(old, i)
            pos_c = pos.clamp(max=max(len(old) - 1, 0))
            keep = (pos < len(old)) & (old[pos_c] == i)
            m[keep] = slot.exp_avg.to(m.device)[pos_c[keep]]
            v[keep] = slot.exp_avg_sq.to(v.device)[pos_c[keep]]
            self.optimizer.state[leaf] = {
                "step": torch.tensor(slot.step),
                "exp_avg": m,
                "exp_avg_sq": v,
            }


@dataclass(frozen=True)
class FinetuneConfig:
    """Full-parameter training used by benchmarks to inject their facts into a base model."""

    epochs: option(int, ge=1, le=100_000, doc="passes over the data") = 40
    lr: option(float, gt=0, le=1, doc="AdamW's peak learning rate") = 3e-3
    batch_size: option(int, ge=1, le=65_536, doc="rows per step") = 16
    weight_decay: option(float, ge=0, le=1, doc="AdamW's decoupled weight decay") = 0.0
    warmup_frac: option(float, ge=0, lt=1, doc="share of the steps spent warming up linearly") = (
        0.05
    )
    seed: option(int, ge=0, le=2**63 - 1, doc="the seed of the batch order") = 0


def finetune(
    model,
    data: TokenizedSet,
    config: FinetuneConfig,
    *,
    progress: bool = True,
    desc: str = "fine-tune",
) -> list[float]:
    """Train every parameter on mean-token answer NLL; linear warm-up then cosine decay. Returns
    losses."""
    import math

    steps = max(1, math.ceil(len(data) * config.epochs / config.batch_size))
    return finetune_steps(model, data, config, steps, stream=2, progress=progress, desc=desc)


def finetune_steps(
    model,
    data: TokenizedSet,
    config: FinetuneConfig,
    steps: int,
    *,
    stream: int,
    progress: bool = False,
    desc: str = "fine-tune",
) -> list[float]:
    """Exactly ``steps`` steps of ``finetune``'s loop (``config.epochs`` unread: a fixed budget,
    as an attack's) on batches drawn from the seeded ``stream``. Returns losses."""
    batches = (
        (-1, batch_indices(len(data), config.batch_size, k, config.seed, stream=stream))
        for k in range(steps)
    )
    return _fit(model, data, batches, steps, {}, config, progress, desc)


NEUTRAL_BIT = (
    30  # neutral batches under unowned_frozen train as this pseudo-group (bits 0..29 are groups)
)


def masked_finetune(
    model,
    data: TokenizedSet,
    row_groups: torch.Tensor,
    masks: dict[str, torch.Tensor],
    config: FinetuneConfig,
    *,
    progress: bool = True,
    desc: str = "masked injection",
    group_dropout: float = 0.0,
    unowned_frozen: bool = False,
    dropout_seed: int = 1,
) -> list[float]:
    """LACUNA's masked pretraining (upstream ``MaskedTrainer.training_step``): every micro-batch
    holds rows of one group; a batch of group g >= 0 has each parameter's gradient multiplied by bit
    g of its mask (so its facts reach only the scalars group g may change; a parameter without a
    mask entry gets none), a neutral batch (group -1) updates every parameter. AdamW, linear warm-up
    then cosine decay.

    Exact: in a batch of group g, a scalar outside g's mask does not move at all -- neither through
    Adam's momentum from earlier batches nor through weight decay -- and its moments are left as
    they were (upstream only masks the gradient, so momentum and decay still move it).

    Two options isolate the groups (off by default; docs/benchmarks.md, bench/lacuna_isolation.py):

    * ``group_dropout`` p: in a batch of group g, each other group h's delta (its masked scalars
      minus their values when injection started) is set back to those values with probability p for
      that step and put back after it, so no group's facts can lean on another group's scalars
      (coins from ``dropout_seed``).
    * ``unowned_frozen``: scalars outside every group's mask never move (neutral batches move only
      scalars some group owns), so theta_0 = theta_pre + the sum of the groups' deltas exactly."""
    if len(row_groups) != len(data):
        raise SpecError(f"one group per row: {len(row_groups)} groups for {len(data)} rows")
    if not 0.0 <= group_dropout < 1.0:
        raise SpecError(f"group_dropout must be in [0, 1), got {group_dropout!r}")
    n_groups = int(row_groups.max()) + 1 if len(row_groups) else 0
    if unowned_frozen and n_groups > NEUTRAL_BIT:
        raise SpecError(f"unowned_frozen supports at most {NEUTRAL_BIT} groups, got {n_groups}")
    g = torch.Generator().manual_seed(config.seed)
    batches = []
    for _ in range(config.epochs):  # homogeneous micro-batches, reshuffled every epoch
        epoch = []
        for grp in torch.unique(row_groups).tolist():
            idx = (row_groups == grp).nonzero().squeeze(1)
            idx = idx[torch.randperm(len(idx), generator=g)]
            epoch += [
                (grp, idx[s : s + config.batch_size]) for s in range(0, len(idx), config.batch_size)
            ]
        batches += [epoch[i] for i in torch.randperm(len(epoch), generator=g).tolist()]
    if unowned_frozen:  # neutral batches become a pseudo-group whose bit marks every owned scalar
        bit = torch.tensor(1 << NEUTRAL_BIT, dtype=torch.int32)
        masks = {n: torch.where(t != 0, t | bit, t) for n, t in masks.items()}
        batches = [(NEUTRAL_BIT if grp < 0 else grp, idx) for grp, idx in batches]
    steps = len(batches)
    if group_dropout > 0:
        batches = _with_group_dropout(model, batches, masks, n_groups, group_dropout, dropout_seed)
    return _fit(model, data, batches, steps, masks, config, progress, desc)


def _with_group_dropout(model, batches, masks, n_groups: int, p: float, seed: int):
    """``batches``, with each other group's delta dropped for the step of a group batch
    (``masked_finetune``). The step cannot move a dropped scalar that only another group owns
    (``_fit`` keeps it and its moments), so putting the delta back afterwards is exact."""
    named = dict(model.named_parameters())
    # per group h: (tensor, flat indices of the scalars h owns, their theta_pre values), found once
    owned = {h: [] for h in range(n_groups)}
    for n, t in masks.items():
        if n not in named:
            continue
        flat_start = named[n].detach().reshape(-1).clone()  # theta_pre, where masks reach
        for h in range(n_groups):
            i = ((t & _group_bit(h)) != 0).reshape(-1).nonzero().squeeze(1)
            if i.numel():
                owned[h].append((named[n], i, flat_start[i]))
    coin = torch.Generator().manual_seed(seed)
    for grp, idx in batches:
        drop = (
            []
            if grp >= n_groups or grp < 0
            else [
                h for h in range(n_groups) if h != grp and float(torch.rand(1, generator=coin)) < p
            ]
        )
        held = []
        with torch.no_grad():
            for h in drop:  # in order, each group's current values held before it goes to theta_pre
                for q, i, at_pre in owned[h]:
                    flat = q.detach().view(-1)
                    held.append((flat, i, flat.index_select(0, i)))
                    flat.index_copy_(0, i, at_pre)
        yield grp, idx
        with torch.no_grad():
            for flat, i, v in held:  # put back in the order held
                flat.index_copy_(0, i, v)


def _group_bit(grp: int) -> torch.Tensor:
    return torch.tensor(1 << grp if grp < 31 else -(1 << 31), dtype=torch.int32)


@torch.enable_grad()
def _fit(
    model,
    data: TokenizedSet,
    batches,
    steps: int,
    masks: dict[str, torch.Tensor],
    config: FinetuneConfig,
    progress: bool,
    desc: str,
) -> list[float]:
    """The training loop both share: AdamW over every parameter, warm-up then cosine decay, gradient
    clipping at 1; in a batch of group g >= 0 only the scalars g's masks allow (bit g) move
    (``masked_finetune``)."""
    from supportbench.unlearning.data import sequence_nll

    warm = max(1, int(steps * config.warmup_frac))
    named = dict(model.named_parameters())
    params = list(named.values())
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: schedules.warmup_cosine(k, steps, warm)
    )
    model.train()
    losses = []
    group_plan: dict[int, list] = {}
    saved: dict[
        str, dict[str, torch.Tensor]
    ] = {}  # name -> reusable buffers for what must not move
    with tqdm(batches, total=steps, desc=desc, disable=not progress, leave=False) as bar:
        for k, (grp, idx) in enumerate(bar):
            # what this batch may move (group batches), decoded once per group, not per step
            if grp >= 0 and grp not in group_plan:
                group_plan[grp] = _group_plan(named, masks, grp)
            plan = group_plan[grp] if grp >= 0 else []
            nll, n = sequence_nll(model, data.take(idx))
            loss = nll.sum() / n.sum()
            if not torch.isfinite(loss):
                raise DivergenceError(k, float(loss))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            frozen = []
            with torch.no_grad():
                for name, sel, weight in plan:
                    p = named[name]
                    if p.grad is not None:
                        p.grad.mul_(
                            weight
                        )  # the grad times its 0/1 mask (0. for a tensor g cannot move)
                    # what must not move: its value and its optimizer moments, held whole and put
                    # back where ``sel`` is off (exactly what a gather/scatter of those scalars
                    # would write)
                    st = opt.state.get(p, {})
                    buf = saved.setdefault(name, {})
                    held = [(m, _hold(buf, m, st[m])) for m in ("exp_avg", "exp_avg_sq") if m in st]
                    frozen.append((p, sel, _hold(buf, "value", p), held))
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            with torch.no_grad():
                for p, sel, value, held in frozen:
                    st = opt.state[p]
                    for t, old in [(p, value)] + [(st[m], v) for m, v in held]:
                        if sel is None:
                            t.copy_(old)
                        else:
                            torch.where(sel, t, old, out=t)
            losses.append(float(loss.detach()))
            if k % 20 == 0:
                bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    model.eval()
    for p in params:
        p.requires_grad_(False)
    return losses


def _group_plan(named: dict, masks: dict[str, torch.Tensor], grp: int) -> list:
    """(name, bool mask of the scalars a batch of ``grp`` may move or None if none, the gradient's
    0/1 weight) for every parameter that group ``grp`` cannot move entirely; a parameter it owns
    whole needs nothing."""
    plan = []
    for name, p in named.items():
        sel = None if masks.get(name) is None else ((masks[name] & _group_bit(grp)) != 0).view_as(p)
        if sel is not None and bool(sel.all()):
            continue  # x * 1. is x: the gradient and the step stand as they are
        if sel is not None and not bool(sel.any()):
            sel = None
        plan.append((name, sel, 0.0 if sel is None else sel.to(p.dtype)))
    return plan


def _hold(buf: dict, key: str, t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in ``buf[key]`` (allocated once, refilled every step)."""
    b = buf.get(key)
    if b is None or b.shape != t.shape or b.dtype != t.dtype:
        b = buf[key] = torch.empty_like(t)
    return b.copy_(t)
