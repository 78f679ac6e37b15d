"""Parameters of the ``reward_model`` component (a sequence-classification reward model)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RewardModelParams"]


class RewardModelParams(BaseModel):
    """How the reward model's output becomes the component's score, and what part of the completion it reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: int = Field(0, ge=0, le=1_000_000, description="Which output logit is the reward (0 for one-label models).")
    normalize: Literal["none", "sigmoid", "softmax", "standardize"] = Field(
        "none",
        description="`none`: the logit; `sigmoid`: σ(logit) in (0, 1); `softmax`: the label's probability over "
        "all labels; `standardize`: (logit - mean) / std.",
    )
    mean: float | None = Field(None, description="For `standardize` (default: the model config's `mean`).")
    std: float | None = Field(None, gt=0, description="For `standardize` (default: the model config's `std`).")
    scope: Literal["response", "answer"] = Field(
        "response",
        description="`response`: the whole completion, reasoning included; `answer`: only what follows "
        "`</think>` (DeepSeek-R1 judges helpfulness on the summary alone).",
    )
