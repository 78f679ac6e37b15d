"""The one result type every reward component returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ComponentScore:
    """One reward component's outcome for one completion.

    Attributes:
        score: the component's score, usually in [0, 1] (shaping penalties may be negative), or ``None``
            when it could not be scored. ``None`` means "do not train on this", never 0.
        status: why the score is what it is: ``ok`` when a score was reached; otherwise a verifier-specific
            word (``no_answer``, ``invalid_ground_truth``, ``timeout``, ``error``, ``sandbox_error``,
            ``too_short`` ...). A ``None`` score always has a status other than ``ok``.
        detail: a human-readable explanation, or ``None``.
        info: extra, JSON-serialisable facts for debugging (extracted answer, per-language shares ...).
    """

    score: float | None
    status: str
    detail: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
