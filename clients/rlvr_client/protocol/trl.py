"""TRL's reward-function contract, both ways: a step's ``completions`` and dataset ``columns`` as items, and a
result as one function's value (the reward, or one component's share of it). Pure: :mod:`rlvr_client.trl`
calls the server with these.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr_client.chat import prompt_text
from rlvr_client.protocol.items import RewardItem
from rlvr_client.protocol.results import RewardResult

__all__ = ["completion_text", "component_score", "items_for_step"]


def completion_text(completion: Any) -> str:
    """TRL passes a string, or for conversational data a list of messages; score the assistant's text."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, Mapping))
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def _column(columns: Mapping[str, Any], name: str, i: int) -> Any:
    values = columns.get(name)
    return None if values is None else values[i]


def component_score(result: RewardResult, name: str) -> float | None:
    """What component ``name`` added to ``result.reward``, per unit of its weight; ``None`` when the item could
    not be scored.

    ``None`` for every component of an unscoreable item, so that TRL, which sums its functions skipping ``None``
    (``nansum``), leaves the item out instead of training on the components that happened to be scored. A
    component that abstained (``language`` on a chain of thought too short to judge) counts as the server counted
    it, read back from the reward.
    """
    if result.reward is None or name not in result.components:
        return None
    own = result.components[name]
    if own.score is not None:
        return own.score
    if own.weight == 0:
        return None
    others = [c for n, c in result.components.items() if n != name and c.weight != 0]
    if any(c.score is None for c in others):
        return None  # two abstentions: the reward does not tell them apart
    return (result.reward - sum(c.weight * c.score for c in others if c.score is not None)) / own.weight


def _truncated(columns: Mapping[str, Any], i: int, max_completion_length: int | None) -> bool:
    """Was completion ``i`` cut at the length limit? A ``truncated`` column says so; else, with
    ``max_completion_length``, TRL's ``completion_ids`` reaching it does. (TRL 1.16 does not pass its own
    is-EOS mask to reward functions, so a completion whose EOS is exactly its last allowed token also reads as
    truncated: only an explicit final answer then counts for it, the safe side.)"""
    flag = _column(columns, "truncated", i)
    if flag is not None:
        return bool(flag)
    ids = _column(columns, "completion_ids", i)
    return max_completion_length is not None and ids is not None and len(ids) >= max_completion_length


def items_for_step(
    completions: Sequence[Any],
    columns: Mapping[str, Any],
    task: str,
    ground_truth_column: str,
    max_completion_length: int | None = None,
) -> list[RewardItem]:
    """One :class:`RewardItem` per completion of a step, with its row of ``columns`` (see
    :func:`rlvr_client.trl.reward_function` for the columns read).

    Raises:
        KeyError: a math item without ``ground_truth_column``.
    """
    batch = uuid.uuid4().hex[:12]
    items = []
    for i, completion in enumerate(completions):
        item_task = _column(columns, "task", i) or task
        truth = _column(columns, ground_truth_column, i)
        if item_task == "math" and truth is None:
            raise KeyError(
                f"no {ground_truth_column!r} column for a math item; pass ground_truth_column= the column "
                f"that holds the reference answer (columns seen: {sorted(columns)})"
            )
        ids = _column(columns, "completion_ids", i)
        prompt = _column(columns, "prompts", i)
        items.append(
            RewardItem(
                id=f"{batch}-{i}",
                task=item_task,
                response=completion_text(completion),
                ground_truth=None if truth is None else str(truth),
                components=_column(columns, "components", i),
                preset=_column(columns, "preset", i),
                language=_column(columns, "language", i),
                num_tokens=None if ids is None else len(ids),
                tests=_column(columns, "tests", i),
                prompt=None if prompt is None else prompt_text(prompt),
                truncated=_truncated(columns, i, max_completion_length),
            )
        )
    return items
