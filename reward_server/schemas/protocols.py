"""Schemas of the trainers' own reward protocols: OpenRLHF's remote RM and slime's remote RM.

They accept keys they do not know (a newer framework may send more), unlike ``/v1/rewards``: the framework, not the
user, writes these bodies.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from reward_server.schemas.unions import one_error


class OpenRLHFRequest(BaseModel):
    """What OpenRLHF's ``--reward.remote_url`` client posts: one entry per sample in each list."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={
            "examples": [
                {
                    "query": [
                        "<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"
                        "<think>6*7=42</think> $\\boxed{42}$<|im_end|>"
                    ],
                    "prompts": ["<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"],
                    "labels": ["42"],
                }
            ]
        },
    )

    query: list[str] = Field(description="Prompt + completion, decoded with special tokens.")
    prompts: list[str] = Field(description="The chat-templated prompts.")
    labels: list[Any] = Field(description="The ground truth, or a JSON object with `tests` (code) and item fields.")


class OpenRLHFResponse(BaseModel):
    """What OpenRLHF reads back. Every value is a number: OpenRLHF turns each into a tensor."""

    rewards: list[float] = Field(description="The reward of each sample; 0.0 for one that could not be scored.")
    scores: list[float] = Field(description="The same values (OpenRLHF's dynamic filtering reads them).")
    extra_logs: dict[str, list[float]] = Field(
        description="Logged per sample: `rlvr/unscored` (1 when the sample could not be scored) and "
        "`rlvr/<component>` (0.0 when that component could not be scored)."
    )


class SlimeRequest(BaseModel):
    """What slime's ``--rm-type remote_rm`` posts for one sample."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={"examples": [{"prompt": "What is 6*7?", "response": "$\\boxed{42}$", "label": "42"}]},
    )

    prompt: Annotated[str | list[dict[str, Any]], one_error("a string or a list of chat messages (objects)")] = Field(
        "", description="The prompt: text or chat messages."
    )
    response: str = Field(description="The completion.")
    label: Any = Field(None, description="The ground truth, or a JSON object with `tests` (code) and item fields.")


class SlimeResponse(BaseModel):
    """slime keeps this dict as the sample's reward; `--reward-key reward` picks the number."""

    reward: float = Field(description="The reward; 0.0 when the sample could not be scored (see `scored`).")
    scored: bool = Field(description="False when the server could not score the sample.")
    status: str = Field(description="`ok`, or why the sample could not be scored.")
    components: dict[str, float | None] = Field(description="Each component's score (null if not scored).")
