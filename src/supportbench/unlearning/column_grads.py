"""Column gradients (the ``column_grads`` run setting): a support's gradients without autograd's
whole-tensor gradient buffers.

By default the geometry's tensors require grad, autograd fills each whole down-projection's gradient
buffer (3.5 GiB at Llama 3 8B in bf16) and ``SupportLeaves`` gathers the support's coordinates from
it. Here nothing in the model requires grad: a forward hook on each down-projection that holds
support groups keeps the layer's input at those columns and, in backward, contracts it with the
layer's output gradient straight into the compact fp32 leaf (``_SupportGrad``):
``grad W[rows, cols] = sum over tokens of go[:, rows]^T x[:, cols]``. The same gradient up to the
order of a sum (fp32 to float32 noise; in bf16 the contraction is fp32 where the default's buffer is
bf16), bitwise the same frozen coordinates, any objective, with or without activation checkpointing
(``tests/unit/test_column_grads.py``).

``use_column_grads(trainer)`` switches a ``SupportTrainer`` built the usual way; the runner and
DIR-R call it on every trainer of a run whose spec sets ``column_grads = true``. A model carries at
most one set of these hooks: switching another trainer on the same model removes the previous one's.
(``ColumnLeaves`` extends ``SupportLeaves`` rather than standing beside it: the trainer checkpoints
a support only through ``SupportLeaves``' slots, and the cached theta_0s' keys hash ``train.py``.)
"""

from __future__ import annotations

import weakref

import torch

from supportbench.errors import SpecError
from supportbench.unlearning.train import SupportLeaves

# model -> (a weak reference to the ColumnLeaves whose hooks are on it, their handles)
_HOOKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _SupportGrad(torch.autograd.Function):
    """Identity on a linear layer's output whose backward also returns the support's block of the
    weight's gradient, in fp32, as the gradient of ``proxy`` (a view of the compact leaf).
    ``x_sel`` is the layer's input at the support's columns, detached: the input's own gradient
    still flows through the layer's output."""

    @staticmethod
    def forward(ctx, out, x_sel, proxy, rows):
        ctx.save_for_backward(x_sel)
        ctx.rows = rows
        return out.view_as(out)

    @staticmethod
    def backward(ctx, g):
        (x_sel,) = ctx.saved_tensors
        go = g.reshape(-1, g.shape[-1])
        if ctx.rows is not None:
            go = go.index_select(1, ctx.rows)
        grad = go.to(torch.float32).T @ x_sel.reshape(-1, x_sel.shape[-1]).to(torch.float32)
        return g, None, grad, None


class ColumnLeaves(SupportLeaves):
    """``SupportLeaves`` whose gradients come from the hooks (module doc): the same slots, compact
    leaves (the optimizer's parameters) and write-back; other ``enable``, gradients and
    ``release``."""

    def __init__(self, leaves: SupportLeaves, model):
        # the switched leaves' own state, shared: the optimizer already holds these parameters
        self.geometry, self.support = leaves.geometry, leaves.support
        self.slots, self.params = leaves.slots, leaves.params
        self.model = model
        self.taps = [tap(model, t, i, leaf) for t, i, leaf in self.slots]

    def enable(self) -> None:
        for t, _, _ in self.slots:
            t.param.grad = None
            t.param.requires_grad_(False)
        self._install()

    def _install(self) -> None:
        """This trainer's hooks on the model, in place of any earlier trainer's (one set per
        model)."""
        remove_column_hooks(self.model)
        handles = []
        for module, rows, cols, leaf, shape in self.taps:

            def hook(mod, args, out, rows=rows, cols=cols, leaf=leaf, shape=shape):
                if not torch.is_grad_enabled():
                    return None
                x = args[0].detach()
                x_sel = x if cols is None else x.index_select(-1, cols)
                return _SupportGrad.apply(out, x_sel, leaf.view(shape), rows)

            handles.append(module.register_forward_hook(hook))
        _HOOKS[self.model] = (weakref.ref(self), handles)  # not self: it holds the model

    def clear_grads(self) -> None:
        # a trainer built on the same model since (one not yet released) took the hooks: ours now
        owner = _HOOKS.get(self.model, (None,))[0]
        if owner is None or owner() is not self:
            self._install()
        for _, _, leaf in self.slots:
            leaf.grad = None

    def collect_grads(self) -> None:
        for t, _, leaf in self.slots:  # the hooks wrote them: every down-projection is on the path
            if leaf.grad is None:
                raise RuntimeError(
                    f"column_grads: no gradient reached the support of {t.name!r} (its forward "
                    "hook did not run in this step's loss); the step would train it on zeros"
                )

    def release(self) -> None:
        remove_column_hooks(self.model)
        super().release()


def remove_column_hooks(model) -> None:
    """Take any column-gradient hooks off ``model`` (none: nothing to do). The runner calls it when
    it resets a model to theta_0: a column_grads run that failed mid-training leaves none behind."""
    _, handles = _HOOKS.pop(model, (None, []))
    for h in handles:
        h.remove()


def tap(model, t, i, leaf):
    """(module, rows or None, columns or None, leaf, block shape) of one geometry tensor: its
    support is a block of whole columns (axis 1) or rows (axis 0) of an ``nn.Linear`` weight, and
    the leaf's flat order is that block's row-major order (checked)."""
    module = model.get_submodule(t.module_name)
    if not isinstance(module, torch.nn.Linear) or t.name != f"{t.module_name}.weight":
        raise SpecError(
            "column_grads needs the geometry's tensors to be nn.Linear weights; "
            f"{t.name!r} is not (use column_grads = false)"
        )
    out_f, in_f = t.param.shape
    rows, cols = torch.unique(i // in_f), torch.unique(i % in_f)
    block = (rows[:, None] * in_f + cols[None, :]).reshape(-1)
    if block.numel() != i.numel() or not torch.equal(block, i):
        raise SpecError(
            f"column_grads: the support of {t.name!r} ({i.numel():,} coordinates in "
            f"{rows.numel()} rows x {cols.numel()} columns) is not a block of whole columns or "
            "rows; allowed: the geometry's groups, each a whole column or row of the weight "
            "(use column_grads = false for any other support)"
        )
    return (
        module,
        None if rows.numel() == out_f else rows,
        None if cols.numel() == in_f else cols,
        leaf,
        (rows.numel(), cols.numel()),
    )


def use_column_grads(trainer, on: bool = True):
    """Switch a ``SupportTrainer`` over a support to column gradients (in place; returned). With
    ``on`` false it is returned as it is, so callers can pass the run's setting."""
    if not on:
        return trainer
    if type(trainer.leaves) is not SupportLeaves:
        raise SpecError(
            "column_grads applies to a support of the geometry; this trainer's leaves are "
            f"{type(trainer.leaves).__name__}"
        )
    trainer.leaves = ColumnLeaves(trainer.leaves, trainer.model)
    trainer.leaves.enable()
    return trainer
