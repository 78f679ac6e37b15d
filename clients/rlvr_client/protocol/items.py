"""What a trainer sends: one completion to score, as ``POST /v1/rewards`` takes it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ComponentSpec", "RewardItem"]

#: A component's weight, or ``{"weight": w, **params}``.
ComponentSpec = float | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RewardItem:
    """One completion to score, as ``POST /v1/rewards`` takes it.

    Attributes:
        id: unique within a request; the result carries it back. Keep it stable across retries.
        task: ``math`` or ``code``; the ``accuracy`` component dispatches on it.
        response: the completion text (no prompt).
        ground_truth: the reference answer (math).
        components: component name -> weight, or -> ``{"weight": w, **params}``; overrides the request's.
        preset: a named set of components (``r1_zero``, ``r1``).
        language: expected language of the completion (ISO 639-1), for the ``language`` component.
        num_tokens: completion length in tokens, for length-based components.
        tests: code tests, for ``task == "code"``.
        group_id: the group (prompt) the completion belongs to.
        prompt: the prompt text, from which the server can tell the target language when ``language`` is unset.
        truncated: the completion reached the length limit without EOS (``max_completion_length``); math
            accuracy then counts only an explicit final answer (a box, an answer tag, an "answer is" line).
            Sent only when true.
        steps: ask for step rewards, e.g. ``{"component": "arithmetic", "separator": "\\n\\n"}`` (process
            supervision); the result's ``steps`` then holds each step's span and score.
    """

    id: str
    task: str
    response: str
    ground_truth: str | None = None
    components: Mapping[str, ComponentSpec] | None = None
    preset: str | None = None
    language: str | None = None
    num_tokens: int | None = None
    tests: Any = None
    group_id: str | None = None
    prompt: str | None = None
    steps: Mapping[str, Any] | None = None
    truncated: bool = False

    def to_json(self) -> dict[str, Any]:
        """The item as the JSON object the server expects (``None`` fields left out)."""
        body: dict[str, Any] = {"id": self.id, "task": self.task, "response": self.response}
        for name in ("ground_truth", "preset", "language", "num_tokens", "tests", "group_id", "prompt"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        if self.components is not None:
            body["components"] = dict(self.components)
        if self.steps is not None:
            body["steps"] = dict(self.steps)
        if self.truncated:
            body["truncated"] = True
        return body
