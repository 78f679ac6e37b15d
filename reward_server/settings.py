"""Server settings: one pydantic-settings class, read from ``RLVR_*`` environment variables."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_workers() -> int:
    return max(1, os.cpu_count() or 1)


class Settings(BaseSettings):
    """Every knob of the reward server. Each field is read from ``RLVR_<FIELD>`` (case-insensitive).

    Invalid values fail at start-up with pydantic's message naming the variable, never later.
    """

    model_config = SettingsConfigDict(env_prefix="RLVR_", env_file=None, extra="ignore", frozen=True)

    host: str = Field("127.0.0.1", description="Interface to bind.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port to bind (0 picks a free one).")
    http_workers: int = Field(
        1, ge=1, le=64, description="uvicorn worker processes; each runs its own math pool of `math_workers`."
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    # Math verification pool.
    math_workers: int = Field(
        default_factory=_default_workers, ge=1, le=256, description="Worker processes for math verification."
    )
    math_timeout_s: float = Field(
        5.0, gt=0, le=600, description="Wall-clock limit for verifying one item; past it the item is `timeout`."
    )
    math_max_timeout_s: float = Field(
        30.0, gt=0, le=600, description="Upper bound on a per-request `options.timeout_s`."
    )
    math_cache_size: int = Field(
        4096, ge=0, description="Parsed ground truths kept per worker (LRU), so a group parses its reference once."
    )
    preload_language_models: bool = Field(
        True, description="Load the language detector at start-up (~2 s, ~350 MB) instead of on first use."
    )
    worker_start_timeout_s: float = Field(120.0, gt=0, description="How long /readyz may wait for workers.")

    # Request limits.
    max_batch_items: int = Field(4096, ge=1, description="Largest `items` list in one request; above it: 413.")
    max_response_chars: int = Field(
        200_000, ge=1, description="Longest completion accepted; longer text is rejected with 422."
    )

    @model_validator(mode="after")
    def _check_timeouts(self) -> Settings:
        if self.math_timeout_s > self.math_max_timeout_s:
            raise ValueError(
                f"math_timeout_s ({self.math_timeout_s}) must not exceed math_max_timeout_s "
                f"({self.math_max_timeout_s}); raise RLVR_MATH_MAX_TIMEOUT_S or lower RLVR_MATH_TIMEOUT_S"
            )
        return self
