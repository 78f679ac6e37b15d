"""Start and stop what scoring needs (worker pools, reward models, sandbox) for the server and the offline ``score``
command, and say whether it is ready (:func:`readiness`, for ``/readyz``)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from reward_server.engine.code_sandbox import start_sandbox
from reward_server.engine.context import ScoringContext
from reward_server.engine.judge import JudgeClient
from reward_server.engine.offload import PRELOAD
from reward_server.engine.pool import WorkerPool
from reward_server.engine.reward_models import ModelCatalog, RewardModels
from reward_server.metrics import Metrics
from reward_server.settings import Settings
from reward_server.verifiers.language import default_detector

logger = logging.getLogger("reward_server")

# The worker pool runs each item's CPU-heavy components (math accuracy, format, repetition) in one call.
MATH_HANDLER = "reward_server.engine.offload:score_item"


@asynccontextmanager
async def scoring_runtime(
    settings: Settings, metrics: Metrics | None = None, stopping: Callable[[], bool] = lambda: False
) -> AsyncIterator[ScoringContext]:
    """Start the math worker pool (and the reward models, where configured), yield a ready
    :class:`ScoringContext`, and stop everything on exit.

    ``stopping`` says whether the server was told to stop (SIGTERM) meanwhile: the language-model preload then
    ends at once, unfinished (the models load on first use instead), so that the stop is not kept waiting for it.

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
        preload=PRELOAD,
        slow_item_s=settings.math_slow_item_s,
        max_extra_workers=settings.math_max_extra_workers,
        unhealthy_after_s=settings.worker_start_timeout_s,
    )
    # The sandbox starts beside the pool; where it cannot run, code scores are sandbox_error and the
    # code endpoints answer 503, while everything else works.
    sandbox_start = asyncio.ensure_future(start_sandbox(settings))
    models: RewardModels | None = None
    judge = JudgeClient.from_settings(settings, metrics)
    try:
        await pool.start(timeout_s=settings.worker_start_timeout_s)
        if metrics is not None:
            metrics.workers_alive.labels("math").set_function(lambda: pool.alive)
            metrics.watch_pool(pool)
        logger.info("math pool ready: %d workers", settings.math_workers)
        # After the math pool: its workers come from a forkserver that pre-imports the math verifier, and the
        # first pool to start it sets what it pre-imports.
        models = await RewardModels.start(settings, catalog, on_model_restart)
        if metrics is not None and models is not None:
            model_pool = models.pool
            metrics.workers_alive.labels("reward_model").set_function(lambda: model_pool.alive)
        sandbox, sandbox_unavailable = await sandbox_start
        if settings.preload_language_models:
            # The language detector's models take seconds to load: do it now, not on the first request. Not
            # beside the starts above: the load holds the GIL for seconds at a time, and on a busy machine the
            # sandbox's start-up probe (a subprocess read from a thread) then ran past its 30 s limit.
            await _preload_language_models(stopping)
        if metrics is not None and sandbox is not None:
            live = sandbox
            metrics.workers_alive.labels("sandbox").set_function(lambda: live.alive)
            metrics.watch_sandbox(live)
        yield ScoringContext(
            math_pool=pool,
            math_timeout_s=settings.math_timeout_s,
            math_max_timeout_s=settings.math_max_timeout_s,
            request_budget_s=settings.request_budget_s,
            request_budget_max_s=settings.request_budget_max_s,
            metrics=metrics,
            sandbox=sandbox,
            sandbox_unavailable=sandbox_unavailable,
            code_limits=settings.sandbox_default_limits(),
            code_max_limits=settings.sandbox_max_limits(),
            reward_models=models,
            models=catalog,
            judge=judge,
        )
    finally:
        if judge is not None:
            await judge.close()
        if models is not None:
            await models.close()
        await pool.close()
        sandbox, _ = await sandbox_start
        if sandbox is not None:
            await sandbox.close()


def readiness(pool: WorkerPool | None, scoring: ScoringContext | None) -> tuple[bool, dict[str, object]]:
    """Whether the server can score, and the report ``/readyz`` gives: ``{"ready", "checks", "detail"?}``.

    ``pool`` is the math pool, started or not (``None`` before the runtime started); ``scoring`` the running
    context (``None`` while the runtime starts or after it stopped). The math workers and each configured reward
    model gate readiness; the sandbox and the models not configured only inform.
    """
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
    checks: dict[str, object] = {"math_workers": math_ready, "sandbox": sandbox}
    ready = math_ready
    # A configured reward model gates readiness (the server was told to serve it); one not configured informs.
    for component in ("reward_model", "prm"):
        if scoring is None:
            checks[component] = "starting"
        elif component in scoring.models.infos:
            up = scoring.reward_models is not None and scoring.reward_models.ready
            checks[component] = "ok" if up else "down: its worker cannot start (see the server's log)"
            ready = ready and up
        else:
            checks[component] = "not configured"
    content: dict[str, object] = {"ready": ready, "checks": checks}
    if pool is not None and not math_ready:
        _, why = pool.health
        if why:
            content["detail"] = why
    return ready, content


_PRELOAD_POLL_S = 0.05


async def _preload_language_models(stopping: Callable[[], bool]) -> None:
    """Load the language detector's models in a daemon thread, one language at a time, and stop waiting as soon as
    ``stopping()`` is true. A daemon thread, not ``asyncio.to_thread``: the interpreter joins the default executor's
    threads at exit, which would keep a stopped server waiting for the rest of the load."""
    detector = default_detector()
    start = time.monotonic()
    logger.info("loading the language models (RLVR_PRELOAD_LANGUAGE_MODELS)")
    loaded: list[bool] = []
    thread = threading.Thread(target=lambda: loaded.append(detector.load(stopping)), name="rlvr-preload", daemon=True)
    thread.start()
    while thread.is_alive() and not stopping():
        await asyncio.sleep(_PRELOAD_POLL_S)
    if loaded == [True]:
        logger.info("language models loaded in %.1f s", time.monotonic() - start)
    else:
        logger.warning(
            "stopping during start-up: language-model preload abandoned after %.1f s (the models load on first use)",
            time.monotonic() - start,
        )
