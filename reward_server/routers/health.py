"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from reward_server.deps import MetricsDep

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers HTTP.")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: 200 once the worker pools are up, 503 before.",
    responses={503: {"description": "Workers are still starting."}},
)
async def readyz(request: Request) -> JSONResponse:
    pool = request.app.state.math_pool
    checks = {"math_workers": bool(pool is not None and pool.ready)}
    ready = all(checks.values())
    return JSONResponse(status_code=200 if ready else 503, content={"ready": ready, "checks": checks})


@router.get("/metrics", summary="Prometheus metrics.", response_class=Response)
async def metrics(metrics: MetricsDep) -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
