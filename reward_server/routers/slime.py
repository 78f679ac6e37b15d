"""``POST /v1/slime``: slime's remote reward model (``--rm-type remote_rm --rm-url``), one sample per request."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request

from reward_server.deps import ScoringDep, SettingsDep
from reward_server.jsonio import JSONBodyRoute
from reward_server.routers.protocols import COMPONENTS_QUERY, PRESET_QUERY, Loc, invalid, parse_components, score_items
from reward_server.schemas.protocols import SlimeRequest, SlimeResponse
from rlvr_client.labels import LabelError
from rlvr_client.protocol.slime import item_for_sample, reply

router = APIRouter(prefix="/v1", tags=["trainers"], route_class=JSONBodyRoute)


def _loc(i: int, field: str | None) -> Loc:
    if field in ("response", "prompt"):
        return ("body", field)
    return ("body", "label", *([field] if field else []))


@router.post(
    "/slime",
    response_model=SlimeResponse,
    summary="slime's remote reward model: one sample's reward, with its status (`--reward-key reward`).",
    responses={422: {"description": "A label that cannot be read; `loc` names it."}},
)
async def slime(
    request: SlimeRequest,
    http: Request,
    settings: SettingsDep,
    scoring: ScoringDep,
    preset: str | None = PRESET_QUERY,
    components: str | None = COMPONENTS_QUERY,
) -> dict[str, Any]:
    try:
        item = item_for_sample(request.prompt, request.response, request.label, item_id=uuid.uuid4().hex)
    except LabelError as exc:
        raise invalid(("body", "label", *([exc.key] if exc.key else [])), str(exc)) from exc
    [result] = await score_items(
        [item],
        preset=preset,
        components=parse_components(components),
        http=http,
        settings=settings,
        scoring=scoring,
        loc_of=_loc,
    )
    return reply(result)  # checked once, against response_model
