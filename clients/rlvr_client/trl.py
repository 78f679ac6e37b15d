"""TRL reward functions: ``completions, **columns -> list[float | None]`` scored through the reward server.

``GRPOTrainer(reward_funcs=[...])`` calls each function with the completions of a whole step and the dataset's
columns; one function sends the step's completions (whole groups) in one request. ``None`` is a completion the
server could not score, which TRL leaves out of the group baseline.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlvr_client.client import ComponentSpec, RewardClient, RewardItem, client_from_env

__all__ = ["reward_function"]


def _completion_text(completion: Any) -> str:
    """TRL passes a string, or for conversational data a list of messages; score the assistant's text."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, Mapping))
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def _prompt_text(prompt: Any) -> str | None:
    """The prompt as text for the language component: a string, or the last user message of a conversation."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        return str(users[-1].get("content", "")) if users else None
    return None


def _column(columns: Mapping[str, Any], name: str, i: int) -> Any:
    values = columns.get(name)
    return None if values is None else values[i]


def reward_function(
    client: RewardClient | str | Sequence[str] | None = None,
    *,
    task: str = "math",
    components: Mapping[str, ComponentSpec] | None = None,
    preset: str | None = None,
    component: str | None = None,
    ground_truth_column: str = "ground_truth",
    name: str | None = None,
) -> Callable[..., list[float | None]]:
    """A reward function for TRL's ``GRPOTrainer(reward_funcs=[...])`` that scores through the reward server.

    The returned callable has TRL's contract, ``f(completions, **columns) -> list[float | None]``: ``columns``
    holds the dataset's columns (one value per completion). It reads ``ground_truth_column`` and, where present,
    the ``task``, ``tests``, ``language``, ``components`` and ``preset`` columns. ``None`` comes back for a
    completion the server could not score (timeout, sandbox failure ...), which TRL leaves out of the group
    baseline; it is never turned into 0.

    Args:
        client: a :class:`RewardClient`, or the server URL(s) to build one; ``None`` reads ``RLVR_SERVER_URL``
            (comma-separated) and ``RLVR_API_KEY``.
        task: the task when the dataset has no ``task`` column.
        components: request-level components, e.g. ``{"accuracy": 1.0, "format": 0.5}``.
        preset: request-level preset.
        component: return this component's score instead of the total reward (one TRL reward function per
            component gives per-component curves in TRL's logs; weight them with TRL's ``reward_weights``).
        ground_truth_column: the dataset column with the reference answer (TRL datasets often call it
            ``solution`` or ``answer``).
        name: the function's ``__name__``, which TRL uses in its metric names.

    Raises (when called):
        KeyError: the dataset lacks ``ground_truth_column`` for a math task.
        RewardServerError: the server refused the batch or stayed unreachable.
    """
    rc = client if isinstance(client, RewardClient) else client_from_env() if client is None else RewardClient(client)

    def score_completions(completions: Sequence[Any], **columns: Any) -> list[float | None]:
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
                    response=_completion_text(completion),
                    ground_truth=None if truth is None else str(truth),
                    components=_column(columns, "components", i),
                    preset=_column(columns, "preset", i),
                    language=_column(columns, "language", i),
                    num_tokens=None if ids is None else len(ids),
                    tests=_column(columns, "tests", i),
                    prompt=None if prompt is None else _prompt_text(prompt),
                )
            )
        results = rc.score(items, components=components, preset=preset)
        if component is None:
            return [r.reward for r in results]
        return [r.components[component].score if component in r.components else None for r in results]

    score_completions.__name__ = name or (f"rlvr_{component}" if component else "rlvr_reward")
    return score_completions
