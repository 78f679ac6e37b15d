"""FastAPI dependencies: everything a router needs comes from ``app.state`` through these."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from reward_server.admission import Drain, ItemBudget
from reward_server.engine.pool import WorkerPool
from reward_server.metrics import Metrics
from reward_server.rewards import ScoringContext
from reward_server.settings import Settings
from sandbox import Sandbox


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def get_math_pool(request: Request) -> WorkerPool:
    pool: WorkerPool | None = request.app.state.math_pool
    if pool is None or not pool.ready:
        raise HTTPException(status_code=503, detail="math workers are not ready yet", headers={"Retry-After": "1"})
    return pool


def get_scoring(request: Request) -> ScoringContext:
    scoring: ScoringContext | None = getattr(request.app.state, "scoring", None)
    if scoring is None or not scoring.math_pool.ready:
        raise HTTPException(status_code=503, detail="workers are not ready yet", headers={"Retry-After": "1"})
    return scoring


def get_sandbox(request: Request) -> Sandbox:
    scoring: ScoringContext | None = getattr(request.app.state, "scoring", None)
    if scoring is None:
        raise HTTPException(status_code=503, detail="the server is starting", headers={"Retry-After": "1"})
    if scoring.sandbox is None:
        raise HTTPException(
            status_code=503, detail=f"code execution is unavailable on this server: {scoring.sandbox_unavailable}"
        )
    sandbox: Sandbox = scoring.sandbox
    return sandbox


def get_budget(request: Request) -> ItemBudget:
    budget: ItemBudget = request.app.state.budget
    return budget


def get_drain(request: Request) -> Drain:
    drain: Drain = request.app.state.drain
    return drain


SettingsDep = Annotated[Settings, Depends(get_settings)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
MathPoolDep = Annotated[WorkerPool, Depends(get_math_pool)]
ScoringDep = Annotated[ScoringContext, Depends(get_scoring)]
SandboxDep = Annotated[Sandbox, Depends(get_sandbox)]
BudgetDep = Annotated[ItemBudget, Depends(get_budget)]
DrainDep = Annotated[Drain, Depends(get_drain)]
