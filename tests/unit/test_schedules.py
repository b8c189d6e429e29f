"""Learning-rate schedules: pure functions of the step, checked against hand-computed values."""

import math

import pytest

from supportbench.unlearning import schedules
from supportbench.unlearning.train import TrainConfig


def test_constant_after_warmup():
    # warm-up 4 steps to lr 0.1: 0.025, 0.05, 0.075, 0.1, then 0.1 for ever
    assert [schedules.constant_after_warmup(k, 0.1, 4) for k in range(6)] == pytest.approx(
        [0.025, 0.05, 0.075, 0.1, 0.1, 0.1]
    )
    assert schedules.constant_after_warmup(0, 0.1, 0) == 0.1
    assert TrainConfig(lr=0.1, warmup_steps=4).lr_at(1) == pytest.approx(0.05)


def test_warmup_cosine():
    # 10 steps, 2 of warm-up: 1/2, 1, then cos decay over the 8 remaining steps
    got = [schedules.warmup_cosine(k, 10, 2) for k in range(10)]
    assert got[:2] == [0.5, 1.0]
    assert got[2] == 1.0 and got[6] == pytest.approx(0.5)  # halfway through the decay
    assert got[9] == pytest.approx(0.5 * (1 + math.cos(math.pi * 7 / 8)))
    assert all(a >= b for a, b in zip(got[1:], got[2:]))  # non-increasing after warm-up


def test_cosine():
    assert schedules.cosine(0, 8) == 1.0
    assert schedules.cosine(4, 8) == pytest.approx(0.5)
    assert schedules.cosine(8, 8) == pytest.approx(0.0, abs=1e-15)
