"""Schemas of ``POST /v1/rewards``: whole groups of completions in, one reward per completion out.

They are the wire contract of :mod:`rlvr_client.protocol` with validation and documentation on top: the same
field names (a test holds them equal), the protocol's status vocabulary, and :meth:`RewardResult.to_protocol`
for the routes that hand results to a protocol translator. A protocol :class:`~rlvr_client.protocol.RewardItem`
validates as :class:`RewardItem` directly (``model_validate(..., from_attributes=True)``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

from reward_server.schemas.code import CodeTests
from reward_server.schemas.language import LanguageCode
from reward_server.schemas.math import GroundTruth
from reward_server.schemas.steps import StepResult, StepsRequest
from reward_server.schemas.unions import one_error
from rlvr_client import protocol

ComponentSpec = Annotated[
    StrictFloat | StrictInt | dict[str, Any], one_error("a weight (a number) or an object of options")
]

_EXAMPLE_REQUEST: dict[str, Any] = {
    "items": [
        {
            "id": "q17-0",
            "task": "math",
            "response": "<think>6 * 7 = 42</think>\nThe answer is $\\boxed{42}$.",
            "ground_truth": "42",
        },
        {
            "id": "q17-1",
            "task": "math",
            "response": "<think>6 + 7 = 13</think>\nThe answer is $\\boxed{13}$.",
            "ground_truth": "42",
        },
    ],
    "components": {"accuracy": 1.0},
}


class RewardItem(BaseModel):
    """One completion to score. Extra fields are rejected, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=256, description="Your id for this completion; echoed back.")
    task: Literal["math", "code"] = Field("math", description="What the `accuracy` component checks.")
    response: str = Field(description="The completion text.")
    ground_truth: GroundTruth | None = Field(
        None, description="Reference answer (required for `task: math`); a JSON number is read as its text."
    )
    tests: CodeTests | None = Field(
        None, description="Test cases (required for `task: code`): `{'type': 'stdio'|'assert'|'call', ...}`."
    )
    prompt: str | None = Field(None, description="The prompt; used to detect the target language if none is given.")
    language: LanguageCode | None = Field(
        None, description="Target language of the reasoning (ISO 639-1), for `language`; else taken from `prompt`."
    )
    num_tokens: int | None = Field(
        None,
        ge=0,
        # Far past any completion, and small enough that length rewards can do float arithmetic with it.
        le=10**9,
        description="Completion length in tokens (for `overlong`/`cosine`); characters are used if absent.",
    )
    group_id: str | None = Field(None, max_length=256, description="The group (prompt) this completion belongs to.")
    truncated: bool = Field(
        False,
        description="The completion hit the length limit without ending (`max_completion_length` reached, no EOS). "
        "Only an explicit final answer (a box, an `<answer>` tag, an 'answer is' line) counts (math `accuracy`).",
    )
    components: dict[str, ComponentSpec] | None = Field(
        None,
        description="Component name -> weight, or -> {'weight': w, ...params}. Overrides the request's "
        "`components` and the preset's weights, name by name.",
    )
    preset: str | None = Field(None, description="A named set of components (`r1_zero`, `r1`).")
    steps: StepsRequest | None = Field(
        None, description="Ask for step rewards (process supervision); overrides the request's `steps`."
    )


class RewardsRequest(BaseModel):
    """A batch, usually whole groups. Results come back in the same order, one per item."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_EXAMPLE_REQUEST]})

    items: list[RewardItem] = Field(description="The completions to score.")
    components: dict[str, ComponentSpec] | None = Field(
        None, description="Default components for every item (default: {'accuracy': 1.0})."
    )
    preset: str | None = Field(None, description="Default preset for every item.")
    steps: StepsRequest | None = Field(None, description="Step rewards for every item (see the item's `steps`).")


class ComponentResult(BaseModel):
    """One component's outcome for one item."""

    score: float | None = Field(description="The component's score, or null if it could not be scored.")
    weight: float = Field(description="Its weight in the item's reward.")
    status: str = Field(
        description=f"`ok`, or why the score is what it is: {protocol.describe_statuses()}.",
        examples=["ok", "no_answer", "timeout"],
    )
    detail: str | None = Field(None, description="A human-readable explanation.")
    info: dict[str, Any] = Field(default_factory=dict, description="Debugging facts (extracted answer ...).")

    def to_protocol(self) -> protocol.ComponentResult:
        """This result as the wire contract's dataclass."""
        return protocol.ComponentResult(
            score=self.score, weight=self.weight, status=self.status, detail=self.detail, info=dict(self.info)
        )


class RewardResult(BaseModel):
    """The reward of one item: the weighted sum of its components, or null with the reason."""

    id: str
    reward: float | None = Field(description="Weighted sum of component scores; null if any could not be scored.")
    status: str = Field(description="`ok` when `reward` is a number, else the failing component's status.")
    components: dict[str, ComponentResult]
    steps: list[StepResult] | None = Field(
        None, description="With `steps` asked for: each step's span and score, in order (the reward is unchanged)."
    )

    def to_protocol(self) -> protocol.RewardResult:
        """This result as the wire contract's dataclass, for a protocol translator (no JSON round trip)."""
        return protocol.RewardResult(
            id=self.id,
            reward=self.reward,
            status=self.status,
            components={name: c.to_protocol() for name, c in self.components.items()},
            steps=None if self.steps is None else [s.to_protocol() for s in self.steps],
        )


class RewardsResponse(BaseModel):
    """One result per item, in request order."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "results": [
                        {
                            "id": "q17-0",
                            "reward": 1.0,
                            "status": "ok",
                            "components": {
                                "accuracy": {
                                    "score": 1.0,
                                    "weight": 1.0,
                                    "status": "ok",
                                    "detail": None,
                                    "info": {"extracted_answer": "42", "ground_truth_parsed": "42"},
                                }
                            },
                        }
                    ]
                }
            ]
        }
    )

    results: list[RewardResult]
