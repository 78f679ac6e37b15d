"""What the trainers' protocol routes share: their items scored through ``/v1/rewards``'s path, with the errors'
``loc`` pointing into the body the framework sent.

A route parses its request once: FastAPI validates the framework's body (its own schema), the protocol's pure
translator (:mod:`rlvr_client.protocol`) turns it into items, and :func:`score_items` validates those items as
:class:`RewardsRequest` straight from the dataclasses. No item goes back to JSON to be read again, and the
results go to the translator as the protocol's dataclasses, not dumped and re-parsed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from reward_server.engine.context import ScoringContext
from reward_server.routers.rewards import score_request
from reward_server.schemas.rewards import RewardsRequest
from reward_server.settings import Settings
from rlvr_client.protocol import RewardItem, RewardResult

Loc = tuple[str | int, ...]

PRESET_QUERY = Query(None, description="The preset for every sample (`r1_zero`, `r1`), as in `/v1/rewards`.")
COMPONENTS_QUERY = Query(
    None,
    description='Components for every sample, as JSON: `{"accuracy": 1, "format": 0.5}`.',
    examples=['{"accuracy": 1}'],
)


def parse_components(components: str | None) -> dict[str, Any] | None:
    """The ``components`` query parameter, a JSON object.

    Raises:
        RequestValidationError: not JSON, or not an object; ``loc`` is ``("query", "components")``.
    """
    if components is None:
        return None
    try:
        value = json.loads(components)
    except ValueError as exc:
        raise invalid(("query", "components"), f"components must be a JSON object: {exc}") from exc
    if not isinstance(value, dict):
        raise invalid(("query", "components"), "components must be a JSON object of component names")
    return value


async def score_items(
    items: Sequence[RewardItem],
    *,
    preset: str | None,
    components: dict[str, Any] | None,
    http: Request,
    settings: Settings,
    scoring: ScoringContext,
    loc_of: Callable[[int, str | None], Loc],
) -> list[RewardResult]:
    """Score protocol items as one ``/v1/rewards`` batch.

    ``loc_of(i, field)`` says where item ``i``'s ``field`` came from in the framework's body (``None``: the item).

    Raises:
        RequestValidationError: an invalid item or component, with ``loc`` mapped by ``loc_of``.
        HTTPException: 413, more items than ``max_batch_items``.
    """
    body = {"items": items, "preset": preset, "components": components}
    try:
        request = RewardsRequest.model_validate(body, from_attributes=True)
    except ValidationError as exc:
        raise RequestValidationError(
            [{"loc": _map(("body", *e["loc"]), loc_of), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        ) from exc
    try:
        results = await score_request(request, http, settings, scoring)
    except RequestValidationError as exc:
        raise RequestValidationError([{**e, "loc": _map(tuple(e["loc"]), loc_of)} for e in exc.errors()]) from exc
    return [r.to_protocol() for r in results]


def _map(loc: Loc, loc_of: Callable[[int, str | None], Loc]) -> Loc:
    """``("body", "items", i, field, ...)`` -> where the framework sent it; request-level fields go to the query."""
    if len(loc) >= 3 and loc[:2] == ("body", "items") and isinstance(loc[2], int):
        field = loc[3] if len(loc) > 3 and isinstance(loc[3], str) else None
        return (*loc_of(loc[2], field), *loc[4:])
    if len(loc) >= 2 and loc[0] == "body" and loc[1] in ("preset", "components"):
        return ("query", *loc[1:])
    return loc


def invalid(loc: Loc, msg: str) -> RequestValidationError:
    """A 422 for one field of the framework's body (or of the query string)."""
    return RequestValidationError([{"loc": loc, "msg": msg, "type": "value_error"}])
