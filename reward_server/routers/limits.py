"""Request limits that depend on the server's settings, checked by the single-item routers."""

from __future__ import annotations

from fastapi import HTTPException

from reward_server.settings import Settings


def check_text_lengths(
    settings: Settings, *, response: str, ground_truth: str | None = None, loc: tuple[str | int, ...] = ("body",)
) -> list[dict[str, object]]:
    """Validation errors (FastAPI's shape) for a completion or reference over the server's limits."""
    errors: list[dict[str, object]] = []
    for field, value, limit, var in (
        ("response", response, settings.max_response_chars, "RLVR_MAX_RESPONSE_CHARS"),
        ("ground_truth", ground_truth, settings.max_ground_truth_chars, "RLVR_MAX_GROUND_TRUTH_CHARS"),
    ):
        if value is not None and len(value) > limit:
            errors.append(
                {
                    "loc": [*loc, field],
                    "msg": f"{field} has {len(value)} characters, over the limit of {limit} ({var})",
                    "type": "string_too_long",
                }
            )
    return errors


def check_response_length(response: str, settings: Settings) -> None:
    """Reject a completion longer than ``settings.max_response_chars`` with a 422 that names the field.

    Raises:
        HTTPException: 422, in the shape of FastAPI's validation errors.
    """
    errors = check_text_lengths(settings, response=response)
    if errors:
        raise HTTPException(status_code=422, detail=errors)
