"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from reward_server.deps import MetricsDep

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    summary="Liveness: the process answers and its math workers can run (503 when they cannot start).",
    responses={503: {"description": "No math worker can start; restart the process."}},
)
async def healthz(request: Request) -> JSONResponse:
    # Answered from the loop without touching a worker: a stopped or busy worker never delays it. A pool
    # whose workers keep failing to start (it retries with back-off) fails it, so that an orchestrator
    # restarts the process instead of leaving it broken behind a green probe.
    pool = request.app.state.math_pool
    if pool is not None:
        ok, why = pool.health
        if not ok:
            return JSONResponse(status_code=503, content={"status": "failing", "detail": why})
    return JSONResponse(content={"status": "ok"})


@router.get(
    "/readyz",
    summary="Readiness: 200 once the math workers are up, 503 before. `sandbox` says whether code runs.",
    responses={503: {"description": "Workers are still starting, or cannot start."}},
)
async def readyz(request: Request) -> JSONResponse:
    pool = request.app.state.math_pool
    scoring = getattr(request.app.state, "scoring", None)
    math_ready = bool(pool is not None and pool.ready)
    # A server without a sandbox still serves everything but code (code items get sandbox_error), so the
    # sandbox informs rather than gates readiness.
    if scoring is None:
        sandbox = "starting"
    elif scoring.sandbox is not None and scoring.sandbox.alive > 0:
        sandbox = "ok"
    elif scoring.sandbox is not None:
        # Every sandbox was replaced and none is up yet: restarting, or failing to start (the log says why).
        sandbox = "down: no sandbox is up; code items get sandbox_error until one starts (see the server's log)"
    else:
        sandbox = f"unavailable: {scoring.sandbox_unavailable}"
    content: dict[str, object] = {"ready": math_ready, "checks": {"math_workers": math_ready, "sandbox": sandbox}}
    if pool is not None and not math_ready:
        _, why = pool.health
        if why:
            content["detail"] = why
    return JSONResponse(status_code=200 if math_ready else 503, content=content)


@router.get("/metrics", summary="Prometheus metrics.", response_class=Response)
async def metrics(metrics: MetricsDep) -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
