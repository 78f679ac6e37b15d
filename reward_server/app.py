"""The app factory: ``create_app(settings)`` builds the FastAPI app; its lifespan owns the worker pools."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from reward_server import __version__
from reward_server.admission import Drain, ItemBudget, QueueFull, install_drain_on_sigterm
from reward_server.auth import ApiKeys, is_loopback
from reward_server.jsonio import SafeJSONResponse
from reward_server.metrics import Metrics
from reward_server.middleware import DRAIN_RETRY_AFTER_S, AdmissionGate, ApiKeyAuth, BodyLimit, RequestLog, request_info
from reward_server.routers import code, health, math, openrlhf, rewards, slime
from reward_server.routers import format as format_router
from reward_server.routers import language as language_router
from reward_server.routers.cancel import ClientGone, ServerStopping
from reward_server.runtime import scoring_runtime
from reward_server.settings import Settings

logger = logging.getLogger("reward_server")


def _is_json(content_type: str | None) -> bool:
    """Whether a request's content type is one FastAPI parses as JSON (``application/json``, ``application/*+json``)."""
    media = (content_type or "").split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the reward server.

    Nothing starts at import or build time: the math worker pool starts in the lifespan, so ``/readyz``
    answers 503 until it is up. Tests can pass their own :class:`Settings`.
    """
    settings = settings or Settings()
    metrics = Metrics()
    budget = ItemBudget(settings.max_queued_items)
    drain = Drain()
    metrics.queued_items.set_function(lambda: budget.queued)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        if not is_loopback(settings.host) and not settings.api_keys:
            logger.warning(
                "SECURITY: listening on %s without API keys: anyone who reaches this port can run code in the "
                "sandbox pool. Set RLVR_API_KEYS or RLVR_API_KEYS_FILE, or bind 127.0.0.1.",
                settings.host,
            )
        # Under a server (python -m reward_server, uvicorn), SIGTERM drains before uvicorn shuts down.
        restore_signals = install_drain_on_sigterm(drain, settings.drain_s)
        try:
            async with scoring_runtime(settings, metrics) as scoring:
                app.state.math_pool = scoring.math_pool
                app.state.scoring = scoring
                # The lifespan state reaches the connection protocol (reward_server.serving) and every request.
                yield {"rlvr_settings": settings, "rlvr_metrics": metrics}
            app.state.scoring = None
        finally:
            restore_signals()

    app = FastAPI(
        title="rlvr reward server",
        version=__version__,
        description=(
            "Verifiable rewards for RL on reasoning models. `POST /v1/rewards` scores whole groups of "
            "completions; the single-item endpoints help debugging. A `null` reward always comes with a "
            "status that says why, and must not be trained on as 0."
        ),
        lifespan=lifespan,
        # Text echoed from a request may hold a lone surrogate; this class writes it back as its escape.
        default_response_class=SafeJSONResponse,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.math_pool = None
    app.state.scoring = None
    app.state.budget = budget
    app.state.drain = drain

    # The last added is the outermost: the log and the metrics see every answer, the 401s and 429s included.
    app.add_middleware(BodyLimit, max_bytes=int(settings.max_body_mb * 1024 * 1024))
    app.add_middleware(AdmissionGate, budget=budget, drain=drain, body_timeout_s=settings.body_timeout_s)
    keys = ApiKeys(settings.api_key_values())
    if keys:
        app.add_middleware(ApiKeyAuth, keys=keys, protect_metrics=settings.auth_metrics)
    app.add_middleware(RequestLog, metrics=metrics)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> SafeJSONResponse:
        # FastAPI's default shape, minus the echo of the whole input (which can be megabytes of text).
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        sent = request.headers.get("content-type")
        if not _is_json(sent) and any(tuple(e["loc"]) == ("body",) for e in errors):
            # FastAPI reads a body as JSON only when it says so: `curl -d` alone sends a form, and the 422 on
            # ["body"] would say nothing of why.
            why = f"the body was sent as {sent!r}" if sent else "the body was sent without a content type"
            errors = [
                {
                    "loc": ["body"],
                    "msg": f"{why}, not JSON: send the header 'content-type: application/json' (curl: -H "
                    "'content-type: application/json')",
                    "type": "content_type",
                }
            ]
        return SafeJSONResponse(status_code=422, content={"detail": jsonable_encoder(errors)})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI's own handler, but with a response that encodes any detail (it may quote the request).
        if exc.status_code in (204, 304) or exc.status_code < 200:
            return Response(status_code=exc.status_code, headers=exc.headers)
        return SafeJSONResponse(status_code=exc.status_code, content={"detail": exc.detail}, headers=exc.headers)

    @app.exception_handler(QueueFull)
    async def queue_full(request: Request, exc: QueueFull) -> SafeJSONResponse:
        # The batch is refused whole; Retry-After says when the queue should have room for it.
        info = request_info(request.scope)
        if info is not None:
            info.refused = "queue_full"
        return SafeJSONResponse(
            status_code=429, content={"detail": str(exc)}, headers={"Retry-After": str(exc.retry_after_s)}
        )

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        # Nobody is listening; 499 (nginx's "client closed request") keeps the metrics honest.
        return Response(status_code=499)

    @app.exception_handler(ServerStopping)
    async def server_stopping(request: Request, exc: ServerStopping) -> SafeJSONResponse:
        info = request_info(request.scope)
        if info is not None:
            info.refused = "drain_cancelled"
        return SafeJSONResponse(
            status_code=503,
            content={"detail": "the server shut down before this request was answered; retry on another server"},
            headers={"Retry-After": str(DRAIN_RETRY_AFTER_S), "Connection": "close"},
        )

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> SafeJSONResponse:
        # Never leak a traceback to a client; the log keeps it.
        logger.exception("unhandled error on %s", request.url.path)
        return SafeJSONResponse(status_code=500, content={"detail": f"internal error: {type(exc).__name__}"})

    app.include_router(health.router)
    app.include_router(math.router)
    app.include_router(rewards.router)
    app.include_router(format_router.router)
    app.include_router(language_router.router)
    app.include_router(code.router)
    app.include_router(openrlhf.router)
    app.include_router(slime.router)
    return app
