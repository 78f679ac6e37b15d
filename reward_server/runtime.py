"""Start and stop what scoring needs (worker pools, sandbox) for the server and the offline ``score`` command."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from reward_server.code_sandbox import start_sandbox
from reward_server.metrics import Metrics
from reward_server.models import ModelCatalog, RewardModels
from reward_server.rewards import ScoringContext
from reward_server.settings import Settings
from reward_server.verifiers.language import default_detector
from reward_server.workers import WorkerPool

logger = logging.getLogger("reward_server")

MATH_HANDLER = "reward_server.verifiers.math:verify_payload"


@asynccontextmanager
async def scoring_runtime(settings: Settings, metrics: Metrics | None = None) -> AsyncIterator[ScoringContext]:
    """Start the math worker pool (and the reward models, where configured), yield a ready
    :class:`ScoringContext`, and stop everything on exit.

    Raises:
        TimeoutError: the workers did not start within ``settings.worker_start_timeout_s`` (the models within
            ``settings.model_start_timeout_s``).
        ModelError: a configured reward model cannot be used (the message says why and what to set).
        RuntimeError: a model worker could not load its models.
    """
    # Checked before anything starts: a configured model that cannot load must stop the server at once.
    catalog = ModelCatalog.from_settings(settings)

    def on_restart(reason: str) -> None:
        if metrics is not None:
            metrics.worker_restarts.labels("math", reason).inc()

    def on_model_restart(reason: str) -> None:
        if metrics is not None:
            metrics.worker_restarts.labels("reward_model", reason).inc()

    pool = WorkerPool(
        MATH_HANDLER,
        settings.math_workers,
        name="math",
        init_kwargs={"cache_size": settings.math_cache_size},
        on_restart=on_restart,
        # Past the soft in-worker deadline, give the worker a moment to report before killing it.
        grace_s=0.25,
    )
    # The sandbox starts beside the pool; where it cannot run, code scores are sandbox_error and the
    # code endpoints answer 503, while everything else works.
    sandbox_start = asyncio.ensure_future(start_sandbox(settings))
    models: RewardModels | None = None
    try:
        # The language detector's models take seconds to load: do it beside the pool's start, not on the
        # first request.
        preload = asyncio.to_thread(default_detector().load) if settings.preload_language_models else asyncio.sleep(0)
        await asyncio.gather(pool.start(timeout_s=settings.worker_start_timeout_s), preload)
        if metrics is not None:
            metrics.workers_alive.labels("math").set_function(lambda: pool.alive)
        logger.info("math pool ready: %d workers", settings.math_workers)
        # After the math pool: its workers come from a forkserver that pre-imports the math verifier, and the
        # first pool to start it sets what it pre-imports.
        models = await RewardModels.start(settings, catalog, on_model_restart)
        if metrics is not None and models is not None:
            model_pool = models.pool
            metrics.workers_alive.labels("reward_model").set_function(lambda: model_pool.alive)
        sandbox, sandbox_unavailable = await sandbox_start
        if metrics is not None and sandbox is not None:
            live = sandbox
            metrics.workers_alive.labels("sandbox").set_function(lambda: live.alive)
        yield ScoringContext(
            math_pool=pool,
            math_timeout_s=settings.math_timeout_s,
            math_max_timeout_s=settings.math_max_timeout_s,
            metrics=metrics,
            sandbox=sandbox,
            sandbox_unavailable=sandbox_unavailable,
            code_limits=settings.sandbox_default_limits(),
            code_max_limits=settings.sandbox_max_limits(),
            reward_models=models,
            models=catalog,
        )
    finally:
        if models is not None:
            await models.close()
        await pool.close()
        sandbox, _ = await sandbox_start
        if sandbox is not None:
            await sandbox.close()
