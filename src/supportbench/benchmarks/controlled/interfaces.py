"""The two parameter interfaces of the controlled separation, of exactly equal editable size, on one
layer's MLP (gate G and up U: d_ff x d_model; down-projection W: d_model x d_ff):

  backbone  I_B = a seeded contiguous block of ``c`` MLP neurons: each neuron's gate row, up row and
            down column (the neuron's whole key and value): 3 * c * d_model scalars
  lora      I_L = a ``peft`` LoRA adapter on W of rank r (B initialised to zero, kept unmerged):
            r * (d_ff + d_model) scalars

Equal size needs c = r (d_ff + d_model) / (3 d_model) to be whole (``possible_ranks`` lists the
ranks that work). ``columns`` are the block's neurons, i.e. W's input columns: W[:, I_B] = 0 removes
the block's write through W (what the locators and tests ablate); the LoRA's A still reads the
neurons' activations h[I_B], so a backbone intervention also changes what the LoRA reads
(docs/benchmarks.md discloses this asymmetry). Training restricted to one interface keeps every
other coordinate bitwise unchanged: AdamW runs on compact leaves (the block's rows and columns, or
the LoRA matrices) and writes only them back. Storage localization is the locators' (``locators/``):
from theta_0, the interfaces and *diagnostic* phrasings only (``TargetProbes``).
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
    module: str  # the down-projection's module name in the base model
    columns: tuple[int, ...]  # I_B
    rank: int  # I_L
    d_model: int
    d_ff: int

    @property
    def size(self) -> int:
        """The backbone block's scalars: a gate row, an up row and a down column per neuron."""
        return 3 * len(self.columns) * self.d_model

    @property
    def lora_size(self) -> int:
        return self.rank * (self.d_ff + self.d_model)


def possible_ranks(d_model: int, d_ff: int, limit: int = 64) -> list[int]:
    return [
        r
        for r in range(1, limit + 1)
        if (r * (d_ff + d_model)) % (3 * d_model) == 0
        and r * (d_ff + d_model) // (3 * d_model) <= d_ff
    ]


def make_interfaces(model, layer: int, rank: int, seed: int = 0) -> Interfaces:
    cfg = model.config
    L = cfg.num_hidden_layers
    layer = layer % L if -L <= layer < L else None
    if layer is None:
        raise SpecError(f"interface layer must be in -{L}..{L - 1}, the model has {L} layers")
    d, f = cfg.hidden_size, cfg.intermediate_size
    ok = possible_ranks(d, f)
    if rank not in ok:
        raise SpecError(
            f"LoRA rank {rank} cannot match a whole number of backbone neurons exactly "
            f"(r x (d_ff + d_model) / (3 d_model) with d_model={d}, d_ff={f}); possible ranks: "
            f"{', '.join(map(str, ok[:12])) or 'none'}"
        )
    c = rank * (f + d) // (3 * d)
    start = random.Random(f"controlled-block:{seed}").randrange(0, f - c + 1)
    return Interfaces(
        layer, f"model.layers.{layer}.mlp.down_proj", tuple(range(start, start + c)), rank, d, f
    )


def attach_lora(base, itf: Interfaces, seed: int = 0):
    """The base model with an unmerged LoRA (B = 0) on the interface's down-projection. peft draws A
    from torch's global RNG, which torch seeds randomly per process: A is drawn under ``seed``
    instead."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(
        r=itf.rank,
        lora_alpha=itf.rank,
        lora_dropout=0.0,
        bias="none",
        target_modules=[itf.module],
        init_lora_weights=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        return get_peft_model(base, cfg)


def load_lora(base, adapter_dir, itf: Interfaces):
    """A LoRA trained elsewhere (or cached here), checked to be exactly I_L."""
    from peft import PeftModel

    try:
        model = PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)
    except Exception as exc:
        raise SpecError(
            f"LoRA adapter '{adapter_dir}' does not fit the model: {type(exc).__name__}: {exc}"
        ) from None
    lora = _lora_params(model, itf)
    got = sum(p.numel() for p in lora)
    if got != itf.lora_size:
        raise SpecError(
            f"LoRA adapter '{adapter_dir}' has {got} scalars on {itf.module}, the interface needs "
            f"rank {itf.rank} = {itf.lora_size} (equal to the backbone block)"
        )
    return model


def _base_weight(model, itf: Interfaces) -> torch.nn.Parameter:
    for name, p in model.named_parameters():
        if name.endswith(f"layers.{itf.layer}.mlp.down_proj.base_layer.weight") or (
            name.endswith(f"layers.{itf.layer}.mlp.down_proj.weight") and "lora" not in name
        ):
            return p
    raise SpecError(f"no down-projection weight of layer {itf.layer} in the model")


def _mlp_weights(
    model, itf: Interfaces
) -> tuple[torch.nn.Parameter, torch.nn.Parameter, torch.nn.Parameter]:
    """The interface layer's gate, up and down-projection weights (the down-projection's base
    weight)."""
    found = {}
    for name, p in model.named_parameters():
        for part in ("gate_proj", "up_proj"):
            if name.endswith(f"layers.{itf.layer}.mlp.{part}.weight"):
                found[part] = p
    if set(found) != {"gate_proj", "up_proj"}:
        raise SpecError(
            f"layer {itf.layer}'s MLP has no gate_proj/up_proj: "
            "the backbone block needs a gated MLP"
        )
    return found["gate_proj"], found["up_proj"], _base_weight(model, itf)


def _lora_params(model, itf: Interfaces) -> list[torch.nn.Parameter]:
    ps = [p for n, p in model.named_parameters() if f"layers.{itf.layer}.mlp.down_proj.lora_" in n]
    if not ps:
        raise SpecError(f"the model has no LoRA on {itf.module}")
    return ps


def allowed(model, itf: Interfaces, which: str) -> dict[str, torch.Tensor]:
    """The coordinates an intervention through ``which`` may change, as the enforcement count's
    ``allowed`` (``unlearning.enforcement``): the LoRA's own parameters whole, or the backbone
    block's neurons (the gate and up rows, the down-projection's columns); nothing else."""
    names = {id(p): n for n, p in model.named_parameters()}
    if which == "lora":
        return {
            names[id(p)]: torch.ones(p.shape, dtype=torch.bool) for p in _lora_params(model, itf)
        }
    if which != "backbone":
        raise SpecError(f"unknown controlled interface {which!r}; allowed: {', '.join(INTERFACES)}")
    gate, up, down = _mlp_weights(model, itf)
    block = torch.zeros(down.shape[1], dtype=torch.bool)
    block[list(itf.columns)] = True
    return {
        names[id(gate)]: block.view(-1, 1).expand(gate.shape),
        names[id(up)]: block.view(-1, 1).expand(up.shape),
        names[id(down)]: block.view(1, -1).expand(down.shape),
    }


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
    """Compact trainable leaves of one interface (``unlearning.train.TrainableLeaves``): the
    backbone block's gate rows, up rows and down columns (copies, written back after each step), or
    the LoRA matrices themselves (trained in place)."""

    def __init__(self, model, itf: Interfaces, which: str):
        if which not in INTERFACES:
            raise SpecError(f"unknown interface {which!r}; allowed: {', '.join(INTERFACES)}")
        self.which = which
        if which == "backbone":
            self.full = _mlp_weights(model, itf)  # gate, up, down
            self.cols = torch.tensor(itf.columns, device=self.full[2].device)
            self.params = [torch.nn.Parameter(v.clone()) for v in self._views()]
        else:
            self.full = ()
            self.params = _lora_params(model, itf)

    def _views(self, grads: bool = False) -> list[torch.Tensor]:
        g, u, w = (p.grad if grads else p.detach() for p in self.full)
        return [g[self.cols], u[self.cols], w[:, self.cols]]

    def enable(self) -> None:
        for p in self.full or self.params:
            p.requires_grad_(True)

    def clear_grads(self) -> None:
        for p in (*self.params, *self.full):
            p.grad = None

    def collect_grads(self) -> None:
        if self.which == "backbone":
            for leaf, grad in zip(self.params, self._views(grads=True)):
                leaf.grad = grad.clone()
            for p in self.full:
                p.grad = None

    def write_back(self) -> None:
        if self.which == "backbone":
            g, u, w = self.full
            with torch.no_grad():
                g[self.cols] = self.params[0].detach()
                u[self.cols] = self.params[1].detach()
                w[:, self.cols] = self.params[2].detach()

    def release(self) -> None:
        self.clear_grads()
        for p in (*self.params, *self.full):
            p.requires_grad_(False)


def _freeze(model) -> None:
    for p in model.parameters():
        p.requires_grad_(False)


# the backbone's facts first, as a pretrained model's predate an adapter
INJECTION_ORDER = ("backbone", "lora")


def _mean_nll(model, data: TokenizedSet, idx) -> torch.Tensor:
    nll, n = sequence_nll(model, data.take(idx))
    return nll.sum() / n.sum()


@torch.enable_grad()
def inject(
    model,
    itf: Interfaces,
    rows: dict[str, TokenizedSet],
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int = 0,
    replay: TokenizedSet | None = None,
) -> dict[str, list[float]]:
    """Two phases in ``INJECTION_ORDER``, each training only its own interface on its own targets
    for ``epochs`` (AdamW without weight decay, so nothing outside the interface moves; cosine
    schedule; batches a pure function of seed and step): first the backbone block, then the LoRA.
    Every batch is joined by a batch of ``replay`` (background facts, never a target), so that an
    interface learns its own targets without rewriting what the base model answers for everything
    else, and in the second phase by a batch of the first phase's targets, so that the LoRA keeps
    the backbone's facts as it found them instead of overwriting them (without it the LoRA phase
    takes the backbone targets' median recall from 0.99 to 0.04; with them only in the background
    replay, where they are 3 % of the rows, to 0.75: docs/benchmarks.md)."""
    _freeze(model)
    losses: dict[str, list[float]] = {}
    kept: list[TokenizedSet] = []
    for phase, w in enumerate(INJECTION_ORDER):
        side = InterfaceLeaves(model, itf, w)
        side.enable()
        opt = torch.optim.AdamW(side.params, lr=lr, weight_decay=0.0)
        data = rows[w]
        n_steps = max(1, -(-len(data) * epochs // batch_size))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k, n=n_steps: schedules.cosine(k, n))
        losses[w] = []
        model.train()
        for k in range(n_steps):
            loss = _mean_nll(
                model, data, batch_indices(len(data), batch_size, k, seed, stream=phase)
            )
            if replay is not None:
                loss = loss + _mean_nll(
                    model, replay, batch_indices(len(replay), batch_size, k, seed, stream=2)
                )
            for j, old in enumerate(kept):
                loss = loss + _mean_nll(
                    model, old, batch_indices(len(old), batch_size, k, seed, stream=3 + j)
                )
            side.clear_grads()
            loss.backward()
            side.collect_grads()
            opt.step()
            sched.step()
            side.write_back()
            losses[w].append(float(loss.detach()))
        model.eval()
        side.release()
        kept.append(data)
    return losses


def unlearn(
    model, itf: Interfaces, which: str, objective, data, config, on_step=None
) -> list[float]:
    """The objective for ``config.steps`` steps restricted to one interface, through the project's
    one unlearning loop (``SupportTrainer``): the same batches (a pure function of seed and step),
    schedule and AdamW settings whichever the interface. ``on_step``: called with the step number
    after every step (a run's curve), or None."""
    _freeze(model)
    leaves = InterfaceLeaves(model, itf, which)
    trainer = SupportTrainer.on(model, leaves, objective, data, config, progress=False)
    trainer.on_step = on_step
    try:
        return trainer.run(desc=f"unlearn {which}")
    finally:
        leaves.release()


# ---- what storage localization may read ----------------------------------------------------------
@dataclass(frozen=True)
class TargetProbes:
    """Diagnostic phrasings only, one set per target: with the background subjects
    (``locators.LocatorInputs``), a storage locator's entire view of the data."""

    sets: dict[str, TokenizedSet]

    def __post_init__(self):
        for k, v in self.sets.items():
            if type(v) is not TokenizedSet:
                raise TypeError(
                    f"TargetProbes.{k} must be a TokenizedSet of diagnostic phrasings, got "
                    f"{type(v).__name__}: storage localization "
                    "never reads outcomes or evaluation data"
                )
