"""``POST /v1/language/check``: the share of a chain of thought's words in the target language."""

from __future__ import annotations

from fastapi import APIRouter

from reward_server.deps import SettingsDep
from reward_server.jsonio import JSONBodyRoute
from reward_server.routers.limits import check_response_length
from reward_server.schemas.language import LanguageCheckRequest, LanguageCheckResult
from reward_server.verifiers.language import score_language

router = APIRouter(prefix="/v1/language", tags=["language"], route_class=JSONBodyRoute)


# A plain ``def``: FastAPI runs it in its thread pool, so a long chain of thought (tens of ms of detector
# work, and 1-2 s to load the model on first use) does not stall the event loop.
@router.post(
    "/check",
    summary="Share of the chain of thought's words in the target language (DeepSeek-R1).",
    response_model=LanguageCheckResult,
)
def check_language(request: LanguageCheckRequest, settings: SettingsDep) -> LanguageCheckResult:
    check_response_length(request.response, settings)
    result = score_language(request.response, request.params(), target=request.target, prompt=request.prompt)
    return LanguageCheckResult(score=result.score, status=result.status, detail=result.detail, **result.info)
