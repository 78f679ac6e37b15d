"""OpenRLHF's remote reward protocol, both ways: ``{"query", "prompts", "labels"}`` as items, results as
``{"rewards", "scores", "extra_logs"}``. Pure: the server's ``/v1/openrlhf`` route and the client's
:mod:`rlvr_client.openrlhf` reward function both translate with these (that module's docstring gives the
mapping and the policy on a completion the server could not score).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlvr_client.chat import QuerySplitError, split_query
from rlvr_client.labels import LabelError, label_fields
from rlvr_client.protocol.items import RewardItem
from rlvr_client.protocol.results import RewardResult

__all__ = ["NULL_REWARD", "ProtocolError", "items_from_request", "reply"]

#: The reward a framework without "not scoreable" gets for a completion the server could not score.
NULL_REWARD = 0.0


class ProtocolError(ValueError):
    """A request that breaks the protocol; ``loc`` names the field, e.g. ``("labels", 3, "tests")``."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


def items_from_request(
    query: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], *, id_prefix: str = "q"
) -> list[RewardItem]:
    """One :class:`RewardItem` per query: the completion cut from the query, the label's fields.

    Raises:
        ProtocolError: lists of different lengths, a query that cannot be split, or a label that cannot be read;
            ``loc`` names the list and the index.
    """
    if not (len(query) == len(prompts) == len(labels)):
        raise ProtocolError(
            ("query",),
            f"query, prompts and labels must have one entry per sample: {len(query)}, {len(prompts)} and {len(labels)}",
        )
    items = []
    for i, (q, p, label) in enumerate(zip(query, prompts, labels, strict=True)):
        try:
            split = split_query(q, p)
        except QuerySplitError as exc:
            raise ProtocolError(("query", i), str(exc)) from exc
        try:
            fields = label_fields(label)
        except LabelError as exc:
            raise ProtocolError(("labels", i) if exc.key is None else ("labels", i, exc.key), str(exc)) from exc
        fields.setdefault("task", "math")
        items.append(RewardItem(id=f"{id_prefix}-{i}", response=split.completion, prompt=p, **fields))
    return items


def reply(results: Sequence[RewardResult], *, on_null: str = "zero") -> dict[str, Any]:
    """The answer OpenRLHF reads: one reward per query, the same as ``scores`` (its dynamic-filtering value), and
    ``extra_logs`` with per-component scores and the unscored flag, every value a number.

    Args:
        results: the server's results, in query order.
        on_null: ``zero`` (:data:`NULL_REWARD` for a completion that could not be scored) or ``raise``.

    Raises:
        ValueError: ``on_null == "raise"`` and a result has a ``None`` reward (the message gives its status).
    """
    rewards = [_training_reward(r, on_null) for r in results]
    names = sorted({name for r in results for name in r.components})
    extra_logs: dict[str, list[float]] = {"rlvr/unscored": [float(r.reward is None) for r in results]}
    for name in names:
        extra_logs[f"rlvr/{name}"] = [_component_score(r, name) for r in results]
    return {"rewards": rewards, "scores": list(rewards), "extra_logs": extra_logs}


def _training_reward(result: RewardResult, on_null: str) -> float:
    if result.reward is not None:
        return result.reward
    if on_null == "raise":
        raise ValueError(f"the reward server could not score item {result.id!r} (status {result.status!r})")
    return NULL_REWARD


def _component_score(result: RewardResult, name: str) -> float:
    component = result.components.get(name)
    return NULL_REWARD if component is None or component.score is None else component.score
