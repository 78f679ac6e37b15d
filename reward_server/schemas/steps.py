"""Step rewards (process supervision): what an item asks for, and what each step comes back with."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr_client import protocol

__all__ = ["StepResult", "StepsRequest"]


class StepsRequest(BaseModel):
    """Ask for step rewards: the completion's reasoning is split into steps and a step component scores each."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    component: str = Field(
        "arithmetic",
        description="The step component: `arithmetic` (rule-based: every `a op b = c` of a step checked exactly).",
        examples=["arithmetic"],
    )
    separator: str = Field(
        "\n\n", min_length=1, max_length=64, description="What separates two steps (default: a blank line)."
    )
    scope: Literal["reasoning", "response"] = Field(
        "reasoning",
        description="`reasoning`: the think block's content (the whole completion without one); `response`: all.",
    )


class StepResult(BaseModel):
    """One step: where it is in the completion, and its score."""

    start: int = Field(description="Offset of the step's first character in `response` (Unicode code points).")
    end: int = Field(description="Offset just past its last character: the step is `response[start:end]`.")
    score: float | None = Field(description="The step's score, or null when it has nothing to score or failed.")
    status: str = Field(description="`ok`, `wrong`, `no_claim` (nothing checkable: neutral), or why it failed.")
    detail: str | None = Field(None, description="A human-readable explanation.")

    def to_protocol(self) -> protocol.StepScore:
        """This step as the wire contract's dataclass."""
        return protocol.StepScore(
            start=self.start, end=self.end, score=self.score, status=self.status, detail=self.detail
        )
