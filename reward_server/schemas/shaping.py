"""Shaping rewards: parameters of the ``overlong``, ``cosine`` and ``repetition`` components."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["CosineParams", "OverlongParams", "RepetitionParams"]


class _LengthParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_completion_length: int = Field(
        4096,
        ge=1,
        le=10_000_000,
        description="The generation limit L_max, in tokens (TRL's `max_completion_length`); set it to yours.",
    )
    chars_per_token: float = Field(
        4.0,
        gt=0,
        le=100,
        description=(
            "Used only when the item has no `num_tokens`: the length is then len(characters) / chars_per_token. "
            "4 is typical of English with a BPE tokenizer (Chinese is nearer 1.5); send `num_tokens` to be exact, "
            "or set 1 to measure in characters."
        ),
    )


class OverlongParams(_LengthParams):
    """DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13)."""

    soft_punish_cache: int = Field(
        1024,
        ge=0,
        le=10_000_000,
        description=(
            "The buffer L_cache, in tokens: the penalty grows linearly from 0 at L_max - L_cache to -1 at L_max "
            "(TRL's `soft_punish_cache`; DAPO used 4096 of 20480)."
        ),
    )

    @model_validator(mode="after")
    def _cache_fits(self) -> OverlongParams:
        if self.soft_punish_cache > self.max_completion_length:
            raise ValueError(
                f"soft_punish_cache ({self.soft_punish_cache}) must not exceed max_completion_length "
                f"({self.max_completion_length})"
            )
        return self


class CosineParams(_LengthParams):
    """Cosine length scaling (Yeo et al. 2025, arXiv 2502.03373, eq. 1-2); defaults as in open-r1."""

    correct_at_zero: float = Field(1.0, description="r_0^c: reward of a correct answer at length 0.")
    correct_at_max: float = Field(0.5, description="r_L^c: reward of a correct answer at length L_max.")
    wrong_at_zero: float = Field(-1.0, description="r_0^w: reward of a wrong answer at length 0.")
    wrong_at_max: float = Field(-0.5, description="r_L^w: reward of a wrong answer at length L_max.")
    exceed_penalty: float = Field(-1.0, description="r_e: reward when the length reaches L_max (truncated).")


class RepetitionParams(BaseModel):
    """N-gram repetition penalty (as in Yeo et al. 2025, section 4; open-r1's repetition_penalty_reward)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ngram_size: int = Field(3, ge=1, le=64, description="n: length of the word n-grams compared.")
    max_penalty: float = Field(
        -1.0, le=0.0, description="Score when every n-gram repeats the first; 0 when none repeats."
    )
