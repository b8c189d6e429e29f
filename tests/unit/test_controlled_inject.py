"""The controlled separation's injection (``interfaces.inject``) on a tiny Qwen2 with a LoRA: two
phases in ``INJECTION_ORDER``, each moving only its own interface; the second keeps the first's
targets in its loss; and every coordinate outside the two interfaces bitwise unchanged."""

import torch

from supportbench.benchmarks.controlled import interfaces as interfaces
from supportbench.unlearning.data import IGNORE, TokenizedSet

V, L = 40, 7


def _set(n: int, seed: int) -> TokenizedSet:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, V, (n, L), generator=g)
    labels = ids.clone()
    labels[:, :-2] = IGNORE
    return TokenizedSet(ids, torch.ones_like(ids), labels)


def _block(model, itf) -> list[torch.Tensor]:
    g, u, w = interfaces._mlp_weights(model, itf)
    cols = list(itf.columns)
    return [g.detach()[cols].clone(), u.detach()[cols].clone(), w.detach()[:, cols].clone()]


def _lora(model, itf) -> list[torch.Tensor]:
    return [p.detach().clone() for p in interfaces._lora_params(model, itf)]


def test_two_phases_each_move_only_their_interface(monkeypatch, tiny_qwen2_lora):
    model, itf = tiny_qwen2_lora(V)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seen = []  # (phase's interface, block, LoRA) when each phase starts
    real = interfaces.InterfaceLeaves

    def spy(m, i, which):
        seen.append((which, _block(m, i), _lora(m, i)))
        return real(m, i, which)

    monkeypatch.setattr(interfaces, "InterfaceLeaves", spy)
    rows = {"backbone": _set(6, 1), "lora": _set(6, 2)}
    losses = interfaces.inject(
        model, itf, rows, epochs=3, lr=1e-2, batch_size=4, seed=0, replay=_set(5, 3)
    )
    assert [s[0] for s in seen] == list(interfaces.INJECTION_ORDER) == ["backbone", "lora"]
    assert list(losses) == ["backbone", "lora"] and all(
        len(v) == -(-6 * 3 // 4) for v in losses.values()
    )
    (_, block0, lora0), (_, block1, lora1) = seen
    block2, lora2 = _block(model, itf), _lora(model, itf)
    # phase 1 moved the block and not the LoRA; phase 2 the LoRA and not the block
    assert not all(torch.equal(a, b) for a, b in zip(block0, block1))
    assert all(torch.equal(a, b) for a, b in zip(lora0, lora1))
    assert all(torch.equal(a, b) for a, b in zip(block1, block2))
    assert not all(torch.equal(a, b) for a, b in zip(lora1, lora2))
    # nothing outside the two interfaces moved, bitwise
    # (weight decay 0, compact leaves written back)
    after = model.state_dict()
    names = {
        n
        for n, p in model.named_parameters()
        if any(p is q for q in interfaces._mlp_weights(model, itf))
    }
    outside = [c for c in range(itf.d_ff) if c not in itf.columns]
    for k, v in after.items():
        if "lora_" in k:
            continue
        if k in names:
            part = v[:, outside] if v.shape[1] == itf.d_ff else v[outside]
            ref = before[k][:, outside] if v.shape[1] == itf.d_ff else before[k][outside]
            assert torch.equal(part, ref), k
        else:
            assert torch.equal(v, before[k]), k


def test_the_lora_phase_keeps_the_backbone_targets_in_its_loss(monkeypatch, tiny_qwen2_lora):
    """Each step's loss terms, by the size of the set they draw from: phase 1 its own targets +
    background replay; phase 2 also a batch of phase 1's targets (without it the LoRA overwrites the
    backbone's facts)."""
    model, itf = tiny_qwen2_lora(V)
    calls = []
    real = interfaces._mean_nll

    def spy(m, data, idx):
        calls.append(len(data))
        return real(m, data, idx)

    monkeypatch.setattr(interfaces, "_mean_nll", spy)
    rows = {"backbone": _set(6, 1), "lora": _set(10, 2)}
    losses = interfaces.inject(
        model, itf, rows, epochs=2, lr=1e-2, batch_size=4, seed=0, replay=_set(5, 3)
    )
    n1, n2 = len(losses["backbone"]), len(losses["lora"])
    assert calls[: 2 * n1] == [6, 5] * n1  # phase 1: own targets + background replay
    assert calls[2 * n1 :] == [10, 5, 6] * n2  # phase 2: + the backbone's targets
