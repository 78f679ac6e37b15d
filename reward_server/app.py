"""The app factory: ``create_app(settings)`` wires the FastAPI app; its lifespan starts and stops the engine.

Wiring only: the engine (:mod:`reward_server.engine`) scores, :mod:`reward_server.deps` is the door to
``app.state``, :mod:`reward_server.handlers` answers errors, :mod:`reward_server.middleware` admits and logs,
and :mod:`reward_server.routers` speak HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from reward_server import __version__
from reward_server.admission import Drain, ItemBudget, install_drain_on_sigterm
from reward_server.auth import ApiKeys, is_loopback
from reward_server.deps import app_math_pool, init_state, set_scoring
from reward_server.engine.runtime import scoring_runtime
from reward_server.handlers import install_handlers
from reward_server.instance import instance_id
from reward_server.jsonio import SafeJSONResponse
from reward_server.metrics import Metrics
from reward_server.middleware import AdmissionGate, ApiKeyAuth, BodyLimit, RequestLog
from reward_server.routers import code, health, math, openrlhf, rewards, slime
from reward_server.routers import format as format_router
from reward_server.routers import language as language_router
from reward_server.routers import tools as tools_router
from reward_server.settings import Settings

logger = logging.getLogger("reward_server")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the reward server.

    Nothing starts at import or build time: the math worker pool starts in the lifespan, so ``/readyz``
    answers 503 until it is up. Tests can pass their own :class:`Settings`.
    """
    settings = settings or Settings()
    metrics = Metrics()
    # Retry-After counts the math pool's backlog once the lifespan has started it.
    budget = ItemBudget(
        settings.max_queued_items,
        pool=lambda: app_math_pool(app),
        max_work=settings.max_queued_work,
        budget_s=settings.request_budget_s,
        budget_max_s=settings.request_budget_max_s,
        reference_work=float(settings.max_batch_items),
    )
    drain = Drain(work_rate=budget.work_rate)
    metrics.queued_items.set_function(lambda: budget.queued)
    metrics.queued_work.set_function(lambda: budget.work)

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
            async with scoring_runtime(settings, metrics, stopping=lambda: drain.draining) as scoring:
                set_scoring(app, scoring)
                # The lifespan state reaches the connection protocol (reward_server.serving) and every request.
                yield {"rlvr_settings": settings, "rlvr_metrics": metrics}
            set_scoring(app, None)
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
    init_state(app, settings, metrics, budget, drain, instance_id())

    # The last added is the outermost: the log and the metrics see every answer, the 401s and 429s included.
    app.add_middleware(BodyLimit, max_bytes=int(settings.max_body_mb * 1024 * 1024))
    app.add_middleware(AdmissionGate, budget=budget, drain=drain, body_timeout_s=settings.body_timeout_s)
    keys = ApiKeys(settings.api_key_values())
    if keys:
        app.add_middleware(ApiKeyAuth, keys=keys, protect_metrics=settings.auth_metrics)
    app.add_middleware(RequestLog, metrics=metrics)

    install_handlers(app)
    app.include_router(health.router)
    app.include_router(math.router)
    app.include_router(rewards.router)
    app.include_router(format_router.router)
    app.include_router(language_router.router)
    app.include_router(code.router)
    app.include_router(openrlhf.router)
    app.include_router(slime.router)
    app.include_router(tools_router.router)
    return app
