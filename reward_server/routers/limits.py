"""Request limits that depend on the server's settings, checked by the routers (single items and batches)."""

from __future__ import annotations

from fastapi import HTTPException

from reward_server.settings import Settings
from sandbox import AssertTests, TestSpec, utf8


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


def check_code_limits(
    settings: Settings,
    *,
    source: str | None = None,
    source_field: str = "code",
    tests: TestSpec | None = None,
    loc: tuple[str | int, ...] = ("body",),
) -> list[dict[str, object]]:
    """Validation errors (FastAPI's shape) for a program or a test list over the sandbox's maxima.

    The one check of ``/v1/code/run``, ``/v1/code/test`` and the code items of ``/v1/rewards``:
    ``source`` (the program, found in ``source_field``) over ``RLVR_SANDBOX_MAX_SOURCE_BYTES`` bytes of
    UTF-8, and ``tests`` with more than ``RLVR_SANDBOX_MAX_CASES`` cases (the error names the list:
    ``tests.cases`` or ``tests.test_list``).
    """
    errors: list[dict[str, object]] = []
    if source is not None:
        size, limit = len(utf8(source)), settings.sandbox_max_source_bytes
        if size > limit:
            errors.append(
                {
                    "loc": [*loc, source_field],
                    "msg": f"the program is {size} bytes; at most {limit} are accepted (RLVR_SANDBOX_MAX_SOURCE_BYTES)",
                    "type": "string_too_long",
                }
            )
    if tests is not None and len(tests.cases) > settings.sandbox_max_cases:
        field = "test_list" if isinstance(tests, AssertTests) else "cases"
        errors.append(
            {
                "loc": [*loc, "tests", field],
                "msg": f"{len(tests.cases)} test cases; at most {settings.sandbox_max_cases} are accepted "
                "(RLVR_SANDBOX_MAX_CASES)",
                "type": "too_long",
            }
        )
    return errors
