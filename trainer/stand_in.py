"""A stand-in reward server for offline runs of the trainer: tests, benchmarks, a config's dry run.

:class:`StandInServer` speaks the ``/v1/rewards`` contract through ``httpx.MockTransport``, so the trainer's own
:class:`~trainer.reward_client.RewardScorer` (its batching, retries and parsing) runs unchanged, with a scoring rule
in Python instead of the reward server. Nothing here imports pytest: ``benchmarks/trainer_step.py`` and
``benchmarks/trl_step.py`` run in a plain environment.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from trainer.reward_client import RewardScorer


def contains_answer(item: dict[str, Any]) -> float | None:
    """Stand-in accuracy: 1 when the ground truth appears in the completion, else 0."""
    return 1.0 if item["ground_truth"] in item["response"] else 0.0


def whole_response_step(item: dict[str, Any]) -> list[dict[str, Any]]:
    """Stand-in step rewards: the whole completion is one step, scored as the item's reward."""
    return [{"start": 0, "end": len(item["response"]), "score": contains_answer(item), "status": "ok", "detail": None}]


class StandInServer:
    """A ``MockTransport`` handler speaking the ``/v1/rewards`` contract with a pluggable scoring rule.

    ``score(item) -> float | None``; ``None`` gives a null reward with status ``timeout``. An item that asks for
    ``steps`` gets ``steps(item)`` back (a list of step results). Items are recorded.
    """

    def __init__(
        self,
        score: Callable[[dict[str, Any]], float | None] = contains_answer,
        steps: Callable[[dict[str, Any]], list[dict[str, Any]]] = whole_response_step,
    ) -> None:
        self.score = score
        self.steps = steps
        self.items: list[dict[str, Any]] = []
        self.requests = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        body = json.loads(request.content)
        results = []
        for item in body["items"]:
            self.items.append(item)
            s = self.score(item)
            status = "ok" if s is not None else "timeout"
            acc: dict[str, Any] = {"score": s, "weight": 1.0, "status": status, "detail": None, "info": {}}
            result = {"id": item["id"], "reward": s, "status": status, "components": {"accuracy": acc}}
            if "steps" in item:
                result["steps"] = self.steps(item)
            results.append(result)
        return httpx.Response(200, json={"results": results})

    def scorer(self) -> RewardScorer:
        return RewardScorer("http://stand-in", client=httpx.AsyncClient(transport=httpx.MockTransport(self)))
