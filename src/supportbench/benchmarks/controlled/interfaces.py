"""The two parameter interfaces of the controlled separation, of exactly equal editable size, on one layer's
MLP down-projection W (d_model x d_ff):

  backbone  I_B = a seeded contiguous block of ``c`` input columns of W: c * d_model scalars
  lora      I_L = a ``peft`` LoRA adapter on W of rank r (B initialised to zero, kept unmerged):
            r * (d_ff + d_model) scalars

Equal size needs c = r (d_ff + d_model) / d_model to be whole (``possible_ranks`` lists the ranks that work).
Training restricted to one interface keeps every other coordinate bitwise unchanged: AdamW runs on compact
leaves (the block's columns, or the LoRA matrices) and writes only them back. Storage localization is the
locators' (``locators/``): from theta_0, the interfaces and *diagnostic* phrasings only (``TargetProbes``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from supportbench.errors import SpecError
from supportbench.unlearning import schedules
from supportbench.unlearning.data import TokenizedSet, sequence_nll
from supportbench.unlearning.train import SupportTrainer, batch_indices

INTERFACES = ("backbone", "lora")


@dataclass(frozen=True)
class Interfaces:
    layer: int
    module: str                  # the down-projection's module name in the base model
    columns: tuple[int, ...]     # I_B
    rank: int                    # I_L
    d_model: int
    d_ff: int

    @property
    def size(self) -> int:
        return len(self.columns) * self.d_model

    @property
    def lora_size(self) -> int:
        return self.rank * (self.d_ff + self.d_model)


def possible_ranks(d_model: int, d_ff: int, limit: int = 64) -> list[int]:
    return [r for r in range(1, limit + 1) if (r * (d_ff + d_model)) % d_model == 0
            and r * (d_ff + d_model) // d_model <= d_ff]


def make_interfaces(model, layer: int, rank: int, seed: int = 0) -> Interfaces:
    cfg = model.config
    L = cfg.num_hidden_layers
    layer = layer % L if -L <= layer < L else None
    if layer is None:
        raise SpecError(f"interface layer must be in -{L}..{L - 1}, the model has {L} layers")
    d, f = cfg.hidden_size, cfg.intermediate_size
    ok = possible_ranks(d, f)
    if rank not in ok:
        raise SpecError(f"LoRA rank {rank} cannot match a whole number of backbone columns exactly "
                        f"(r x (d_ff + d_model) / d_model with d_model={d}, d_ff={f}); possible ranks: "
                        f"{', '.join(map(str, ok[:12])) or 'none'}")
    c = rank * (f + d) // d
    start = random.Random(f"controlled-block:{seed}").randrange(0, f - c + 1)
    return Interfaces(layer, f"model.layers.{layer}.mlp.down_proj", tuple(range(start, start + c)), rank, d, f)


def attach_lora(base, itf: Interfaces, seed: int = 0):
    """The base model with an unmerged LoRA (B = 0) on the interface's down-projection. peft draws A from
    torch's global RNG, which torch seeds randomly per process: A is drawn under ``seed`` instead."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=itf.rank, lora_alpha=itf.rank, lora_dropout=0.0, bias="none", target_modules=[itf.module],
                     init_lora_weights=True)
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        return get_peft_model(base, cfg)


def load_lora(base, adapter_dir, itf: Interfaces):
    """A LoRA trained elsewhere (or cached here), checked to be exactly I_L."""
    from peft import PeftModel

    try:
        model = PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)
    except Exception as exc:
        raise SpecError(f"LoRA adapter '{adapter_dir}' does not fit the model: {type(exc).__name__}: {exc}") from None
    lora = _lora_params(model, itf)
    got = sum(p.numel() for p in lora)
    if got != itf.lora_size:
        raise SpecError(f"LoRA adapter '{adapter_dir}' has {got} scalars on {itf.module}, the interface needs "
                        f"rank {itf.rank} = {itf.lora_size} (equal to the backbone block)")
    return model


def _base_weight(model, itf: Interfaces) -> torch.nn.Parameter:
    for name, p in model.named_parameters():
        if name.endswith(f"layers.{itf.layer}.mlp.down_proj.base_layer.weight") or (
                name.endswith(f"layers.{itf.layer}.mlp.down_proj.weight") and "lora" not in name):
            return p
    raise SpecError(f"no down-projection weight of layer {itf.layer} in the model")


def _lora_params(model, itf: Interfaces) -> list[torch.nn.Parameter]:
    ps = [p for n, p in model.named_parameters() if f"layers.{itf.layer}.mlp.down_proj.lora_" in n]
    if not ps:
        raise SpecError(f"the model has no LoRA on {itf.module}")
    return ps


def down_proj_module(model, itf: Interfaces):
    """The interface layer's down-projection as ``peft`` wraps it (base layer + LoRA)."""
    for k, v in model.named_modules():
        if k.endswith(f"layers.{itf.layer}.mlp.down_proj") and hasattr(v, "lora_A"):
            return v
    raise SpecError(f"the model has no LoRA on {itf.module}")


def _lora_delta(model, itf: Interfaces) -> torch.Tensor:
    """scaling * B @ A: the LoRA's contribution to the effective down-projection weight."""
    m = down_proj_module(model, itf)
    key = next(iter(m.lora_A))
    return m.scaling[key] * (m.lora_B[key].weight @ m.lora_A[key].weight)


class InterfaceLeaves:
    """Compact trainable leaves of one interface (``unlearning.train.TrainableLeaves``): the backbone block's
    columns (a copy, written back after each step), or the LoRA matrices themselves (trained in place)."""

    def __init__(self, model, itf: Interfaces, which: str):
        if which not in INTERFACES:
            raise SpecError(f"unknown interface {which!r}; allowed: {', '.join(INTERFACES)}")
        self.which = which
        if which == "backbone":
            self.W = _base_weight(model, itf)
            self.cols = torch.tensor(itf.columns, device=self.W.device)
            self.params = [torch.nn.Parameter(self.W.detach()[:, self.cols].clone())]
        else:
            self.W = None
            self.params = _lora_params(model, itf)

    def enable(self) -> None:
        for p in [self.W] if self.W is not None else self.params:
            p.requires_grad_(True)

    def clear_grads(self) -> None:
        for p in [*self.params, self.W]:
            if p is not None:
                p.grad = None

    def collect_grads(self) -> None:
        if self.which == "backbone":
            self.params[0].grad = self.W.grad[:, self.cols].clone()
            self.W.grad = None

    def write_back(self) -> None:
        if self.which == "backbone":
            with torch.no_grad():
                self.W[:, self.cols] = self.params[0].detach()

    def release(self) -> None:
        self.clear_grads()
        for p in [*self.params, self.W]:
            if p is not None:
                p.requires_grad_(False)


def _freeze(model) -> None:
    for p in model.parameters():
        p.requires_grad_(False)


@torch.enable_grad()
def inject(model, itf: Interfaces, rows: dict[str, TokenizedSet], *, epochs: int, lr: float, batch_size: int,
           seed: int = 0, replay: TokenizedSet | None = None, backbone_lr_scale: float = 10.0) -> list[float]:
    """One joint run: a batch of backbone targets updates only I_B, a batch of LoRA targets only I_L
    (alternating, seeded); AdamW without weight decay, so nothing outside the two interfaces moves.
    ``replay`` (background facts, never a target) joins every batch, so that an interface learns its own
    targets without rewriting what the base model answers for everything else — without it the LoRA,
    which reads every neuron, learns to emit its targets' attributes for any subject and drowns the
    backbone's targets. The backbone block learns at ``backbone_lr_scale`` x ``lr``: its inputs are the
    small activations of a few neurons, where the LoRA's A reads every neuron; at one learning rate the
    block barely moves in the time the LoRA memorises its targets (measured: docs/benchmarks.md)."""
    _freeze(model)
    sides = {w: InterfaceLeaves(model, itf, w) for w in INTERFACES}  # both trainable; a batch keeps its own grads
    for side in sides.values():
        side.enable()
    opt = torch.optim.AdamW([{"params": sides["backbone"].params, "lr": lr * backbone_lr_scale},
                             {"params": sides["lora"].params, "lr": lr}], lr=lr, weight_decay=0.0)
    steps = {w: max(1, -(-len(rows[w]) * epochs // batch_size)) for w in INTERFACES}
    order = [w for k in range(max(steps.values())) for w in INTERFACES if k < steps[w]]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: schedules.cosine(k, len(order)))
    losses = []
    done = dict.fromkeys(INTERFACES, 0)  # each interface's own step count: its batches' cursor
    model.train()
    for k, w in enumerate(order):
        data = rows[w]
        idx = batch_indices(len(data), batch_size, done[w], seed, stream=INTERFACES.index(w))
        done[w] += 1
        nll, n = sequence_nll(model, data.take(idx))
        loss = nll.sum() / n.sum()
        if replay is not None:
            ri = batch_indices(len(replay), batch_size, k, seed, stream=2)
            rn, rc = sequence_nll(model, replay.take(ri))
            loss = loss + rn.sum() / rc.sum()
        for s in sides.values():
            s.clear_grads()
        loss.backward()
        for other in INTERFACES:
            if other != w:
                sides[other].clear_grads()
        sides[w].collect_grads()
        opt.step()
        sched.step()
        sides["backbone"].write_back()
        losses.append(float(loss.detach()))
    model.eval()
    for s in sides.values():
        s.release()
    return losses


def unlearn(model, itf: Interfaces, which: str, objective, data, config) -> list[float]:
    """The objective for ``config.steps`` steps restricted to one interface, through the project's one
    unlearning loop (``SupportTrainer``): the same batches (a pure function of seed and step), schedule and
    AdamW settings whichever the interface."""
    _freeze(model)
    leaves = InterfaceLeaves(model, itf, which)
    trainer = SupportTrainer.on(model, leaves, objective, data, config, progress=False)
    try:
        return trainer.run(desc=f"unlearn {which}")
    finally:
        leaves.release()


# ---- what storage localization may read -----------------------------------------------------------------
@dataclass(frozen=True)
class TargetProbes:
    """Diagnostic phrasings only, one set per target: with the background subjects (``locators.LocatorInputs``),
    a storage locator's entire view of the data."""

    sets: dict[str, TokenizedSet]

    def __post_init__(self):
        for k, v in self.sets.items():
            if type(v) is not TokenizedSet:
                raise TypeError(f"TargetProbes.{k} must be a TokenizedSet of diagnostic phrasings, got "
                                f"{type(v).__name__}: storage localization never reads outcomes or evaluation data")
