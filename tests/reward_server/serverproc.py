"""A real server process for the fault-injection tests: ``python -m reward_server`` on a free 127.0.0.1 port,
its log in a file (a pipe nobody reads would fill and stall it), and the processes it started."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import REPO_ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads'), from /proc."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        with contextlib.suppress(OSError):
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return found


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


class ServerProcess:
    """Start the server with ``env`` (``RLVR_*``) and wait for /readyz; ``stop()`` ends it."""

    def __init__(self, log_path: Path, env: dict[str, str] | None = None, ready_timeout_s: float = 120.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        full_env = {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "RLVR_MATH_WORKERS": "2",
            "RLVR_PRELOAD_LANGUAGE_MODELS": "false",
            **(env or {}),
        }
        full_env.pop("RLVR_API_KEY", None)
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reward_server", "--host", "127.0.0.1", "--port", str(self.port)],
            env=full_env,
            cwd=REPO_ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + ready_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"{self.url} not ready within {ready_timeout_s} s: {self.log()[-3000:]}")
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def math_workers(self) -> list[int]:
        """The math pool's worker processes: the children of the multiprocessing forkserver."""
        servers = [p for p in children(self.proc.pid) if "forkserver" in cmdline(p)]
        return [w for s in servers for w in children(s)]

    def sandboxes(self) -> list[int]:
        """The bubblewrap processes of the local sandbox backend."""
        return [p for p in children(self.proc.pid) if cmdline(p).split(" ")[0].endswith("bwrap")]

    def metric(self, name: str) -> float:
        for line in httpx.get(f"{self.url}/metrics", timeout=10).text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.split()[-1])
        raise KeyError(name)

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
