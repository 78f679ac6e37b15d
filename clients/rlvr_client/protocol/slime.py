"""slime's reward protocol, both ways: a ``Sample`` (or its route's ``{"prompt", "response", "label"}``) as an
item, and a result as slime's reward. Pure: the server's ``/v1/slime`` route and the client's
:mod:`rlvr_client.slime` reward model both translate with these (see that module for the policy on a
completion the server could not score).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlvr_client.chat import prompt_text
from rlvr_client.labels import label_fields
from rlvr_client.protocol.items import RewardItem
from rlvr_client.protocol.results import RewardResult

__all__ = ["NULL_REWARD", "group_rewards", "item_for_sample", "reply", "sample_item"]

NULL_REWARD = 0.0


def item_for_sample(
    prompt: Any,
    response: str,
    label: Any,
    *,
    item_id: str,
    num_tokens: int | None = None,
    truncated: bool = False,
) -> RewardItem:
    """The :class:`RewardItem` for one slime sample.

    Raises:
        rlvr_client.labels.LabelError: the label cannot be read.
    """
    fields = label_fields(label)
    fields.setdefault("task", "math")
    if num_tokens is not None:
        fields.setdefault("num_tokens", num_tokens)
    if truncated:
        fields["truncated"] = True
    return RewardItem(id=item_id, response=response, prompt=prompt_text(prompt), **fields)


def reply(result: RewardResult) -> dict[str, Any]:
    """The route's answer for one sample: ``reward`` (a number always: 0.0 when it could not be scored),
    ``scored``, ``status`` and each component's score (``None`` when it could not be scored)."""
    return {
        "reward": NULL_REWARD if result.reward is None else result.reward,
        "scored": result.reward is not None,
        "status": result.status,
        "components": {name: c.score for name, c in result.components.items()},
    }


def sample_item(sample: Any, item_id: str) -> RewardItem:
    """The :class:`RewardItem` for a slime ``Sample``: its prompt, response and label, its ``response_length`` as
    ``num_tokens``, and ``truncated`` when slime cut it at its length limit.

    Raises:
        rlvr_client.labels.LabelError: the label cannot be read.
    """
    length = getattr(sample, "response_length", None)
    # slime marks a generation cut at its length limit with Sample.Status.TRUNCATED (value "truncated").
    status = getattr(sample, "status", None)
    return item_for_sample(
        sample.prompt,
        sample.response,
        sample.label,
        item_id=item_id,
        num_tokens=length if length else None,
        truncated=str(getattr(status, "value", status)).lower() == "truncated",
    )


def group_rewards(samples: Sequence[Any], results: Sequence[RewardResult]) -> list[float]:
    """The rewards of a group's ``samples``: a sample the server could not score is marked ``remove_sample`` and
    gets the mean reward of the scored ones (:data:`NULL_REWARD` if none is), so the group's mean is unchanged."""
    scored = [r.reward for r in results if r.reward is not None]
    stand_in = sum(scored) / len(scored) if scored else NULL_REWARD
    rewards = []
    for sample, result in zip(samples, results, strict=True):
        if result.reward is None:
            sample.remove_sample = True
        rewards.append(stand_in if result.reward is None else result.reward)
    return rewards
