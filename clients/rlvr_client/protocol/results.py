"""What the server answers: each item's reward, its components' verdicts and its steps, read from the JSON with
the contract checked (a number only with status ``ok``). Every ``status`` is a word of the vocabulary,
:data:`rlvr_client.protocol.status.Status`; it stays a ``str`` here, so a word from a newer server reads as any
other status that is not ``ok``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ComponentResult", "RewardResult", "RewardServerError", "StepScore"]


@dataclass(frozen=True, slots=True)
class ComponentResult:
    """One component's verdict for one item: ``score`` is ``None`` when it could not be scored."""

    score: float | None
    weight: float
    status: str
    detail: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StepScore:
    """One step of a completion: ``response[start:end]`` (code-point offsets) and its score (``None``: nothing
    to score there, status ``no_claim``, or a failure)."""

    start: int
    end: int
    score: float | None
    status: str
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class RewardResult:
    """The server's result for one item.

    Attributes:
        id: the item's id.
        reward: the weighted sum of component scores, or ``None`` when any component could not be scored.
            ``None`` means "do not train on this", never 0.
        status: ``ok`` whenever ``reward`` is a number, else the failing component's status (``timeout``,
            ``error``, ``invalid_ground_truth``, ``sandbox_error`` ...).
        components: per-component results.
        steps: each step's span and score when the item asked for step rewards, else ``None``.
    """

    id: str
    reward: float | None
    status: str
    components: dict[str, ComponentResult] = field(default_factory=dict)
    steps: list[StepScore] | None = None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RewardResult:
        """Parse one element of the response's ``results``.

        Raises:
            RewardServerError: a field is missing or has the wrong type.
        """
        try:
            components = {
                name: ComponentResult(
                    score=_number_or_none(c.get("score"), "score"),
                    weight=_number(c.get("weight", 1.0), "weight"),
                    status=str(c["status"]),
                    detail=c.get("detail"),
                    info=dict(c.get("info") or {}),
                )
                for name, c in (body.get("components") or {}).items()
            }
            steps = body.get("steps")
            result = cls(
                id=str(body["id"]),
                reward=_number_or_none(body["reward"], "reward"),
                status=str(body["status"]),
                components=components,
                steps=None
                if steps is None
                else [
                    StepScore(
                        start=int(st["start"]),
                        end=int(st["end"]),
                        score=_number_or_none(st.get("score"), "step score"),
                        status=str(st["status"]),
                        detail=st.get("detail"),
                    )
                    for st in steps
                ],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RewardServerError(f"malformed result from the reward server: {exc!r} in {body!r:.300}") from exc
        if result.reward is not None and result.status != "ok":
            # The contract: a number comes only with status ok. A number with "timeout" is an infrastructure failure
            # passed off as a verdict, which must never be trained on.
            raise RewardServerError(
                f"the reward server gave reward {result.reward} with status {result.status!r} for item "
                f"{result.id!r}; a reward is a number only with status 'ok'"
            )
        return result


def _number(value: Any, name: str) -> float:
    """A JSON number as a finite float. Strings, booleans, NaN and infinities are refused: a NaN reward would be
    read as 'not scoreable' with status ok, and an infinite one would turn every advantage of its group to NaN."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def _number_or_none(value: Any, name: str) -> float | None:
    return None if value is None else _number(value, name)


class RewardServerError(Exception):
    """The reward server refused a request, kept failing after the retries, or answered something malformed.

    Attributes:
        status_code: the HTTP status of the last answer, or ``None`` when no answer came (connection error).
        url: the server that answered last.
    """

    def __init__(self, message: str, *, status_code: int | None = None, url: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.url = url
