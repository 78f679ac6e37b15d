"""Composition: an item's component scores, weighed into its one reward and its status.

The reward is the weighted sum, or ``None`` when a weighted component could not be scored (its status, or
that of the component it needs, then becomes the item's status). Components that run on the event loop
(:attr:`~reward_server.engine.components.Where.INLINE`) run here, after what they need.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from reward_server.engine.components import Component, ItemFields, Where
from reward_server.engine.resolve import ResolvedComponent
from reward_server.schemas.rewards import ComponentResult, RewardItem, RewardResult
from reward_server.verifiers.base import ComponentScore


def _root_status(component: Component, result: ComponentScore, done: Mapping[str, ComponentScore]) -> str:
    """The status that says why ``component`` could not be scored: that of a component it needs which could
    not be scored either (cosine without an accuracy verdict is ``invalid_ground_truth`` or ``timeout``,
    which a trainer acts on, even when accuracy's own weight is 0), else its own."""
    for need in component.needs:
        if done[need].score is None:
            return done[need].status
    return result.status


def combine(
    item: RewardItem,
    resolved: list[ResolvedComponent],
    done: dict[str, ComponentScore],
    fields: ItemFields,
    late_status: str,
    late_detail: str,
    tally: Counter[tuple[str, str]],
) -> RewardResult:
    """Run the item's ``INLINE`` components (after what they need), then weigh everything into its result;
    a component left unscored (the budget or the drain ran out) gets ``late_status``."""
    for r in resolved:
        if r.component.name not in done and r.component.where_for(item.task) is not Where.INLINE:
            done[r.component.name] = ComponentScore(None, late_status, late_detail)
    pending = [r for r in resolved if r.component.name not in done]
    while pending:
        ready = [r for r in pending if all(n in done for n in r.component.needs)]
        for r in ready:
            assert r.component.score is not None
            done[r.component.name] = r.component.score(fields, r.params, done)
        pending = [r for r in pending if r not in ready]

    components: dict[str, ComponentResult] = {}
    reward: float | None = 0.0
    status = "ok"
    for r in resolved:
        s = done[r.component.name]
        score = s.score if s.score is not None else r.component.neutral.get(s.status)
        detail = s.detail
        if s.score is None and score is not None:
            detail = f"{detail or s.status}; abstained, counted as {score:g} in the reward"
        components[r.component.name] = ComponentResult(
            score=s.score, weight=r.weight, status=s.status, detail=detail, info=s.info
        )
        if r.weight == 0:
            continue
        if score is None:
            if reward is not None:
                status = _root_status(r.component, s, done)
            reward = None
        elif reward is not None:
            reward += r.weight * score
        tally[r.component.name, s.status] += 1
    return RewardResult(id=item.id, reward=reward, status=status, components=components)
