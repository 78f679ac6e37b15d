"""Schemas of ``POST /v1/math/verify``."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from reward_server.verifiers.math import MathOptions, MathStatus


def _number_as_text(value: Any) -> Any:
    """A JSON number for a reference (``42``, ``0.5``, as datasets often store GSM8K answers) is its text.
    Booleans and non-finite floats are left alone, so they fail as strings with a 422 naming the field."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return value


GroundTruth = Annotated[str, BeforeValidator(_number_as_text)]

#: The shortest per-item ``timeout_s`` accepted, in seconds (1 ms): below it a worker could not even start the item.
MIN_TIMEOUT_S = 0.001
_EXAMPLE_RESPONSE = "<think>7 * 6 = 42</think>\nThe answer is $\\boxed{42}$."


class MathOptionsModel(BaseModel):
    """Per-request math verification options. Unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid")

    fallback: bool = Field(
        True,
        description="When the response has no \\boxed{}, <answer> tag or 'answer is' line, take its last number "
        "or LaTeX span as the answer.",
    )
    strict: bool = Field(True, description="Variables matter (x+1 differs from y+1).")
    rel_tol: float = Field(
        1e-6, ge=0, lt=1, description="Relative tolerance when an exact reference meets a decimal answer."
    )
    timeout_s: float | None = Field(
        None,
        # A denormal (5e-324) or sub-millisecond limit is no limit a worker can keep: refused, not rounded.
        ge=MIN_TIMEOUT_S,
        le=600,
        allow_inf_nan=False,
        description="Time limit for this item, in its own time on a worker, in seconds: at least 0.001 and at "
        "most 600 (else 422), then capped by the server's maximum (`RLVR_MATH_MAX_TIMEOUT_S`).",
    )

    def to_options(self) -> MathOptions:
        return MathOptions(fallback=self.fallback, strict=self.strict, rel_tol=self.rel_tol)


class MathVerifyRequest(BaseModel):
    """One response and its reference answer."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"response": _EXAMPLE_RESPONSE, "ground_truth": "42"},
                {"response": "So x = 2 2/3.", "ground_truth": "\\frac{8}{3}", "options": {"fallback": True}},
            ]
        },
    )

    response: str = Field(description="The completion (the model's output).")
    ground_truth: GroundTruth = Field(
        description="The reference: bare (`42`), in `$...$`, in `\\boxed{}`, or a GSM8K solution ending in `#### 42`. "
        "A JSON number is read as its text."
    )
    options: MathOptionsModel | None = Field(None, description="Verification options.")
    truncated: bool = Field(
        False,
        description="The completion hit the length limit without ending (`max_completion_length` reached, no EOS). "
        "Only an explicit final answer (a box, an `<answer>` tag, an 'answer is' line) counts.",
    )


class MathVerifyResponse(BaseModel):
    """The verdict. `correct` and `reward` are null when no verdict could be reached."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "correct": True,
                    "reward": 1.0,
                    "status": "ok",
                    "extracted_answer": "42",
                    "ground_truth_parsed": "42",
                    "detail": None,
                }
            ]
        }
    )

    correct: bool | None = Field(description="Is the final answer equal to the reference? null if unknown.")
    reward: float | None = Field(description="1.0 correct, 0.0 wrong or unanswered, null if no verdict.")
    status: MathStatus = Field(
        description="`ok`: a verdict. `no_answer`: no final answer (correct=false). `invalid_ground_truth`: the "
        "reference has no value; do not train on it. `timeout`/`error`: no verdict."
    )
    extracted_answer: str | None = Field(description="The final answer found in the response.")
    ground_truth_parsed: str | None = Field(description="The reference's answer as understood.")
    detail: str | None = Field(None, description="Why, when the verdict is not a plain yes/no.")
