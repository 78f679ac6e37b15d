"""The reward server for a benchmark: ``python -m reward_server`` on 127.0.0.1, started here and ready."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@asynccontextmanager
async def server_process(
    env: Mapping[str, str] | None = None,
    ready_timeout_s: float = 120.0,
    repo: Path = REPO,
    stop_timeout_s: float = 60.0,
) -> AsyncIterator[tuple[subprocess.Popen[bytes], str]]:
    """Start the server of the checkout ``repo`` with ``env`` (``RLVR_*`` settings) added to ours; yield
    ``(process, base_url)`` once /readyz is 200. The process is stopped (SIGTERM, then SIGKILL) on exit
    unless it has exited already.

    Raises:
        RuntimeError: the server was not ready within ``ready_timeout_s``.
    """
    port = free_port()
    full_env = {**os.environ, "PYTHONPATH": str(repo), "RLVR_LOG_LEVEL": "warning", **(env or {})}
    command = [sys.executable, "-m", "reward_server", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(command, env=full_env, cwd=repo)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:
            for _ in range(int(ready_timeout_s / 0.2)):
                if proc.poll() is not None:
                    raise RuntimeError(f"the server exited with {proc.returncode}")
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)
            else:
                raise RuntimeError("the server did not become ready")
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@asynccontextmanager
async def local_server(
    env: Mapping[str, str] | None = None, ready_timeout_s: float = 120.0
) -> AsyncIterator[httpx.AsyncClient]:
    """Start the server with ``env`` (``RLVR_*`` settings) added to ours; yield a client once /readyz is 200.

    Raises:
        RuntimeError: the server was not ready within ``ready_timeout_s``.
    """
    async with (
        server_process(env, ready_timeout_s) as (_, url),
        httpx.AsyncClient(base_url=url, timeout=600) as client,
    ):
        yield client
