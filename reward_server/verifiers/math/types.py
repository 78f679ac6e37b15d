"""Public types of the math verifier: statuses, options and the verdict."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any


class MathStatus(enum.StrEnum):
    """Outcome of one math verification."""

    OK = "ok"  # a verdict was reached
    NO_ANSWER = "no_answer"  # the response has no final answer: correct is False
    INVALID_GROUND_TRUTH = "invalid_ground_truth"  # the reference has no value: no verdict, do not train
    TIMEOUT = "timeout"  # no verdict within the time limit
    ERROR = "error"  # the verifier failed: no verdict


@dataclass(frozen=True, slots=True)
class MathOptions:
    """How to verify. Every field has a safe default; see the module docstring for the policy.

    Attributes:
        fallback: when the response has no box, tag or "answer is" line, take its last number or LaTeX span.
        strict: variables matter (``x+1`` differs from ``y+1``); passed to math-verify.
        rel_tol: relative tolerance when an exact reference meets a decimal answer (or two floats meet).
    """

    fallback: bool = True
    strict: bool = True
    rel_tol: float = 1e-6

    def __post_init__(self) -> None:
        if not (0.0 <= self.rel_tol < 1.0):
            raise ValueError(f"rel_tol must be in [0, 1), got {self.rel_tol}")


@dataclass(frozen=True, slots=True)
class MathVerdict:
    """The verdict for one response. ``correct`` and ``reward`` are ``None`` unless status is ok/no_answer."""

    status: MathStatus
    correct: bool | None
    extracted_answer: str | None = None
    ground_truth_parsed: str | None = None
    detail: str | None = None

    @property
    def reward(self) -> float | None:
        """1.0 if correct, 0.0 if wrong or unanswered, ``None`` if no verdict could be reached."""
        return None if self.correct is None else float(self.correct)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = str(self.status)
        d["reward"] = self.reward
        return d
