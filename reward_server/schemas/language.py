"""The language-consistency reward: its parameters, and the ``POST /v1/language/check`` request and result."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DEFAULT_MAX_CHARS",
    "SUPPORTED_LANGUAGES",
    "LanguageCheckRequest",
    "LanguageCheckResult",
    "LanguageCode",
    "LanguageParams",
]

# ISO 639-1 codes. The first 17 are told apart by the statistical detector (Latin, Cyrillic and Arabic
# scripts); the last 7 by their script alone. See reward_server/verifiers/language.py for the reasons.
LanguageCode = Literal[
    "en", "fr", "de", "es", "pt", "it", "nl", "pl", "tr", "vi", "id", "cs", "sv",
    "ru", "uk",
    "ar", "fa",
    "zh", "ja", "ko", "el", "he", "hi", "th",
]  # fmt: skip
SUPPORTED_LANGUAGES: tuple[str, ...] = get_args(LanguageCode)
# About 5,000 tokens of English. Reading costs time per word; see `max_chars`.
DEFAULT_MAX_CHARS = 20_000


class LanguageParams(BaseModel):
    """How the language component reads a completion's chain of thought."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_words: int = Field(
        5,
        ge=1,
        le=10_000,
        description=(
            "Fewest words that carry a language (code, math, numbers, identifiers and one-letter words do "
            "not) below which the check abstains: `score` null, status `too_short`. Ratios over fewer words "
            "are noise, and detectors mislabel very short text. A shorter chain of thought with two or more "
            "words in a script the target is not written in (Cyrillic or Han for English) is scored anyway: "
            "the script is no guess."
        ),
    )
    think_tag: str = Field(
        "think",
        pattern=r"^[A-Za-z][A-Za-z0-9_.:-]{0,31}$",
        description="The thinking tag: only text inside it counts (all of the completion when it has none).",
    )
    default_target: LanguageCode | None = Field(
        "en",
        description=(
            "The target when the item gives none and its prompt has too few words to detect one (`Simplify "
            "$\\sqrt{242}$.`), reported as `target_source: default`. `null`: abstain instead, with status "
            "`no_target`."
        ),
    )
    max_chars: int = Field(
        DEFAULT_MAX_CHARS,
        ge=1_000,
        le=32_000,
        description=(
            "Most characters of the chain of thought whose words are read. A longer one is read in 16 evenly "
            "spaced windows adding up to this many, from its start to its end, so the score is an estimate "
            "over the whole text and scoring stays well under a second even at 200,000 characters. Code and "
            "math are still located in the whole text."
        ),
    )


class LanguageCheckRequest(LanguageParams):
    """``POST /v1/language/check``: one completion and its target language (given, or from the prompt)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "examples": [
                {
                    "response": "<think>The two angles add up to 90 degrees, so the third is 90.</think> 90",
                    "target": "en",
                },
                {
                    "response": "<think>两个角的和是九十度，所以第三个角也是九十度。</think> 90",
                    "prompt": "三角形的内角和是多少？",
                },
            ]
        },
    )

    response: str = Field(description="The completion; only its chain of thought is read.")
    target: LanguageCode | None = Field(
        None, description="ISO 639-1 code of the language the chain of thought should be in."
    )
    prompt: str | None = Field(
        None, description="Used to detect the target when `target` is not given: its dominant language."
    )

    def params(self) -> LanguageParams:
        """The parameters of this request, without the texts."""
        return LanguageParams(**self.model_dump(exclude={"response", "target", "prompt"}))


class LanguageCheckResult(BaseModel):
    """The share of the chain of thought's words in the target language, and the breakdown."""

    score: float | None = Field(
        ge=0.0, le=1.0, description="Share of target-language words, or null when the check abstains."
    )
    status: Literal["ok", "too_short", "no_target"] = Field(
        description=(
            "`ok`; `too_short` below `min_words`; `no_target` when no target was given or detected and "
            "`default_target` is null."
        )
    )
    detail: str | None = Field(None, description="Why the check abstained, when it did.")
    target: str | None = Field(None, description="The target language used.")
    target_source: Literal["given", "prompt", "default"] | None = Field(
        None, description="Where the target came from: the request, the prompt, or `default_target`."
    )
    words: int = Field(0, description="Words that carry a language in the chain of thought.")
    languages: dict[str, float] = Field(
        default_factory=dict, description="Share of those words per language (ISO 639-1; `other`: unsupported)."
    )
    word_counts: dict[str, int] = Field(default_factory=dict, description="Those words counted per language.")
    ignored: int = Field(0, description="Tokens that count for no language (code, math, numbers, identifiers...).")
    chars_read: int = Field(0, description="Characters of the chain of thought read (see `max_chars`).")
    chars: int = Field(0, description="Characters in the chain of thought.")

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "score": 0.955,
                    "status": "ok",
                    "detail": None,
                    "target": "en",
                    "target_source": "given",
                    "words": 22,
                    "languages": {"en": 0.955, "zh": 0.045},
                    "word_counts": {"en": 21, "zh": 1},
                    "ignored": 2,
                }
            ]
        }
    )
