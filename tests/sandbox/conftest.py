"""Sandbox fixtures: one started sandbox per backend for the whole session.

Every test that takes ``sandbox`` runs on both backends. A backend that cannot run here (no bubblewrap,
no Docker engine, no image) skips with the reason and the fix, except in CI (``CI=true``), where that is
a failure: CI must test both.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from sandbox import CaseResult, DockerSandbox, ExecResult, Limits, LocalSandbox, Sandbox, SandboxUnavailable, Status
from sandbox.types import IDLE_GRACE_S
from tests.conftest import IN_CI

# Sized for the security tests: the 8 GB allocation must be refused by the limits, not by the host.
MAX_LIMITS = Limits(time_s=30, memory_mb=2048, max_processes=64, output_bytes=16 * 1024 * 1024, stack_mb=1024)


# Forks sleeping children until the process limit stops it, then prints how many it got.
FORK_COUNTER = """
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print(n)
"""


def make_sandbox(kind: str, pool_size: int = 2) -> Sandbox:
    if kind == "docker":
        return DockerSandbox(pool_size, max_limits=MAX_LIMITS)
    return LocalSandbox(pool_size, max_limits=MAX_LIMITS)


def unavailable(reason: str) -> None:
    """Skip, or fail in CI, where a sandbox backend is missing."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: no sandbox test may skip for a missing engine)")
    pytest.skip(reason)


async def started(kind: str, pool_size: int = 2) -> Sandbox:
    sandbox = make_sandbox(kind, pool_size)
    try:
        await sandbox.start()
    except SandboxUnavailable as exc:
        await sandbox.close()
        unavailable(f"{kind} sandbox backend unavailable here: {exc}")
    return sandbox


BACKENDS = [pytest.param("local", marks=pytest.mark.bwrap), pytest.param("docker", marks=pytest.mark.docker)]


@pytest_asyncio.fixture(scope="session", loop_scope="session", params=BACKENDS)
async def sandbox(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    """A started sandbox of each backend, shared by the session (pool of 2)."""
    sb = await started(request.param)
    yield sb
    await sb.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The session-scoped sandboxes live on the session's event loop, so every async test here must too.
    for item in items:
        if "tests/sandbox/" in str(item.path) and inspect.iscoroutinefunction(getattr(item, "obj", None)):
            item.add_marker(pytest.mark.asyncio(loop_scope="session"), append=False)


# How far a measured time may pass its limit: the runner and the checker sample every 50 ms at most.
SAMPLE_SLACK_S = 0.1
# How far a program's CPU time may pass time_s before it is stopped on a busy host: the runner or the checker that
# stops it may itself wait for a CPU while the program runs on another core. A limit that does not hold overshoots
# by seconds (these programs burn 5 s).
KILL_LATENCY_S = 0.5


def overloaded(run: CaseResult | ExecResult, limits: Limits) -> bool:
    """True for a run the wall-clock ceiling ended because the host kept it from a CPU; its numbers must show
    it: within its CPU time, and waiting at least what the ceiling leaves past ``time_s + IDLE_GRACE_S``."""
    if run.status is not Status.SANDBOX_ERROR:
        return False
    assert run.detail is not None and run.detail.startswith("no verdict: the host kept the program waiting"), run
    assert run.cpu_s < limits.time_s + SAMPLE_SLACK_S, run
    assert run.time_s >= limits.wall_ceiling_s, run
    assert run.cpu_wait_s >= limits.wall_ceiling_s - limits.time_s - IDLE_GRACE_S - SAMPLE_SLACK_S, run
    return True
