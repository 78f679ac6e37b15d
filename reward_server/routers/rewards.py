"""``POST /v1/rewards``: the batch endpoint that trainers call with whole groups."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.exceptions import RequestValidationError

from reward_server.admission import Drain, ItemBudget
from reward_server.deps import ScoringDep, SettingsDep
from reward_server.jsonio import JSONBodyRoute
from reward_server.middleware import note_items
from reward_server.rewards import ComponentSpecError, ScoringContext, code_program, score_batch, validate_batch
from reward_server.routers.cancel import unless_disconnected
from reward_server.routers.limits import check_code_limits, check_text_lengths
from reward_server.schemas.rewards import RewardResult, RewardsRequest, RewardsResponse
from reward_server.settings import Settings
from reward_server.step_rewards import check_steps, with_request_steps

router = APIRouter(prefix="/v1", tags=["rewards"], route_class=JSONBodyRoute)


@router.post(
    "/rewards",
    response_model=RewardsResponse,
    summary="Score a batch of completions: one reward per item, with every component's outcome.",
    responses={
        401: {"description": "The server has API keys and the request has none or a wrong one."},
        413: {"description": "More items than the server's `max_batch_items`, or a body over `max_body_mb`."},
        422: {"description": "A field is invalid; `loc` names it."},
        429: {"description": "The server's queue is full; the batch was not started (see Retry-After)."},
        503: {"description": "Workers are still starting, or the server is shutting down (see Retry-After)."},
    },
)
async def rewards(
    request: RewardsRequest, http: Request, settings: SettingsDep, scoring: ScoringDep
) -> RewardsResponse:
    return RewardsResponse(results=await score_request(request, http, settings, scoring))


async def score_request(
    request: RewardsRequest, http: Request, settings: Settings, scoring: ScoringContext
) -> list[RewardResult]:
    """Check a batch against the server's limits, resolve its components and score it: one result per item.

    The trainers' own protocols (``/v1/openrlhf``, ``/v1/slime``) build a :class:`RewardsRequest` and come here.

    Raises:
        HTTPException: 413, more items than ``max_batch_items``.
        QueueFull: the items do not fit under ``RLVR_MAX_QUEUED_ITEMS`` now (the app answers 429).
        RequestValidationError: a field over a limit or a bad component; ``loc`` is the batch's
            (``("body", "items", i, ...)``).
    """
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
    if request.steps is not None and (problem := check_steps(request.steps, scoring.models)) is not None:
        # Named where it was sent: the request's own `steps`, not the first item that inherits it.
        raise RequestValidationError([{"loc": ("body", "steps", "component"), "msg": problem, "type": "value_error"}])
    items = with_request_steps(request.items, request.steps)
    try:
        resolved = validate_batch(items, request.components, request.preset, scoring.models)
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
    # The batch is admitted whole or refused whole (429, QueueFull); at shutdown, items still unscored when
    # the drain runs out of time come back `cancelled`.
    budget: ItemBudget = http.app.state.budget
    drain: Drain = http.app.state.drain
    with budget.admit(len(items)):
        results = await unless_disconnected(http, score_batch(items, resolved, scoring, drain_stop=drain.stop))
    note_items(http.scope, (r.status for r in results))
    return results
