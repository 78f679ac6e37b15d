"""The instance id: made at start, echoed by ``/healthz``, written to ``RLVR_INSTANCE_FILE``, and compared by the
image's healthcheck (``docker/server/healthcheck.py``), so that a healthcheck that reached another process on the
same port fails. No Docker: the script runs here against a stand-in server, and against ``python -m
reward_server``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from fastapi.testclient import TestClient

from reward_server.app import create_app
from reward_server.instance import INSTANCE_ID_ENV, start_instance
from reward_server.settings import Settings
from tests.conftest import REPO_ROOT
from tests.reward_server.test_live_server import free_port, start_server, stop_server, wait_ready

HEALTHCHECK = REPO_ROOT / "docker" / "server" / "healthcheck.py"


def _settings() -> Settings:
    return Settings(math_workers=1, sandbox_pool_size=1, preload_language_models=False)


def test_healthz_echoes_the_id_the_start_made(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(INSTANCE_ID_ENV, "restored-after-the-test")  # start_instance sets it
    path = tmp_path / "instance"
    made = start_instance(str(path))
    assert len(made) == 16 and int(made, 16) >= 0
    assert path.read_text() == made + "\n"
    assert os.environ[INSTANCE_ID_ENV] == made  # what the worker processes read
    client = TestClient(create_app(_settings()))  # no lifespan: /healthz answers all the same
    assert client.get("/healthz").json() == {"status": "ok", "instance": made}
    again = start_instance(str(path))  # a restart: a new id, the file replaced
    assert again != made and path.read_text() == again + "\n"
    monkeypatch.delenv(INSTANCE_ID_ENV)
    first, second = (TestClient(create_app(_settings())).get("/healthz").json()["instance"] for _ in range(2))
    assert first != second  # an app built without a start makes its own


class StandIn(BaseHTTPRequestHandler):
    """Answers ``GET /healthz`` with the class's ``answer``."""

    answer: ClassVar[dict[str, str]] = {}

    def do_GET(self) -> None:
        body = json.dumps(self.answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[tuple[int, type[StandIn]]]:
    handler = type("Handler", (StandIn,), {"answer": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()


def _healthcheck(port: int, instance_file: Path | None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", ""), "RLVR_HOST": "0.0.0.0", "RLVR_PORT": str(port)}
    if instance_file is not None:
        env["RLVR_INSTANCE_FILE"] = str(instance_file)
    return subprocess.run(
        [sys.executable, "-I", str(HEALTHCHECK)], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def test_the_healthcheck_passes_only_for_its_own_instance(stand_in: tuple[int, type[StandIn]], tmp_path: Path) -> None:
    port, handler = stand_in
    mine = tmp_path / "instance"
    mine.write_text("0123456789abcdef\n")
    handler.answer = {"status": "ok", "instance": "0123456789abcdef"}
    assert _healthcheck(port, mine).returncode == 0
    # Another server holds the port: it is healthy, but not this container's.
    handler.answer = {"status": "ok", "instance": "fedcba9876543210"}
    other = _healthcheck(port, mine)
    assert other.returncode == 1
    assert "instance 'fedcba9876543210', not this server's '0123456789abcdef'" in other.stderr
    assert f"another process holds port {port}" in other.stderr and "RLVR_PORT" in other.stderr
    # An older server that echoes no id, and a server of ours that has not started yet (no file).
    handler.answer = {"status": "ok"}
    assert _healthcheck(port, mine).returncode == 1
    handler.answer = {"status": "ok", "instance": "0123456789abcdef"}
    missing = _healthcheck(port, tmp_path / "not-yet")
    assert missing.returncode == 1 and "not-yet" in missing.stderr
    # Without RLVR_INSTANCE_FILE the check is the plain one: any 200.
    handler.answer = {"status": "ok"}
    assert _healthcheck(port, None).returncode == 0


def test_a_started_server_writes_its_id_and_its_healthcheck_passes(tmp_path: Path) -> None:
    port = free_port()
    instance_file = tmp_path / "instance"
    proc = start_server(port, {"RLVR_INSTANCE_FILE": str(instance_file), "RLVR_MATH_WORKERS": "1"})
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc)
        written = instance_file.read_text().strip()
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").json() == {"status": "ok", "instance": written}
        assert _healthcheck(port, instance_file).returncode == 0
    finally:
        stop_server(proc)
