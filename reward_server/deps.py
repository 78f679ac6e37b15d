"""FastAPI dependencies, and the one door to ``app.state``.

The app factory stores what routers need with :func:`init_state`, and its lifespan the running engine with
:func:`set_scoring`; routers read it only through the dependencies below (or, outside a dependency, through
the same functions called with the request).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request

from reward_server.admission import Drain, ItemBudget
from reward_server.engine.context import ScoringContext
from reward_server.engine.pool import WorkerPool
from reward_server.engine.tools import ToolConfig, ToolSessions
from reward_server.metrics import Metrics
from reward_server.settings import Settings
from sandbox import Sandbox


def init_state(
    app: FastAPI, settings: Settings, metrics: Metrics, budget: ItemBudget, drain: Drain, instance_id: str
) -> None:
    """What every request can read from the moment the app is built; the engine is not there until the
    lifespan starts it (:func:`set_scoring`)."""
    app.state.settings = settings
    app.state.instance_id = instance_id
    app.state.metrics = metrics
    app.state.math_pool = None
    app.state.scoring = None
    app.state.budget = budget
    app.state.drain = drain


def set_scoring(app: FastAPI, scoring: ScoringContext | None) -> None:
    """The running engine, from the lifespan; ``None`` once it stops. The math pool stays, so that the probes
    of a stopped server see it stopped rather than never started."""
    if scoring is not None:
        app.state.math_pool = scoring.math_pool
    app.state.scoring = scoring


def app_math_pool(app: FastAPI) -> WorkerPool | None:
    """The math pool of ``app`` outside a request (the item budget's Retry-After reads its backlog); ``None``
    before the lifespan starts it."""
    pool: WorkerPool | None = getattr(app.state, "math_pool", None)
    return pool


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def current_math_pool(request: Request) -> WorkerPool | None:
    """The math pool, started or not; ``None`` before the lifespan starts it."""
    pool: WorkerPool | None = request.app.state.math_pool
    return pool


def current_scoring(request: Request) -> ScoringContext | None:
    """The running engine, or ``None`` while the server starts or after it stopped."""
    scoring: ScoringContext | None = getattr(request.app.state, "scoring", None)
    return scoring


def get_math_pool(request: Request) -> WorkerPool:
    pool = current_math_pool(request)
    if pool is None or not pool.ready:
        raise HTTPException(status_code=503, detail="math workers are not ready yet", headers={"Retry-After": "1"})
    return pool


def get_scoring(request: Request) -> ScoringContext:
    scoring = current_scoring(request)
    if scoring is None or not scoring.math_pool.ready:
        raise HTTPException(status_code=503, detail="workers are not ready yet", headers={"Retry-After": "1"})
    return scoring


def get_sandbox(request: Request) -> Sandbox:
    scoring = current_scoring(request)
    if scoring is None:
        raise HTTPException(status_code=503, detail="the server is starting", headers={"Retry-After": "1"})
    if scoring.sandbox is None:
        raise HTTPException(
            status_code=503, detail=f"code execution is unavailable on this server: {scoring.sandbox_unavailable}"
        )
    sandbox: Sandbox = scoring.sandbox
    return sandbox


def get_instance_id(request: Request) -> str:
    """The id this server made at start (see :mod:`reward_server.instance`)."""
    instance: str = request.app.state.instance_id
    return instance


def get_budget(request: Request) -> ItemBudget:
    budget: ItemBudget = request.app.state.budget
    return budget


def get_drain(request: Request) -> Drain:
    drain: Drain = request.app.state.drain
    return drain


def get_tool_sessions(request: Request) -> ToolSessions:
    """The tool sessions of this app (made on the first tool call, from the settings' ``RLVR_TOOL_*``)."""
    sessions: ToolSessions | None = getattr(request.app.state, "tool_sessions", None)
    if sessions is None:
        settings = get_settings(request)
        limits = dataclasses.replace(
            settings.sandbox_default_limits(),
            time_s=settings.tool_time_s,
            memory_mb=settings.tool_memory_mb,
            output_bytes=settings.tool_output_bytes,
        ).capped(settings.sandbox_max_limits())
        config = ToolConfig(
            limits=limits,
            max_time_s=min(settings.tool_max_time_s, settings.sandbox_max_time_s),
            max_output_chars=settings.tool_max_output_chars,
            session_ttl_s=settings.tool_session_ttl_s,
            max_sessions=settings.tool_max_sessions,
            max_session_calls=settings.tool_max_session_calls,
            max_session_bytes=settings.tool_max_session_bytes,
        )
        # Sessions live in one process's memory: with several HTTP workers each has its own, named apart, so that a
        # call that reaches another worker is `session_lost` rather than a silently empty session.
        instance = get_instance_id(request)
        if settings.http_workers > 1:
            instance = f"{instance}-{os.getpid()}"
        sessions = request.app.state.tool_sessions = ToolSessions(instance, config)
        get_metrics(request).tool_sessions.set_function(lambda: sessions.open)
    return sessions


SettingsDep = Annotated[Settings, Depends(get_settings)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
MathPoolDep = Annotated[WorkerPool, Depends(get_math_pool)]
CurrentMathPoolDep = Annotated[WorkerPool | None, Depends(current_math_pool)]
ScoringDep = Annotated[ScoringContext, Depends(get_scoring)]
CurrentScoringDep = Annotated[ScoringContext | None, Depends(current_scoring)]
SandboxDep = Annotated[Sandbox, Depends(get_sandbox)]
BudgetDep = Annotated[ItemBudget, Depends(get_budget)]
DrainDep = Annotated[Drain, Depends(get_drain)]
InstanceIdDep = Annotated[str, Depends(get_instance_id)]
ToolSessionsDep = Annotated[ToolSessions, Depends(get_tool_sessions)]
