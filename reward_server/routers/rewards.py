"""``POST /v1/rewards``: the batch endpoint that trainers call with whole groups."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError

from reward_server.deps import ScoringDep, SettingsDep, get_budget, get_drain
from reward_server.engine.batch import score_batch
from reward_server.engine.components import Where
from reward_server.engine.context import ScoringContext
from reward_server.engine.resolve import ComponentSpecError, ResolvedComponent, validate_request
from reward_server.engine.work import batch_work
from reward_server.jsonio import JSONBodyRoute
from reward_server.middleware import note_items, note_work
from reward_server.routers.cancel import unless_disconnected
from reward_server.routers.limits import check_batch_limits, check_program_limits
from reward_server.schemas.rewards import RewardItem, RewardResult, RewardsRequest, RewardsResponse
from reward_server.settings import Settings

router = APIRouter(prefix="/v1", tags=["rewards"], route_class=JSONBodyRoute)

#: The response header that states the request's budget in seconds, as admission scaled it.
BUDGET_HEADER = "X-RLVR-Budget-S"


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
    request: RewardsRequest, http: Request, response: Response, settings: SettingsDep, scoring: ScoringDep
) -> RewardsResponse:
    results = await score_request(request, http, settings, scoring)
    budget_s = getattr(http.state, "budget_s", None)
    if budget_s is not None:
        response.headers[BUDGET_HEADER] = f"{budget_s:g}"
    return RewardsResponse(results=results)


def request_work(items: list[RewardItem], resolved: list[list[ResolvedComponent]], scoring: ScoringContext) -> float:
    """The work units of a validated batch (:mod:`reward_server.engine.work`)."""
    pairs = zip(items, resolved, strict=True)
    return batch_work(
        [len(item.response) + len(item.ground_truth or "") for item in items],
        [any(r.component.where_for(item.task) is Where.ASYNC for r in comps) for item, comps in pairs],
        [item.ground_truth for item in items],
        scoring.slow_references,
    )


async def score_request(
    request: RewardsRequest, http: Request, settings: Settings, scoring: ScoringContext
) -> list[RewardResult]:
    """Check a batch against the server's limits, resolve its components and score it: one result per item.

    The trainers' own protocols (``/v1/openrlhf``, ``/v1/slime``) build a :class:`RewardsRequest` and come here.

    Raises:
        HTTPException: 413, more items than ``max_batch_items``.
        QueueFull: the items do not fit under ``RLVR_MAX_QUEUED_ITEMS``, or their work under
            ``RLVR_MAX_QUEUED_WORK``, now (the app answers 429).
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
    work = request_work(items, resolved, scoring)
    with budget.admit(len(items), work) as budget_s:
        http.state.budget_s = budget_s
        note_work(http.scope, work)
        scored = score_batch(items, resolved, scoring, drain_stop=drain.stop, budget_s=budget_s)
        results = await unless_disconnected(http, scored)
    note_items(http.scope, (r.status for r in results))
    return results
