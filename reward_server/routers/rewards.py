"""``POST /v1/rewards``: the batch endpoint that trainers call with whole groups."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.exceptions import RequestValidationError

from reward_server.deps import ScoringDep, SettingsDep
from reward_server.jsonio import JSONBodyRoute
from reward_server.rewards import ComponentSpecError, code_program, score_batch, validate_batch, with_request_steps
from reward_server.routers.cancel import unless_disconnected
from reward_server.routers.limits import check_code_limits, check_text_lengths
from reward_server.schemas.rewards import RewardsRequest, RewardsResponse

router = APIRouter(prefix="/v1", tags=["rewards"], route_class=JSONBodyRoute)


@router.post(
    "/rewards",
    response_model=RewardsResponse,
    summary="Score a batch of completions: one reward per item, with every component's outcome.",
    responses={
        413: {"description": "More items than the server's `max_batch_items`."},
        422: {"description": "A field is invalid; `loc` names it."},
        503: {"description": "Workers are still starting (see Retry-After)."},
    },
)
async def rewards(
    request: RewardsRequest, http: Request, settings: SettingsDep, scoring: ScoringDep
) -> RewardsResponse:
    if len(request.items) > settings.max_batch_items:
        raise HTTPException(
            status_code=413,
            detail=f"{len(request.items)} items exceed the limit of {settings.max_batch_items} per request "
            "(RLVR_MAX_BATCH_ITEMS); split the batch",
        )
    errors: list[dict[str, object]] = []
    for i, item in enumerate(request.items):
        errors += check_text_lengths(
            settings, response=item.response, ground_truth=item.ground_truth, loc=("body", "items", i)
        )
        if item.tests is not None:
            errors += check_code_limits(settings, tests=item.tests.to_spec(), loc=("body", "items", i))
    if errors:
        raise RequestValidationError(errors)
    items = with_request_steps(request.items, request.steps)
    try:
        resolved = validate_batch(items, request.components, request.preset)
    except ComponentSpecError as exc:
        raise RequestValidationError([{"loc": ("body", *exc.loc), "msg": exc.msg, "type": "value_error"}]) from exc
    for i, (item, components) in enumerate(zip(items, resolved, strict=True)):
        # The program is a part of the completion: only a completion that could be over the limit in UTF-8
        # (4 bytes a character at most) is worth looking into.
        if item.task == "code" and 4 * len(item.response) > settings.sandbox_max_source_bytes:
            program = code_program(item, components)
            errors += check_code_limits(settings, source=program, source_field="response", loc=("body", "items", i))
    if errors:
        raise RequestValidationError(errors)
    results = await unless_disconnected(http, score_batch(items, resolved, scoring))
    return RewardsResponse(results=results)
