"""Memory plan of a support-constrained run, from a model's config alone (meta device: nothing
allocated, no weights loaded): what each component costs in bytes, and the largest batch that fits a
GPU.

Components (bytes):
  weights            every parameter in the run's dtype (bf16: 2 bytes)
  editable_master    the support's fp32 master copy (4 bytes x budget scalars)
  optimizer          AdamW's two fp32 moments of the support (8 bytes x budget)
  support_indices    each support scalar's flat int64 index into its tensor (8 bytes x budget),
                     held for the whole run (``SupportLeaves.slots``: the gather and the
                     write-back)
  geometry_grads     the gradient buffers of the geometry's tensors (every MLP down-projection), in
                     the weights' dtype: autograd fills whole tensors before the support's slice is
                     taken; with ``column_grads`` (per-column contractions in hooks) only the
                     support's fp32 gradients (4 bytes x budget) and each batch's inputs at the
                     support's columns (tokens x columns, weights' dtype) instead
  leaf_grads         without ``column_grads``: the leaves' fp32 gradients (4 bytes x budget),
                     gathered after backward and replaced only when the next step's are gathered,
                     so held beside every backward after the first (with ``column_grads`` the
                     hooks write them: in ``geometry_grads``)
  reference_nll      NPO's cached reference NLLs (negligible)
  activations        saved for backward (for the forget and the retain batch when the objective has
                     a retain term: one backward of their sum), per token: per layer ~
                     (4 x d_model + 3 x d_ff) values in the weights' dtype (attention projections,
                     MLP intermediate), plus fp32 logits (4 x vocab) for the loss; with activation
                     checkpointing only one d_model value per layer is kept plus one layer's full
                     set during recomputation; with ``chunked_loss`` the loss keeps each batch's
                     last hidden states (one d_model per token) and, once per step, one chunk's
                     logits in backward (``CHUNK_TOKENS`` x vocab x 14 bytes: at most the saved fp32
                     log-softmax, its gradient and the logits' fp32 gradient, plus that gradient
                     cast to the weights' dtype)
  diagnostics        six full-size fp32 buffers (the four mean role gradients, WAGLE's two
                     per-example sums), each as large as all down-projections (``plan_diagnostics``
                     counts the buffers of any set of keys: Intervention Score's are 5, every
                     registered method's at once 13); held in the diagnostics phase only (the runner
                     drops them once the cell's methods are scored), never together with a training
                     step
The relearning attack (``plan_relearn``, runs with ``relearn_steps`` > 0) trains every parameter, at
``--batch`` x ``--length`` (a run's attack: ``relearn_batch_size`` records of the relearning set):
  weights              as above
  gradients            every parameter's, in the weights' dtype
  optimizer            AdamW's two moments of every parameter, in the weights' dtype (not the
                       support's fp32 moments above)
  activations_or_step  the larger of one batch's ``activations`` (no retain batch, whole fp32
                       logits), freed by backward, and the weights-sized temporary AdamW's
                       multi-tensor step allocates after it (the second moment's square roots)
five times the weights or more; the static run's trainer is released before it.
A DIR-R run adds ``dirr_checkpoint_bytes``: whole copies of the geometry's tensors in the weights'
dtype for C_t, the two probe branches and one terminal state per action, and the AdamW moments of
C_t's and the two branches' supports (fp32, 8 bytes x budget each; their indices go to the CPU); one
trainer lives at a time (``harness.dirr`` frees each before the next is built).
The diagnostics phase (``plan_diagnostics``) has its own peak: the weights, one full-size fp32
buffer per full-size key the cell's methods ask for, the forward graph of one diagnostics batch (as
``activations`` above, without checkpointing), the output gradients the hooks keep (one d_model per
token and layer), and one down-projection's contraction at a time (two fp32 copies of the largest
geometry tensor). This is an estimate for planning (a real run adds the CUDA context, allocator
fragmentation and other temporaries); ``bench/gpu_step.py`` measures the training and diagnostics
peaks on a GPU, ``bench/gpu_cell.py`` the relearning attack's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from supportbench.errors import SpecError

# The paper's models, by their published configurations (no download: only the shapes matter here).
ARCH_CONFIGS = {
    "llama3-8b": (
        "llama",
        dict(
            vocab_size=128256,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            max_position_embeddings=8192,
        ),
    ),
    "gemma2-2b": (
        "gemma2",
        dict(
            vocab_size=256000,
            hidden_size=2304,
            intermediate_size=9216,
            num_hidden_layers=26,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=256,
            max_position_embeddings=8192,
        ),
    ),
    "olmo3-7b": (
        "olmo3",
        dict(
            vocab_size=100278,
            hidden_size=4096,
            intermediate_size=11008,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=32,
            max_position_embeddings=65536,
        ),
    ),
    "qwen2.5-7b": (
        "qwen2",
        dict(
            vocab_size=152064,
            hidden_size=3584,
            intermediate_size=18944,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            max_position_embeddings=32768,
        ),
    ),
}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _dtype_bytes(dtype: str) -> int:
    """Bytes a weight takes in ``dtype`` (``DTYPE_BYTES``); another name is refused naming it and
    what is allowed, before any model is built."""
    if dtype not in DTYPE_BYTES:
        raise SpecError(f"dtype {dtype!r} is not allowed; allowed: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def arch_config(name: str):
    """The transformers config of one of ``ARCH_CONFIGS``."""
    import transformers

    from supportbench.errors import UnknownNameError

    if name not in ARCH_CONFIGS:
        raise UnknownNameError("architecture config", name, ARCH_CONFIGS)
    kind, kw = ARCH_CONFIGS[name]
    cls = {
        "llama": transformers.LlamaConfig,
        "gemma2": transformers.Gemma2Config,
        "olmo3": transformers.Olmo3Config,
        "qwen2": transformers.Qwen2Config,
    }[kind]
    return cls(**kw)


def meta_model(model: str):
    """A model built on the meta device from a config: an ``ARCH_CONFIGS`` name, a preset, or a
    local folder."""
    from supportbench.unlearning.models import PRESETS, meta_from_config, preset_config, read_config

    if model in ARCH_CONFIGS:
        cfg = arch_config(model)
    elif model in PRESETS:
        cfg = preset_config(PRESETS[model], pad_token_id=0, bos_token_id=1, eos_token_id=2)
    elif (Path(model) / "config.json").is_file():
        cfg = read_config(model)
    else:  # never a hub name: nothing is downloaded
        raise SpecError(
            f"model {model!r} is not a known architecture ({', '.join(ARCH_CONFIGS)}), a preset "
            f"({', '.join(PRESETS)}) or a local model folder with a config.json"
        )
    return meta_from_config(cfg, model)


@dataclass(frozen=True)
class MemoryPlan:
    model: str
    parameters: int
    geometry_scalars: int
    budget: int
    dtype: str
    batch: int
    length: int
    checkpointing: bool
    components: dict[str, int]
    column_grads: bool = False
    chunked_loss: bool = False

    @property
    def total(self) -> int:
        return sum(self.components.values())

    def without_diagnostics(self) -> int:
        return self.total - self.components["diagnostics"]


def plan_memory(
    model: str,
    budget: float,
    *,
    dtype: str = "bfloat16",
    batch: int = 8,
    length: int = 256,
    checkpointing: bool = False,
    uses_retain: bool = True,
    column_grads: bool = False,
    chunked_loss: bool = False,
) -> MemoryPlan:
    """The training step's memory (module doc). ``uses_retain``: the objective has a retain term
    (NPO, SimNPO, GradDiff; not GA), so a step holds the graphs of two batches -- forget and
    retain -- for one backward."""
    from supportbench.unlearning.support import discover_geometry

    wb = _dtype_bytes(dtype)
    m = meta_model(model)
    cfg = m.config
    geo = discover_geometry(m)
    n_params = sum(p.numel() for p in m.parameters())
    group = int(geo.costs.min())
    if budget >= 1 and budget != int(budget):
        raise SpecError(
            f"--budget {budget:g} is neither a fraction "
            "(0 < b < 1) nor a whole number of scalars (>= 1)"
        )
    scalars = int(budget) if budget >= 1 else int(budget * geo.total_cost)
    if not group <= scalars <= geo.total_cost:
        raise SpecError(
            f"--budget {budget:g} = {scalars:,} editable scalars of {model}; allowed: at least one "
            f"group ({group:,} scalars, a fraction >= {group / geo.total_cost:.3g}) and at most "
            f"all {geo.total_cost:,} of its down-projection geometry"
        )
    scalars -= scalars % group  # whole groups (columns)
    tokens = batch * length
    act = _activations(cfg, tokens, wb, checkpointing, chunked_loss) * (2 if uses_retain else 1)
    if chunked_loss:  # one chunk's logits at a time (``unlearning.chunked_loss``)
        from supportbench.unlearning.chunked_loss import CHUNK_TOKENS

        act += min(tokens, CHUNK_TOKENS) * cfg.vocab_size * 14
    comps = {
        "weights": n_params * wb,
        "editable_master": scalars * 4,
        "optimizer": scalars * 8,
        "support_indices": scalars * 8,
        "geometry_grads": (
            scalars * 4 + (2 if uses_retain else 1) * tokens * (scalars // group) * wb
            if column_grads
            else geo.total_cost * wb
        ),
        "leaf_grads": 0 if column_grads else scalars * 4,
        "reference_nll": batch * 4,
        "activations": act,
        "diagnostics": 6 * geo.total_cost * 4,
    }
    return MemoryPlan(
        model,
        n_params,
        geo.total_cost,
        scalars,
        dtype,
        batch,
        length,
        checkpointing,
        comps,
        column_grads=column_grads,
        chunked_loss=chunked_loss,
    )


def _activations(cfg, tokens: int, wb: int, checkpointing: bool, chunked_loss: bool) -> int:
    """What one batch of ``tokens`` saves for backward (the module doc's ``activations``, for one
    batch and without the chunked loss's one chunk of logits)."""
    d, f, L, V = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.vocab_size
    per_layer = (4 * d + 3 * f) * wb
    act = tokens * (L * d * wb + per_layer) if checkpointing else tokens * L * per_layer
    return act + (tokens * d * wb if chunked_loss else tokens * V * 4)  # what the loss keeps


def plan_relearn(
    model: str,
    *,
    dtype: str = "bfloat16",
    batch: int = 8,
    length: int = 256,
    checkpointing: bool = False,
) -> MemoryPlan:
    """The relearning attack's memory (``unlearning.relearn``: every parameter, AdamW): the weights,
    their gradients and AdamW's two moments, all in the weights' dtype, and the larger of two
    things that never coexist -- one batch's activations (no retain term, whole fp32 logits), freed
    by backward before the step, and the weights-sized temporary of AdamW's multi-tensor step (the
    second moment's square roots: ``torch.optim.AdamW``'s default on a GPU). Five times the
    weights at Llama 3 8B's shapes: 75.05 GiB measured on an H200 (docs/scaling.md)."""
    wb = _dtype_bytes(dtype)
    m = meta_model(model)
    n_params = sum(p.numel() for p in m.parameters())
    comps = {
        "weights": n_params * wb,
        "gradients": n_params * wb,
        "optimizer": 2 * n_params * wb,
        "activations_or_step": max(
            _activations(m.config, batch * length, wb, checkpointing, False), n_params * wb
        ),
    }
    return MemoryPlan(model, n_params, 0, 0, dtype, batch, length, checkpointing, comps)


def largest_batch(model: str, budget: float, gpu_bytes: float, **kw) -> int:
    """The largest batch (at the plan's length) whose total without diagnostics fits ``gpu_bytes``;
    0 if none."""
    best, b = 0, 1
    while b <= 4096:
        if plan_memory(model, budget, batch=b, **kw).without_diagnostics() <= gpu_bytes:
            best = b
            b *= 2
        else:
            break
    return best


def diagnostic_buffers(requires, uses_retain: bool = True) -> int:
    """How many full-size fp32 buffers (each as large as all down-projections)
    ``Diagnostics.prepare(requires)`` holds at once: one per mean/summed role gradient, random-label
    gradient and the objective direction; two per Fisher (the sum and the open micro-batch); the
    objective direction's retain term adds grad:R."""
    keys = set(requires)
    if "objective_direction" in keys and uses_retain:
        keys.add("grad:R")
    full = ("grad:", "grad_sum:", "random_label_grad:")
    return sum(1 for k in keys if k.startswith(full) or k == "objective_direction") + 2 * sum(
        1 for k in keys if k.startswith("fisher:")
    )


def plan_diagnostics(
    model: str,
    requires,
    *,
    uses_retain: bool = True,
    dtype: str = "bfloat16",
    batch: int = 16,
    length: int = 256,
) -> MemoryPlan:
    """The diagnostics phase's memory for the keys ``requires`` (a method's ``requires``, or a
    cell's union) at ``batch`` diagnostic records of ``length`` tokens to a forward pass; components
    as in the module's doc."""
    from supportbench.unlearning.support import discover_geometry

    wb = _dtype_bytes(dtype)
    m = meta_model(model)
    cfg = m.config
    geo = discover_geometry(m)
    tokens = batch * length
    largest = max(t.param.numel() for t in geo.tensors)
    comps = {
        "weights": sum(p.numel() for p in m.parameters()) * wb,
        "buffers": diagnostic_buffers(requires, uses_retain) * geo.total_cost * 4,
        "activations": _activations(cfg, tokens, wb, False, False),
        "output_grads": tokens * cfg.num_hidden_layers * cfg.hidden_size * wb,
        "contraction": 2 * largest * 4,
    }
    return MemoryPlan(
        model,
        sum(p.numel() for p in m.parameters()),
        geo.total_cost,
        0,
        dtype,
        batch,
        length,
        False,
        comps,
    )


def dirr_checkpoint_bytes(
    model: str, *, support: int, dtype: str = "bfloat16", n_actions: int = 5
) -> int:
    """What a DIR-R run holds beside a training step: the geometry's tensors (every down-projection,
    in the weights' dtype) copied for C_t, for each of the two probe branches and for each action's
    terminal state, and the fp32 AdamW moments of the three checkpoints' supports of ``support``
    scalars each (a plan's ``budget``)."""
    from supportbench.unlearning.support import discover_geometry

    wb = _dtype_bytes(dtype)
    copies = (3 + n_actions) * discover_geometry(meta_model(model)).total_cost * wb
    return copies + 3 * 8 * support
