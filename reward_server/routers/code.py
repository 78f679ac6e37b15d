"""``POST /v1/code/run`` and ``POST /v1/code/test``: run untrusted programs in the sandbox."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from reward_server.deps import BudgetDep, DrainDep, MetricsDep, SandboxDep, SettingsDep
from reward_server.jsonio import JSONBodyRoute
from reward_server.routers.cancel import unless_disconnected
from reward_server.routers.limits import program_limits
from reward_server.schemas.code import CodeRunRequest, CodeRunResult, CodeTestRequest, CodeTestResult
from reward_server.verifiers.code import CodeOptions, run_code_tests
from sandbox import run_program, utf8

router = APIRouter(prefix="/v1/code", tags=["code"], route_class=JSONBodyRoute)

_UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    429: {"description": "The server's queue is full (see Retry-After)."},
    503: {
        "description": "The sandbox is unavailable here (the detail says how to fix it) or starting, or the "
        "server is shutting down (see Retry-After)."
    },
}


@router.post("/run", summary="Compile (if needed) and run one program.", responses=_UNAVAILABLE)
async def run(
    request: CodeRunRequest,
    http: Request,
    sandbox: SandboxDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    budget: BudgetDep,
    drain: DrainDep,
) -> CodeRunResult:
    limits = program_limits(request, settings)
    with budget.admit(1):
        work = run_program(sandbox, request.language, request.code, stdin=utf8(request.stdin), limits=limits)
        result = await unless_disconnected(http, work, stop=drain.stop)
    metrics.verdicts.labels("code_run", str(result.status)).inc()
    return CodeRunResult.from_result(result, settings.sandbox_tail_bytes)


@router.post("/test", summary="Run one program against a test list and score it.", responses=_UNAVAILABLE)
async def test(
    request: CodeTestRequest,
    http: Request,
    sandbox: SandboxDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    budget: BudgetDep,
    drain: DrainDep,
) -> CodeTestResult:
    spec = request.spec()
    limits = program_limits(request, settings, spec)
    options = CodeOptions(
        language=request.language,
        early_stop=request.early_stop,
        all_or_nothing=request.all_or_nothing,
        limits=limits,
        tail_bytes=settings.sandbox_tail_bytes,
    )
    with budget.admit(1):
        report = await unless_disconnected(http, run_code_tests(request.code, spec, options, sandbox), stop=drain.stop)
    metrics.verdicts.labels("code_test", str(report.status)).inc()
    return CodeTestResult.from_report(report, all_or_nothing=request.all_or_nothing)
