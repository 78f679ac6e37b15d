"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from reward_server.deps import CurrentMathPoolDep, CurrentScoringDep, InstanceIdDep, MetricsDep
from reward_server.engine.runtime import readiness

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    summary="Liveness: the process answers and its math workers can run (503 when they cannot start); "
    "`instance` is the id this server made at start.",
    responses={503: {"description": "No math worker can start; restart the process."}},
)
async def healthz(pool: CurrentMathPoolDep, instance: InstanceIdDep) -> JSONResponse:
    # Answered from the loop without touching a worker: a stopped or busy worker never delays it. A pool
    # whose workers keep failing to start (it retries with back-off) fails it, so that an orchestrator
    # restarts the process instead of leaving it broken behind a green probe. `instance` is the id this
    # server made at start: a healthcheck compares it with the one written to RLVR_INSTANCE_FILE.
    if pool is not None:
        ok, why = pool.health
        if not ok:
            return JSONResponse(status_code=503, content={"status": "failing", "detail": why, "instance": instance})
    return JSONResponse(content={"status": "ok", "instance": instance})


@router.get(
    "/readyz",
    summary="Readiness: 200 once the math workers (and the configured reward models) are up, 503 before. "
    "`sandbox` says whether code runs.",
    responses={503: {"description": "Workers are still starting, or cannot start."}},
)
async def readyz(pool: CurrentMathPoolDep, scoring: CurrentScoringDep) -> JSONResponse:
    ready, content = readiness(pool, scoring)
    return JSONResponse(status_code=200 if ready else 503, content=content)


@router.get("/metrics", summary="Prometheus metrics.", response_class=Response)
async def metrics(metrics: MetricsDep) -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
