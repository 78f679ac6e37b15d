"""``POST /v1/math/verify``: one response against one reference."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request

from reward_server.deps import BudgetDep, DrainDep, ScoringDep, SettingsDep
from reward_server.engine.dispatch import run_math
from reward_server.jsonio import JSONBodyRoute
from reward_server.routers.cancel import unless_disconnected
from reward_server.routers.limits import check_text_lengths
from reward_server.schemas.math import MathVerifyRequest, MathVerifyResponse

router = APIRouter(prefix="/v1/math", tags=["math"], route_class=JSONBodyRoute)


@router.post(
    "/verify",
    response_model=MathVerifyResponse,
    summary="Is the response's final answer equal to the reference?",
    responses={
        429: {"description": "The server's queue is full (see Retry-After)."},
        503: {"description": "Workers are still starting, or the server is shutting down (see Retry-After)."},
    },
)
async def verify(
    request: MathVerifyRequest,
    http: Request,
    settings: SettingsDep,
    scoring: ScoringDep,
    budget: BudgetDep,
    drain: DrainDep,
) -> MathVerifyResponse:
    errors = check_text_lengths(settings, response=request.response, ground_truth=request.ground_truth)
    if errors:
        raise HTTPException(status_code=422, detail=errors)
    with budget.admit(1):
        verdict = await unless_disconnected(
            http,
            run_math(scoring, request.response, request.ground_truth, request.options, truncated=request.truncated),
            stop=drain.stop,
        )
    return MathVerifyResponse(**verdict.to_dict())
