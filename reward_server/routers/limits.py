"""Request limits that depend on the server's settings, checked by the routers (single items and batches)."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError

from reward_server.engine.resolve import ResolvedComponent, code_program
from reward_server.schemas.code import _Program
from reward_server.schemas.rewards import RewardItem
from reward_server.settings import Settings
from reward_server.verifiers.code import resolve_limits
from sandbox import AssertTests, Limits, TestSpec, utf8


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


def check_batch_limits(settings: Settings, items: Sequence[RewardItem]) -> None:
    """Reject a batch over the server's limits: too many items, or an item's text or test list over theirs.

    Raises:
        HTTPException: 413, more items than ``max_batch_items``.
        RequestValidationError: a field over a limit; ``loc`` is the batch's (``("body", "items", i, ...)``).
    """
    if len(items) > settings.max_batch_items:
        raise HTTPException(
            status_code=413,
            detail=f"{len(items)} items exceed the limit of {settings.max_batch_items} per request "
            "(RLVR_MAX_BATCH_ITEMS); split the batch",
        )
    errors: list[dict[str, object]] = []
    for i, item in enumerate(items):
        errors += check_text_lengths(
            settings, response=item.response, ground_truth=item.ground_truth, loc=("body", "items", i)
        )
        if item.tests is not None:
            errors += check_code_limits(settings, tests=item.tests.to_spec(), loc=("body", "items", i))
    if errors:
        raise RequestValidationError(errors)


def check_program_limits(
    settings: Settings, items: Sequence[RewardItem], resolved: Sequence[list[ResolvedComponent]]
) -> None:
    """Reject a resolved batch whose code items would run a program over the sandbox's maximum size.

    Raises:
        RequestValidationError: ``loc`` is ``("body", "items", i, "response")``.
    """
    errors: list[dict[str, object]] = []
    for i, (item, components) in enumerate(zip(items, resolved, strict=True)):
        # The program is a part of the completion: only a completion that could be over the limit in UTF-8
        # (4 bytes a character at most) is worth looking into.
        if item.task == "code" and 4 * len(item.response) > settings.sandbox_max_source_bytes:
            program = code_program(item, components)
            errors += check_code_limits(settings, source=program, source_field="response", loc=("body", "items", i))
    if errors:
        raise RequestValidationError(errors)


def program_limits(request: _Program, settings: Settings, tests: TestSpec | None = None) -> Limits:
    """The request's limits within the server's maxima; 422 for a program or test list over them."""
    errors = check_code_limits(settings, source=request.code, tests=tests)
    if errors:
        raise RequestValidationError(errors)
    requested = request.limits.model_dump() if request.limits is not None else None
    return resolve_limits(requested, settings.sandbox_default_limits(), settings.sandbox_max_limits())
