"""AdamW and the learning-rate schedule shared by ``train`` (GRPO) and ``sft``.

The schedule is a linear warm-up then ``constant``, ``linear`` (to 0) or ``cosine`` (to 0) decay, as in
``transformers.get_scheduler``, with one difference: the warm-up starts at ``lr / (warmup_steps + 1)``, not at 0.
``transformers`` runs the first update at learning rate 0, so with ``warmup_steps: 10`` one update in eleven is
wasted and the logged rate is the next update's. Here update ``u`` (0-based) runs at

* ``lr * (u + 1) / (warmup_steps + 1)`` while ``u < warmup_steps``,
* then ``lr`` (``constant``), ``lr * (T - u) / (T - warmup_steps)`` (``linear``) or
  ``lr * (1 + cos(pi * (u - warmup_steps) / (T - warmup_steps))) / 2`` (``cosine``), with ``T`` the number of
  updates of the run, so the last update still runs at a rate above 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # trainer.config imports LR_SCHEDULERS from here
    from trainer.config.groups import OptimizerOptions

LR_SCHEDULERS = ("constant", "linear", "cosine")


def lr_factor(update: int, *, schedule: str, warmup_steps: int, num_updates: int) -> float:
    """The multiple of the peak learning rate that update ``update`` (0-based) of ``num_updates`` runs at.

    Raises:
        ValueError: an unknown ``schedule``.
    """
    if update < warmup_steps:
        return (update + 1) / (warmup_steps + 1)
    decay_updates = max(1, num_updates - warmup_steps)
    progress = min(1.0, (update - warmup_steps) / decay_updates)  # 0 at the peak, < 1 at the last update
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"lr_scheduler_type must be one of {LR_SCHEDULERS}, got {schedule!r}")


def build_optimizer(
    params: Iterable[torch.nn.Parameter], config: OptimizerOptions, num_updates: int
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with the config's betas, epsilon and weight decay, and the schedule of this module.

    Call ``scheduler.step()`` after each ``optimizer.step()``; ``optimizer.param_groups[0]["lr"]`` before the
    optimizer step is the rate that update runs at (what ``optim/lr`` logs).

    Args:
        params: the parameters to train.
        config: a ``GRPOConfig`` or ``SFTConfig``.
        num_updates: optimizer steps of the whole run (``T`` in the schedule).
    """
    optimizer = torch.optim.AdamW(
        params,
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
        weight_decay=config.weight_decay,
    )
    factor = partial(
        lr_factor, schedule=config.lr_scheduler_type, warmup_steps=config.warmup_steps, num_updates=num_updates
    )
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The learning rate the next ``optimizer.step()`` uses."""
    return float(optimizer.param_groups[0]["lr"])


def resume_lr(optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LambdaLR) -> None:
    """After loading a checkpoint's optimizer and scheduler state, set the rate of the next update from this run's
    schedule: a run resumed with a larger ``max_steps`` (more updates to decay over) continues on its own schedule
    rather than at the rate the shorter run had set for its own next update."""
    for group, base, factor in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
        group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [float(group["lr"]) for group in optimizer.param_groups]  # what get_last_lr() reports
