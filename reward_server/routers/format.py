"""``POST /v1/format/check``: is one completion in R1's layout?"""

from __future__ import annotations

from fastapi import APIRouter

from reward_server.deps import SettingsDep
from reward_server.jsonio import JSONBodyRoute
from reward_server.routers.limits import check_response_length
from reward_server.schemas.format import FormatCheckRequest, FormatCheckResult
from reward_server.verifiers.format import score_format

router = APIRouter(prefix="/v1/format", tags=["format"], route_class=JSONBodyRoute)


# A plain ``def``: FastAPI runs it in its thread pool, so a long completion (tens of ms of scanning) does not
# stall the event loop.
@router.post(
    "/check",
    summary="Check a completion against the <think>…</think> then answer layout.",
    response_model=FormatCheckResult,
)
def check_format(request: FormatCheckRequest, settings: SettingsDep) -> FormatCheckResult:
    check_response_length(request.response, settings)
    result = score_format(request.response, request.params())
    assert result.score is not None  # the format component always scores
    return FormatCheckResult(score=result.score, status=result.status, detail=result.detail, **result.info)
