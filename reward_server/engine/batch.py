"""The batch: what the routers and the offline ``score`` command call to score a validated batch."""

from __future__ import annotations

import asyncio

from reward_server.engine.context import ScoringContext
from reward_server.engine.dispatch import score_components
from reward_server.engine.resolve import ResolvedComponent
from reward_server.engine.steps import score_steps
from reward_server.schemas.rewards import RewardItem, RewardResult


async def score_batch(
    items: list[RewardItem],
    resolved: list[list[ResolvedComponent]],
    ctx: ScoringContext,
    drain_stop: asyncio.Event | None = None,
    budget_s: float | None = None,
) -> list[RewardResult]:
    """Score a validated batch; results in item order, exactly one per item.

    The components run as :func:`~reward_server.engine.dispatch.score_components` says (``drain_stop``, ``budget_s``:
    see there); step rewards, for the items that ask for them, are scored beside them
    (:mod:`reward_server.engine.steps`).
    """
    results, steps = await asyncio.gather(
        score_components(items, resolved, ctx, drain_stop=drain_stop, budget_s=budget_s), score_steps(items, ctx)
    )
    for result, item_steps in zip(results, steps, strict=True):
        result.steps = item_steps
    return results
