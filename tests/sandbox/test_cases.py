"""Every case of ../shared/cases/code.jsonl (inputs that broke peer systems) gives its expected verdict,
on both backends. The cases' plain-word outcomes map onto our statuses as below."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from sandbox import (
    AssertTests,
    CallCase,
    CallTests,
    Limits,
    Sandbox,
    Status,
    StdioCase,
    StdioTests,
    TestSpec,
    run_program,
    run_tests,
)
from tests.conftest import cases_dir, cases_or_placeholder, require_file

OUTCOMES: dict[str, set[Status]] = {
    "pass": {Status.PASSED},
    "fail": {Status.WRONG_ANSWER},
    "timeout": {Status.TIMEOUT},
    "grader_error": {Status.GRADER_ERROR},
    "error": {Status.RUNTIME_ERROR, Status.MEMORY_LIMIT, Status.OUTPUT_LIMIT},
}
ERROR_CLASSES: dict[str, Status] = {
    "runtime_error": Status.RUNTIME_ERROR,
    "memory_limit_exceeded": Status.MEMORY_LIMIT,
    "compile_error": Status.COMPILE_ERROR,
}
LIMIT_NAMES = {"time_s": "time_s", "memory_mb": "memory_mb", "max_processes": "max_processes", "stack_mb": "stack_mb"}
GRACE_S = 2.0


def load_cases() -> list[dict[str, Any]]:
    path = cases_dir() / "code.jsonl"
    if not path.exists():
        return []  # test_cases_file_is_there says why (and fails in CI)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def expected_statuses(expected: dict[str, Any]) -> set[Status]:
    words = expected.get("acceptable_outcomes") or [expected["outcome"]]
    statuses: set[Status] = set()
    for word in words:
        if word == "error" and "error_class" in expected and word == expected["outcome"]:
            statuses.add(ERROR_CLASSES[expected["error_class"]])
        else:
            statuses |= OUTCOMES[word]
    return statuses


def case_limits(raw: dict[str, Any]) -> Limits:
    values = {LIMIT_NAMES[k]: v for k, v in raw.items() if k in LIMIT_NAMES}
    if "stdout_cap_bytes" in raw:
        values["output_bytes"] = raw["stdout_cap_bytes"]
    return Limits(**values)


def case_tests(inp: dict[str, Any]) -> TestSpec:
    if inp["mode"] == "stdio":
        stdin = inp.get("stdin")
        if stdin is None:
            spec = inp["stdin_spec"]
            stdin = spec["repeat"] * spec["times"]
        return StdioTests((StdioCase(stdin.encode(), inp["expected_stdout"].encode()),))
    if inp["mode"] == "assert":
        return AssertTests(test=inp["tests"])
    return CallTests(inp["fn_name"], tuple(CallCase(tuple(t["input"]), t["output"]) for t in inp["tests"]))


CASES = load_cases()


def test_cases_file_is_there() -> None:
    require_file(cases_dir() / "code.jsonl")
    assert CASES, "the cases file is empty"


@pytest.mark.parametrize("case", cases_or_placeholder(CASES, "code.jsonl"), ids=lambda c: c["id"])
async def test_case(sandbox: Sandbox, case: dict[str, Any]) -> None:
    inp, expected = case["input"], case["expected"]
    limits = case_limits(inp.get("limits", {}))
    tests = case_tests(inp)
    want = expected_statuses(expected)
    copies = inp.get("concurrency", 1)

    start = time.monotonic()
    reports = await asyncio.gather(
        *(run_tests(sandbox, inp["language"], inp["program"], tests, limits=limits) for _ in range(copies))
    )
    elapsed = time.monotonic() - start
    for report in reports:
        assert report.status in want, (
            f"{case['id']} ({case['kind']}): {report.status}, {[c.detail for c in report.cases]}"
        )
        assert report.status is not Status.SANDBOX_ERROR
    report = reports[0]
    if "reward" in expected:
        assert report.reward() == expected["reward"], case["id"]
    if "return_code" in expected:
        assert report.cases[0].exit_code == expected["return_code"], case["id"]
    if copies == 1 and Status.TIMEOUT in want:
        # time_s is CPU time: on a loaded host the verdict also waits for the time the run waited for a CPU.
        waited = max((c.cpu_wait_s for c in report.cases), default=0.0)
        assert elapsed - waited < limits.time_s + GRACE_S, f"{case['id']}: verdict after {elapsed:.1f} s"

    if "follow_up_run" in inp:  # nothing the first program did may show in the next one
        follow = inp["follow_up_run"]
        result = await run_program(sandbox, inp["language"], follow["program"])
        assert result.run is not None and result.run.stdout == follow["expected_stdout"].encode(), case["id"]
    # The sandbox keeps serving after every case.
    after = await run_program(sandbox, "python", "print(2)")
    assert after.run is not None and after.run.stdout == b"2\n"


async def test_endless_output_is_cut_and_flagged(sandbox: Sandbox) -> None:
    # code-001's first invariant, which the test verdict above does not show: the cut and its flag.
    case = next((c for c in CASES if c["id"] == "code-001"), None)
    if case is None:
        pytest.skip("code-001 is not in the cases file")
    limits = case_limits(case["input"]["limits"])
    result = await run_program(sandbox, "python", case["input"]["program"], limits=limits)
    assert result.status is Status.TIMEOUT
    assert result.run is not None and result.run.stdout_truncated
    assert len(result.run.stdout) == case["input"]["limits"]["stdout_cap_bytes"]
