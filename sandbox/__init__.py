"""Untrusted code execution with hard limits and no network. Knows nothing of HTTP or the reward server.

sandbox = LocalSandbox(pool_size=4)          # or DockerSandbox(pool_size=4)
await sandbox.start()                        # SandboxUnavailable says how to fix the host
report = await run_tests(sandbox, "python", code, StdioTests((StdioCase(b"1 2", b"3"),)))
report.reward()                              # fraction passed, or None when not scoreable
await sandbox.close()
"""

from sandbox.base import Job, Sandbox
from sandbox.docker import DockerSandbox
from sandbox.harness import (
    AssertTests,
    CallCase,
    CallTests,
    StdioCase,
    StdioTests,
    TestSpec,
    compare_output,
    json_equal,
    run_program,
    run_tests,
)
from sandbox.languages import LANGUAGES, Language, get_language
from sandbox.local import LocalSandbox
from sandbox.types import CaseResult, ExecResult, Limits, RunResult, SandboxUnavailable, Status, TestReport, utf8

__all__ = [
    "LANGUAGES",
    "AssertTests",
    "CallCase",
    "CallTests",
    "CaseResult",
    "DockerSandbox",
    "ExecResult",
    "Job",
    "Language",
    "Limits",
    "LocalSandbox",
    "RunResult",
    "Sandbox",
    "SandboxUnavailable",
    "Status",
    "StdioCase",
    "StdioTests",
    "TestReport",
    "TestSpec",
    "compare_output",
    "get_language",
    "json_equal",
    "run_program",
    "run_tests",
    "utf8",
]
