"""``POST /v1/code/run`` and ``POST /v1/code/test``: run untrusted programs in the sandbox."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from reward_server.deps import MetricsDep, SandboxDep, SettingsDep
from reward_server.schemas.code import CodeRunRequest, CodeRunResult, CodeTestRequest, CodeTestResult, _Program
from reward_server.settings import Settings
from reward_server.verifiers.code import CodeOptions, resolve_limits, run_code_tests
from sandbox import Limits, run_program, utf8

router = APIRouter(prefix="/v1/code", tags=["code"])

_UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {"description": "The sandbox is unavailable here (the detail says how to fix it) or starting."}
}


def _reject(field: str, message: str) -> HTTPException:
    return HTTPException(status_code=422, detail=[{"loc": ["body", field], "msg": message, "type": "value_error"}])


def _limits(request: _Program, settings: Settings) -> Limits:
    """The request's limits within the server's maxima; 422 for a program over the size limit."""
    size = len(utf8(request.code))
    if size > settings.sandbox_max_source_bytes:
        limit = settings.sandbox_max_source_bytes
        raise _reject(
            "code", f"the program is {size} bytes; at most {limit} are accepted (RLVR_SANDBOX_MAX_SOURCE_BYTES)"
        )
    requested = request.limits.model_dump() if request.limits is not None else None
    return resolve_limits(requested, settings.sandbox_default_limits(), settings.sandbox_max_limits())


@router.post("/run", summary="Compile (if needed) and run one program.", responses=_UNAVAILABLE)
async def run(
    request: CodeRunRequest, sandbox: SandboxDep, settings: SettingsDep, metrics: MetricsDep
) -> CodeRunResult:
    limits = _limits(request, settings)
    result = await run_program(sandbox, request.language, request.code, stdin=utf8(request.stdin), limits=limits)
    metrics.verdicts.labels("code_run", str(result.status)).inc()
    return CodeRunResult.from_result(result, settings.sandbox_tail_bytes)


@router.post("/test", summary="Run one program against a test list and score it.", responses=_UNAVAILABLE)
async def test(
    request: CodeTestRequest, sandbox: SandboxDep, settings: SettingsDep, metrics: MetricsDep
) -> CodeTestResult:
    limits = _limits(request, settings)
    spec = request.spec()
    if len(spec.cases) > settings.sandbox_max_cases:
        raise _reject("tests", f"more than {settings.sandbox_max_cases} test cases (RLVR_SANDBOX_MAX_CASES)")
    options = CodeOptions(
        language=request.language,
        early_stop=request.early_stop,
        all_or_nothing=request.all_or_nothing,
        limits=limits,
        tail_bytes=settings.sandbox_tail_bytes,
    )
    report = await run_code_tests(request.code, spec, options, sandbox)
    metrics.verdicts.labels("code_test", str(report.status)).inc()
    return CodeTestResult.from_report(report, all_or_nothing=request.all_or_nothing)
