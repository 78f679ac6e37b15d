"""``POST /v1/rewards``: the batch endpoint that trainers call with whole groups."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError

from reward_server.deps import ScoringDep, SettingsDep, get_budget, get_drain
from reward_server.engine.batch import score_batch
from reward_server.engine.context import ScoringContext
from reward_server.engine.resolve import ComponentSpecError, validate_request
from reward_server.jsonio import JSONBodyRoute
from reward_server.middleware import note_items
from reward_server.routers.cancel import unless_disconnected
from reward_server.routers.limits import check_batch_limits, check_program_limits
from reward_server.schemas.rewards import RewardResult, RewardsRequest, RewardsResponse
from reward_server.settings import Settings

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
    check_batch_limits(settings, request.items)
    try:
        items, resolved = validate_request(
            request.items,
            request.components,
            request.preset,
            request.steps,
            scoring.models,
            has_judge=scoring.judge is not None,
        )
    except ComponentSpecError as exc:
        raise RequestValidationError([{"loc": ("body", *exc.loc), "msg": exc.msg, "type": "value_error"}]) from exc
    check_program_limits(settings, items, resolved)
    # The batch is admitted whole or refused whole (429, QueueFull); at shutdown, items still unscored when
    # the drain runs out of time come back `cancelled`.
    budget, drain = get_budget(http), get_drain(http)
    with budget.admit(len(items)):
        results = await unless_disconnected(http, score_batch(items, resolved, scoring, drain_stop=drain.stop))
    note_items(http.scope, (r.status for r in results))
    return results
