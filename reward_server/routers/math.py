"""``POST /v1/math/verify``: one response against one reference."""

from __future__ import annotations

from fastapi import APIRouter

from reward_server.deps import ScoringDep
from reward_server.rewards import run_math
from reward_server.schemas.math import MathVerifyRequest, MathVerifyResponse

router = APIRouter(prefix="/v1/math", tags=["math"])


@router.post(
    "/verify",
    response_model=MathVerifyResponse,
    summary="Is the response's final answer equal to the reference?",
    responses={503: {"description": "Workers are still starting (see Retry-After)."}},
)
async def verify(request: MathVerifyRequest, scoring: ScoringDep) -> MathVerifyResponse:
    verdict = await run_math(scoring, request.response, request.ground_truth, request.options)
    if scoring.metrics is not None:
        scoring.metrics.items.labels("math").inc()
        scoring.metrics.verdicts.labels("accuracy", str(verdict.status)).inc()
        if verdict.status == "timeout":
            scoring.metrics.timeouts.labels("accuracy").inc()
    return MathVerifyResponse(**verdict.to_dict())
