"""Request limits that depend on the server's settings, checked by the single-item routers."""

from __future__ import annotations

from fastapi import HTTPException

from reward_server.settings import Settings


def check_response_length(response: str, settings: Settings) -> None:
    """Reject a completion longer than ``settings.max_response_chars`` with a 422 that names the field.

    Raises:
        HTTPException: 422, in the shape of FastAPI's validation errors.
    """
    if len(response) > settings.max_response_chars:
        raise HTTPException(
            status_code=422,
            detail=[
                {
                    "loc": ["body", "response"],
                    "msg": f"response has {len(response)} characters, over the limit of {settings.max_response_chars}"
                    " (RLVR_MAX_RESPONSE_CHARS)",
                    "type": "string_too_long",
                }
            ],
        )
