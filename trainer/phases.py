"""What the phases of a GRPO step (:mod:`trainer.train`) hand each other, in the order they are made.

:class:`StepStart` (the step's index, timer and RNG state) -> :class:`Rollouts` (phase 1: completions, reward
requests in flight) -> :class:`Scored` (phase 3: the rewards) -> :class:`Advantages` (phase 4: what the loss
weighs each completion and token by). Each is frozen: a phase makes a new one instead of changing its input.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_client.client import RewardResult
from trainer.metrics import PhaseTimer
from trainer.rollout.base import RolloutBatch


@dataclass(frozen=True)
class StepStart:
    """What a step knows when it begins: its index, its timer, and the RNG state a failed step saves.

    Attributes:
        step: 0-based index of the step.
        rng: the state of every RNG at the start of the step; a step that stops for want of rewards stores it, so
            a resume redoes the step exactly.
        timer: per-phase wall-clock seconds of this step.
        started_s: ``time.perf_counter()`` at the start.
    """

    step: int
    rng: dict[str, Any]
    timer: PhaseTimer
    started_s: float


@dataclass(frozen=True)
class Rollouts:
    """Phase 1's output: this rank's prompts, their completions, and the reward requests already in flight.

    Attributes:
        rows: the data rows of the whole step's prompts (all ranks'), in order.
        batch: this rank's ``N = len(rows) / world_size * num_generations`` completions; rows ``i*G .. i*G+G-1``
            answer this rank's prompt ``i``.
        group_ids: ``(N,)`` explicit group ids: prompt ``i`` of the step (over all ranks) is group ``i``.
        futures: one future per chunk of groups sent to the reward server, in order.
        prompts_drawn: prompts taken from the run's prompt order (more than ``prompt_batch_size`` when dynamic
            sampling drew extra rounds).
        metrics: ``dynamic_sampling/*`` figures of the step, when it was on.
    """

    rows: list[dict[str, Any]]
    batch: RolloutBatch
    group_ids: torch.Tensor
    futures: list[Future[list[RewardResult]]]
    prompts_drawn: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Scored:
    """Phase 3's output: one reward result per completion of this rank, in batch order.

    Attributes:
        results: the server's results (reward, status, components).
        rewards: ``(N,)`` float rewards; NaN marks a completion the server could not score.
    """

    results: list[RewardResult]
    rewards: torch.Tensor


@dataclass(frozen=True)
class Advantages:
    """Phase 4's output: what the loss weighs each completion and token by.

    Attributes:
        advantages: ``(N,)`` group advantages of this rank's completions (outcome), or ``(N, C)`` token
            advantages (process), on the policy's device.
        loss_mask: ``(N, C)`` completion tokens that count in the loss; all 0 on a completion that is not trained
            on (a null reward; with process supervision, no scored step).
        num_items_in_batch: ``dapo``'s normaliser: the completion tokens that count, of the whole batch, per rank
            (the mean over ranks: gradients are averaged over ranks, see :mod:`trainer.distributed`).
        num_completions_in_batch: ``grpo``/``dr_grpo``'s normaliser: the completions with a token that counts, of
            the whole batch, per rank in the same sense.
        num_items_in_micro_batch: ``(gradient_accumulation_steps,)`` ``bnpo``'s normalisers: the tokens that count
            in each micro-step, per rank in the same sense.
        metrics: ``steps/*`` figures with process supervision.
    """

    advantages: torch.Tensor
    loss_mask: torch.Tensor
    num_items_in_batch: torch.Tensor
    num_completions_in_batch: torch.Tensor
    num_items_in_micro_batch: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
