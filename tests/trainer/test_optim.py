"""The learning-rate schedule: no update at rate 0, decay to (nearly) 0 by the last update."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.config import SFTConfig
from trainer.optim import build_optimizer, current_lr, lr_factor


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        # warmup_steps = 3 of 8 updates: 1/4, 2/4, 3/4, then the peak and the decay over the 5 updates left.
        ("constant", [0.25, 0.5, 0.75, 1, 1, 1, 1, 1]),
        ("linear", [0.25, 0.5, 0.75, 1, 0.8, 0.6, 0.4, 0.2]),
        ("cosine", [0.25, 0.5, 0.75, *(0.5 * (1 + math.cos(math.pi * k / 5)) for k in range(5))]),
    ],
)
def test_lr_factor_hand_computed(schedule: str, expected: list[float]) -> None:
    got = [lr_factor(u, schedule=schedule, warmup_steps=3, num_updates=8) for u in range(8)]
    assert got == pytest.approx(expected)
    assert min(got) > 0  # no update is wasted at rate 0


def test_without_warm_up_the_first_update_runs_at_the_peak() -> None:
    assert lr_factor(0, schedule="linear", warmup_steps=0, num_updates=4) == 1.0
    with pytest.raises(ValueError, match="lr_scheduler_type"):
        lr_factor(0, schedule="step", warmup_steps=0, num_updates=4)


def test_the_scheduler_gives_each_update_its_rate() -> None:
    cfg = SFTConfig(model_name_or_path="m", train_data="t", learning_rate=0.1, warmup_steps=1)
    optimizer, scheduler = build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg, 3)
    rates = []
    for _ in range(3):
        rates.append(current_lr(optimizer))
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([0.05, 0.1, 0.05])  # warm-up 1/2, peak, then linear: (3 - 2) / (3 - 1)
