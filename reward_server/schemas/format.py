"""The format reward: its parameters, and the ``POST /v1/format/check`` request and result."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_END_OF_TURN_TOKENS",
    "DEFAULT_START_OF_TURN_TOKENS",
    "FormatCheckRequest",
    "FormatCheckResult",
    "FormatParams",
]

# The end-of-turn / end-of-sequence tokens of the common chat templates (ChatML/Qwen, Llama 2 and 3,
# DeepSeek-R1, Phi-3, Gemma). A completion decoded without skipping special tokens ends with one of these.
DEFAULT_END_OF_TURN_TOKENS: tuple[str, ...] = (
    "<|im_end|>",
    "<|endoftext|>",
    "</s>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<｜end▁of▁sentence｜>",
    "<|end|>",
    "<end_of_turn>",
    "<eos>",
    # DeepSeek's end of sentence with ASCII bars (how some tokenizers and pipelines render it), and the
    # padding tokens that follow it when a batch is decoded without skipping special tokens.
    "<|end▁of▁sentence|>",
    "<｜▁pad▁｜>",
    "<|finetune_right_pad_id|>",
    "<pad>",
    "<|pad|>",
    "[PAD]",
)
# The role headers and start-of-sequence tokens that a completion may begin with when it was decoded
# with the generation prompt's header (ChatML/Qwen, DeepSeek-R1, Llama 3, Gemma, Phi-3, Llama 2/Mistral).
DEFAULT_START_OF_TURN_TOKENS: tuple[str, ...] = (
    "<|im_start|>assistant",
    "<｜Assistant｜>",
    "<｜begin▁of▁sentence｜>",
    "<|start_header_id|>assistant<|end_header_id|>",
    "<|begin_of_text|>",
    "<start_of_turn>model",
    "<|assistant|>",
    "<bos>",
    "<s>",
)

_TAG_NAME = r"^[A-Za-z][A-Za-z0-9_.:-]{0,31}$"


class FormatParams(BaseModel):
    """How the format component checks a completion against R1's layout.

    The layout (DeepSeek-R1, arXiv 2501.12948, Table 1): ``<think> reasoning </think>`` then the answer,
    bare or inside ``<answer> … </answer>``; only blanks and end-of-turn tokens may follow the answer.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["strict", "soft"] = Field(
        "strict",
        description=(
            "`strict`: 1.0 when the completion is exactly in the layout, else 0.0. `soft`: partial credit, the "
            "share of the layout's checks that pass (one per tag: present exactly once and in place; plus "
            "non-empty thinking, a non-empty answer and no stray text), so 1.0 still needs the exact layout."
        ),
    )
    think_prefilled: bool = Field(
        False,
        description=(
            "The chat template already put the opening think tag in the prompt, so the completion starts "
            "inside the thinking and must not open it again."
        ),
    )
    think_tag: str = Field("think", pattern=_TAG_NAME, description="Name of the thinking tag, without brackets.")
    answer_tag: str = Field("answer", pattern=_TAG_NAME, description="Name of the answer tag, without brackets.")
    require_answer_tag: bool = Field(
        False,
        description=(
            "Require the answer inside the answer tag. When false the answer may also follow the thinking bare; "
            "once the answer tag is used it must wrap the whole answer."
        ),
    )
    min_think_chars: int = Field(
        1,
        ge=1,
        le=100_000,
        description="Fewest non-blank characters of thinking that count as thinking; below it the block is empty.",
    )
    end_of_turn_tokens: tuple[str, ...] = Field(
        DEFAULT_END_OF_TURN_TOKENS,
        max_length=64,
        description="Tokens allowed (any number of them, with blanks) after the answer at the very end.",
    )
    start_of_turn_tokens: tuple[str, ...] = Field(
        DEFAULT_START_OF_TURN_TOKENS,
        max_length=64,
        description=(
            "Role headers and start tokens allowed (any number of them, with blanks) before the opening think "
            "tag, e.g. `<|im_start|>assistant` when the completion was decoded with its header."
        ),
    )

    @model_validator(mode="after")
    def _distinct_tags(self) -> FormatParams:
        if self.think_tag.lower() == self.answer_tag.lower():
            raise ValueError(f"think_tag and answer_tag must differ (both are {self.think_tag!r})")
        return self


class FormatCheckRequest(FormatParams):
    """``POST /v1/format/check``: one completion and, optionally, any of the format parameters."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "examples": [
                {"response": "<think>\n4 boxes of 2 is 8, plus 1.\n</think>\n<answer>9</answer><|im_end|>"},
                {"response": "6*7 = 42.\n</think>\n<answer>42</answer>", "think_prefilled": True, "mode": "soft"},
            ]
        },
    )

    response: str = Field(description="The completion, as generated (special tokens may be left in).")

    def params(self) -> FormatParams:
        """The parameters of this request, without the completion."""
        return FormatParams(**self.model_dump(exclude={"response"}))


class FormatCheckResult(BaseModel):
    """The format verdict for one completion."""

    score: float = Field(ge=0.0, le=1.0, description="1.0 exactly in the layout; below it, see `mode`.")
    status: Literal["ok", "bad_format"] = Field(description="`ok` when the layout holds, else `bad_format`.")
    detail: str | None = Field(None, description="What broke the layout, one clause per failed check.")
    format_ok: bool = Field(description="Whether the completion is exactly in the layout.")
    answer: str | None = Field(None, description="The extracted answer (stripped) when the layout holds.")
    checks: dict[str, bool] = Field(description="Each check of the layout and whether it passed.")

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "score": 1.0,
                    "status": "ok",
                    "detail": None,
                    "format_ok": True,
                    "answer": "9",
                    "checks": {"think_open": True, "think_close": True, "think_nonempty": True},
                }
            ]
        }
    )
