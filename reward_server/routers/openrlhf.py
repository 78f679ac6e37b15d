"""``POST /v1/openrlhf``: OpenRLHF's remote reward protocol, for ``--reward.remote_url``."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request

from reward_server.deps import ScoringDep, SettingsDep
from reward_server.jsonio import JSONBodyRoute
from reward_server.routers.protocols import COMPONENTS_QUERY, PRESET_QUERY, Loc, invalid, parse_components, score_items
from reward_server.schemas.protocols import OpenRLHFRequest, OpenRLHFResponse
from rlvr_client.protocol.openrlhf import ProtocolError, items_from_request, reply

router = APIRouter(prefix="/v1", tags=["trainers"], route_class=JSONBodyRoute)


def _loc(i: int, field: str | None) -> Loc:
    return ("body", "query", i) if field == "response" else ("body", "labels", i, *([field] if field else []))


@router.post(
    "/openrlhf",
    response_model=OpenRLHFResponse,
    summary="OpenRLHF's remote reward model: the completion cut from each query, scored; one reward per query.",
    responses={422: {"description": "A query that cannot be split or a label that cannot be read; `loc` names it."}},
)
async def openrlhf(
    request: OpenRLHFRequest,
    http: Request,
    settings: SettingsDep,
    scoring: ScoringDep,
    preset: str | None = PRESET_QUERY,
    components: str | None = COMPONENTS_QUERY,
) -> dict[str, Any]:
    try:
        items = items_from_request(request.query, request.prompts, request.labels, id_prefix=uuid.uuid4().hex[:12])
    except ProtocolError as exc:
        raise invalid(("body", *exc.loc), str(exc)) from exc
    results = await score_items(
        items,
        preset=preset,
        components=parse_components(components),
        http=http,
        settings=settings,
        scoring=scoring,
        loc_of=_loc,
    )
    return reply(results)  # checked once, against response_model
