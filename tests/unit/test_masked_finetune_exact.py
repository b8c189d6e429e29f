"""``masked_finetune`` (LACUNA's theta_0 injection) is bitwise the loop it replaced.

The loop was made cheaper (per-group masks decoded once, frozen values and Adam moments held whole
and put back with ``torch.where`` instead of boolean gathers/scatters, dropout's indices found
once). Mini LACUNA's theta_0 hash must not move, so this runs the previous implementation, kept
verbatim below as the reference, and the current one from the same start and asserts every
parameter, every Adam moment and every loss is identical, bit for bit (bit patterns compared, so
even a -0. for a 0. fails).
"""

import copy

import pytest
import torch
from tqdm.auto import tqdm

from supportbench.errors import DivergenceError, SpecError
from supportbench.unlearning import schedules
from supportbench.unlearning import train as train
from supportbench.unlearning.data import TokenizedSet, concat_sets
from supportbench.unlearning.train import NEUTRAL_BIT, FinetuneConfig, _group_bit


# ---- reference: masked_finetune / _with_group_dropout / _fit as of commit 10fc90c (verbatim) -----
def _ref_masked_finetune(
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
        batches = _ref_with_group_dropout(
            model, batches, masks, n_groups, group_dropout, dropout_seed
        )
    return _ref_fit(model, data, batches, steps, masks, config, progress, desc)


def _ref_with_group_dropout(model, batches, masks, n_groups: int, p: float, seed: int):
    named = dict(model.named_parameters())
    start = {
        n: q.detach().clone() for n, q in named.items() if n in masks
    }  # theta_pre, where masks reach
    owned = {
        h: {n: ((t & _group_bit(h)) != 0).view_as(named[n]) for n, t in masks.items() if n in named}
        for h in range(n_groups)
    }
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
            for h in drop:
                for n, sel in owned[h].items():
                    q = named[n]
                    held.append((q, sel, q[sel].clone()))
                    q[sel] = start[n][sel]
        yield grp, idx
        with torch.no_grad():
            for q, sel, v in held:
                q[sel] = v


@torch.enable_grad()
def _ref_fit(
    model,
    data: TokenizedSet,
    batches,
    steps: int,
    masks: dict[str, torch.Tensor],
    config: FinetuneConfig,
    progress: bool,
    desc: str,
) -> list[float]:
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
    group_keep: dict[int, dict[str, torch.Tensor]] = {}
    with tqdm(batches, total=steps, desc=desc, disable=not progress, leave=False) as bar:
        for k, (grp, idx) in enumerate(bar):
            keep = (
                {}
                if grp < 0
                else group_keep.get(grp)
                or group_keep.setdefault(
                    grp,
                    {
                        name: (
                            torch.zeros_like(p, dtype=torch.bool)
                            if masks.get(name) is None
                            else ((masks[name] & _group_bit(grp)) != 0).view_as(p)
                        )
                        for name, p in named.items()
                    },
                )
            )
            nll, n = sequence_nll(model, data.take(idx))
            loss = nll.sum() / n.sum()
            if not torch.isfinite(loss):
                raise DivergenceError(k, float(loss))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            frozen = {}
            with torch.no_grad():
                for name, sel in keep.items():
                    p = named[name]
                    if p.grad is not None:
                        p.grad.mul_(sel.to(p.grad.dtype))
                    if not sel.all():  # what must not move: its value and its optimizer moments
                        st = opt.state.get(p, {})
                        frozen[name] = (
                            ~sel,
                            p[~sel].clone(),
                            {m: st[m][~sel].clone() for m in ("exp_avg", "exp_avg_sq") if m in st},
                        )
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            with torch.no_grad():
                for name, (sel, values, moments) in frozen.items():
                    p = named[name]
                    p[sel] = values
                    st = opt.state[p]
                    for m, v in moments.items():
                        st[m][sel] = v
            losses.append(float(loss.detach()))
            if k % 20 == 0:
                bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    model.eval()
    for p in params:
        p.requires_grad_(False)
    return losses


# ---- the comparison ------------------------------------------------------------------------------
def _masks(model, n_groups=3, seed=0):
    """Every case the loop distinguishes: partial masks (some scalars owned by two groups, so
    dropout's put-back order matters), a tensor one group owns whole, one every group owns whole, a
    zero mask, tensors without a mask entry (embeddings, norms), 2-D and flat (mask.pt's layout)
    masks."""
    gen = torch.Generator().manual_seed(seed)
    choices = torch.tensor([0, 1, 2, 4, 1 | 2, 1 | 4], dtype=torch.int32)
    out = {}
    for n, p in model.named_parameters():
        if p.ndim != 2 or "embed_tokens" in n:
            continue
        bits = choices[torch.randint(0, len(choices), p.shape, generator=gen)]
        out[n] = bits.reshape(-1) if ".layers.1." in n else bits
    out["model.layers.1.self_attn.q_proj.weight"] = torch.ones(
        32 * 32, dtype=torch.int32
    )  # group 0's whole
    out["model.layers.1.self_attn.k_proj.weight"] = torch.full(
        (32, 32), (1 << n_groups) - 1, dtype=torch.int32
    )
    out["model.layers.1.self_attn.v_proj.weight"] = torch.zeros(
        32, 32, dtype=torch.int32
    )  # nobody's
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns (torch.equal alone would take -0. for 0.)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.detach().contiguous().view(ints[t.element_size()]) if t.is_floating_point() else t


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


class _RecordedAdamW(torch.optim.AdamW):
    made: list = []

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        _RecordedAdamW.made.append(self)


def _train(fn, model, data, groups, masks, cfg, monkeypatch, **kw):
    m = copy.deepcopy(model)
    _RecordedAdamW.made = []
    monkeypatch.setattr(torch.optim, "AdamW", _RecordedAdamW)
    torch.manual_seed(0)
    losses = fn(m, data, groups, masks, cfg, progress=False, **kw)
    (opt,) = _RecordedAdamW.made
    named = dict(m.named_parameters())
    state = {n: {k: v.clone() for k, v in opt.state[p].items()} for n, p in named.items()}
    return losses, {n: p.detach().clone() for n, p in named.items()}, state


@pytest.mark.parametrize(
    "group_dropout,unowned_frozen", [(0.0, False), (0.0, True), (0.5, False), (0.5, True)]
)
def test_masked_finetune_is_bitwise_the_reference_loop(
    tiny_model, tiny_sets, tiny_tokenizer, monkeypatch, group_dropout, unowned_frozen
):
    data = concat_sets(
        [tiny_sets["forget"], tiny_sets["retain"], tiny_sets["protected"], tiny_sets["neutral"]],
        tiny_tokenizer.pad_token_id,
    )
    groups = torch.tensor([i % 4 - 1 for i in range(len(data))])  # neutral (-1) and groups 0, 1, 2
    masks = _masks(tiny_model)
    cfg = FinetuneConfig(epochs=4, lr=1e-2, batch_size=2, weight_decay=0.1, warmup_frac=0.1, seed=0)
    kw = dict(group_dropout=group_dropout, unowned_frozen=unowned_frozen, dropout_seed=3)
    want_losses, want, want_state = _train(
        _ref_masked_finetune, tiny_model, data, groups, masks, cfg, monkeypatch, **kw
    )
    got_losses, got, got_state = _train(
        train.masked_finetune, tiny_model, data, groups, masks, cfg, monkeypatch, **kw
    )

    start = dict(tiny_model.named_parameters())
    assert any(not torch.equal(want[n], start[n]) for n in want), "the reference trained nothing"
    assert got_losses == want_losses
    for n in want:
        assert _same(got[n], want[n]), f"{n}: parameter differs from the reference loop"
        assert want_state[n].keys() == got_state[n].keys()
        for k in want_state[n]:
            assert _same(got_state[n][k], want_state[n][k]), (
                f"{n}: Adam {k} differs from the reference loop"
            )


def test_finetune_shares_the_loop_and_is_the_reference_too(tiny_model, tiny_sets, monkeypatch):
    """``finetune`` (theta_pre's pretraining) runs the same ``_fit``: no masks, still the reference,
    bit for bit."""
    import math

    def ref_finetune(model, data, _groups, _masks, config, progress=True):
        steps = max(1, math.ceil(len(data) * config.epochs / config.batch_size))
        batches = (
            (-1, train.batch_indices(len(data), config.batch_size, k, config.seed, stream=2))
            for k in range(steps)
        )
        return _ref_fit(model, data, batches, steps, {}, config, progress, "fine-tune")

    def finetune(model, data, _groups, _masks, config, progress=True):
        return train.finetune(model, data, config, progress=progress)

    data = tiny_sets["forget"]
    cfg = FinetuneConfig(epochs=3, lr=1e-2, batch_size=2, weight_decay=0.1, warmup_frac=0.1, seed=0)
    want = _train(ref_finetune, tiny_model, data, None, {}, cfg, monkeypatch)
    got = _train(finetune, tiny_model, data, None, {}, cfg, monkeypatch)
    assert got[0] == want[0]
    assert all(_same(got[1][n], want[1][n]) for n in want[1])
    assert all(_same(got[2][n][k], want[2][n][k]) for n in want[2] for k in want[2][n])
