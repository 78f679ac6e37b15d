"""TRL reward functions: ``completions, **columns -> list[float | None]`` scored through the reward server
(tested with TRL 1.16.0's ``GRPOTrainer``).

``GRPOTrainer(reward_funcs=[...])`` calls each function with the completions of a whole step and the dataset's
columns; the step's completions (whole groups) go to the server in one request, and the per-component functions
of :func:`reward_functions` share that one request. ``None`` is a completion the server could not score: TRL
leaves a completion for which every function returned ``None`` out of its group's baseline, with advantage 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlvr_client.client import RewardClient, client_from_env
from rlvr_client.protocol import ComponentSpec, RewardResult
from rlvr_client.protocol.trl import completion_text, component_score, items_for_step

__all__ = ["component_score", "reward_function", "reward_functions"]


class _StepScorer:
    """Scores one step's completions once for several reward functions: TRL calls them one after the other with
    the same ``completions`` list, so the first call sends the request and the others reuse its results."""

    def __init__(
        self,
        client: RewardClient,
        *,
        task: str,
        components: Mapping[str, ComponentSpec] | None,
        preset: str | None,
        ground_truth_column: str,
        max_completion_length: int | None = None,
    ) -> None:
        self.client = client
        self.max_completion_length = max_completion_length
        self.task = task
        self.components = components
        self.preset = preset
        self.ground_truth_column = ground_truth_column
        self.requests_sent = 0
        self._last: tuple[Sequence[Any], list[str], list[RewardResult]] | None = None

    def score(self, completions: Sequence[Any], columns: Mapping[str, Any]) -> list[RewardResult]:
        texts = [completion_text(c) for c in completions]
        if self._last is not None and self._last[0] is completions and self._last[1] == texts:
            return self._last[2]
        items = items_for_step(completions, columns, self.task, self.ground_truth_column, self.max_completion_length)
        results = self.client.score(items, components=self.components, preset=self.preset)
        self.requests_sent += 1
        self._last = (completions, texts, results)
        return results


def _client_of(client: RewardClient | str | Sequence[str] | None) -> RewardClient:
    if isinstance(client, RewardClient):
        return client
    return client_from_env() if client is None else RewardClient(client)


def reward_function(
    client: RewardClient | str | Sequence[str] | None = None,
    *,
    task: str = "math",
    components: Mapping[str, ComponentSpec] | None = None,
    preset: str | None = None,
    component: str | None = None,
    ground_truth_column: str = "ground_truth",
    name: str | None = None,
    max_completion_length: int | None = None,
) -> Callable[..., list[float | None]]:
    """A reward function for TRL's ``GRPOTrainer(reward_funcs=[...])`` that scores through the reward server.

    The returned callable has TRL's contract, ``f(completions, **columns) -> list[float | None]``: ``columns``
    holds the dataset's columns (one value per completion). It reads ``ground_truth_column`` and, where present,
    the ``task``, ``tests``, ``language``, ``components`` and ``preset`` columns, and TRL's ``prompts`` and
    ``completion_ids``. ``None`` comes back for a completion the server could not score (timeout, sandbox failure
    ...), which TRL leaves out of the group baseline; it is never turned into 0.

    Args:
        client: a :class:`RewardClient`, or the server URL(s) to build one; ``None`` reads ``RLVR_SERVER_URL``
            (comma-separated) and ``RLVR_API_KEY``.
        task: the task when the dataset has no ``task`` column.
        components: request-level components, e.g. ``{"accuracy": 1.0, "format": 0.5}``.
        preset: request-level preset.
        component: return this component's :func:`component_score` instead of the total reward. For one function
            per component, :func:`reward_functions` sends one request for all of them.
        ground_truth_column: the dataset column with the reference answer (TRL datasets often call it
            ``solution`` or ``answer``).
        name: the function's ``__name__``, which TRL uses in its metric names.
        max_completion_length: the ``GRPOConfig`` value; a completion whose ``completion_ids`` reach it is sent
            as ``truncated`` (only an explicit final answer counts for it). A ``truncated`` column wins.

    Raises (when called):
        KeyError: the dataset lacks ``ground_truth_column`` for a math task.
        RewardServerError: the server refused the batch or stayed unreachable.
    """
    scorer = _StepScorer(
        _client_of(client),
        task=task,
        components=components,
        preset=preset,
        ground_truth_column=ground_truth_column,
        max_completion_length=max_completion_length,
    )
    return _function(scorer, component, name)


def reward_functions(
    client: RewardClient | str | Sequence[str] | None = None,
    *,
    components: Mapping[str, ComponentSpec],
    task: str = "math",
    ground_truth_column: str = "ground_truth",
    max_completion_length: int | None = None,
) -> list[Callable[..., list[float | None]]]:
    """One TRL reward function per component, named ``rlvr_<component>``, for per-component curves in TRL's logs
    and TRL's own weights: ``GRPOConfig(reward_weights=[...])``, in the order of ``components``.

    The server scores each component at weight 1 (the weights in ``components`` are replaced, their parameters
    kept), so that TRL's weighted sum is the reward; the functions of one step share one request.

    Args:
        client: as :func:`reward_function`.
        components: the components, e.g. ``{"accuracy": 1, "format": {"mode": "soft"}}``.
        task, ground_truth_column, max_completion_length: as :func:`reward_function`.
    """
    unit = {n: {**spec, "weight": 1.0} if isinstance(spec, Mapping) else 1.0 for n, spec in components.items()}
    scorer = _StepScorer(
        _client_of(client),
        task=task,
        components=unit,
        preset=None,
        ground_truth_column=ground_truth_column,
        max_completion_length=max_completion_length,
    )
    return [_function(scorer, name, None) for name in components]


def _function(scorer: _StepScorer, component: str | None, name: str | None) -> Callable[..., list[float | None]]:
    def score_completions(completions: Sequence[Any], **columns: Any) -> list[float | None]:
        results = scorer.score(completions, columns)
        if component is None:
            return [r.reward for r in results]
        return [component_score(r, component) for r in results]

    score_completions.__name__ = name or (f"rlvr_{component}" if component else "rlvr_reward")
    return score_completions
