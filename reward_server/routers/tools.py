"""``POST /v1/tools/python`` and ``DELETE /v1/tools/sessions/{session_id}``: Python cells for rollouts.

HTTP only: validation, limits, admission and metrics here; the engine (:mod:`reward_server.engine.tools`) runs.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError

from reward_server.deps import BudgetDep, DrainDep, MetricsDep, SandboxDep, SettingsDep, ToolSessionsDep
from reward_server.jsonio import JSONBodyRoute
from reward_server.middleware import note_items
from reward_server.routers.cancel import unless_disconnected
from reward_server.routers.limits import check_code_limits
from reward_server.schemas.tools import ToolBatchOut, ToolRequest, ToolResultOut
from reward_server.settings import Settings

router = APIRouter(prefix="/v1/tools", tags=["tools"], route_class=JSONBodyRoute)

_RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {"description": "More calls than the server's `max_batch_items`."},
    429: {"description": "The server's queue is full (see Retry-After)."},
    503: {
        "description": "The sandbox is unavailable here (the detail says how to fix it) or starting, or the "
        "server is shutting down (see Retry-After)."
    },
}


def _check(request: ToolRequest, settings: Settings) -> None:
    """A single call needs `code`, a batch `calls` alone; every program within the sandbox's size limit.

    Raises:
        RequestValidationError: ``loc`` names the field.
        HTTPException: 413, more calls than ``max_batch_items``.
    """
    if request.calls is None:
        if request.code is None:
            error = {"loc": ["body", "code"], "msg": "code is required (or `calls` for a batch)", "type": "missing"}
            raise RequestValidationError([error])
        errors = check_code_limits(settings, source=request.code)
    else:
        given = sorted(k for k in request.model_fields_set if k != "calls")
        if given:
            msg = "a batch takes `calls` alone: give each call its own fields"
            raise RequestValidationError([{"loc": ["body", given[0]], "msg": msg, "type": "extra_forbidden"}])
        if len(request.calls) > settings.max_batch_items:
            raise HTTPException(
                status_code=413,
                detail=f"{len(request.calls)} calls exceed the limit of {settings.max_batch_items} per request "
                "(RLVR_MAX_BATCH_ITEMS); split the batch",
            )
        errors = []
        for i, call in enumerate(request.calls):
            errors += check_code_limits(settings, source=call.code, loc=("body", "calls", i))
    if errors:
        raise RequestValidationError(errors)


@router.post(
    "/python",
    summary="Run Python cells for a rollout: one call, or a batch of them; sessions keep interpreter state.",
    responses=_RESPONSES,
)
async def python(
    request: ToolRequest,
    http: Request,
    sandbox: SandboxDep,
    sessions: ToolSessionsDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    budget: BudgetDep,
    drain: DrainDep,
) -> ToolResultOut | ToolBatchOut:
    _check(request, settings)
    calls = request.to_calls()
    with budget.admit(len(calls)):
        results = await unless_disconnected(http, sessions.run(sandbox, calls), stop=drain.stop)
    for result in results:
        metrics.verdicts.labels("tool_python", result.status).inc()
    note_items(http.scope, (r.status for r in results))
    out = [ToolResultOut.from_result(r) for r in results]
    return ToolBatchOut(results=out) if request.calls is not None else out[0]


@router.delete(
    "/sessions/{session_id}",
    status_code=204,
    summary="Close a tool session.",
    responses={404: {"description": "No such session is open on this server."}},
)
async def close_session(session_id: str, sessions: ToolSessionsDep) -> Response:
    if not sessions.close(session_id):
        raise HTTPException(status_code=404, detail=f"session {session_id!r} is not open on this server")
    return Response(status_code=204)
