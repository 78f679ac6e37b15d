"""The trainers' own code paths against a live reward server.

These tests run in the frameworks' virtual environment (tests/integrations/requirements*.txt; .ci/run makes it),
not the project's: ``pytest tests/integrations`` there. The server runs as users start it, ``python -m
reward_server``, with the interpreter in ``RLVR_SERVER_PYTHON`` (one that has the server installed). The main
suite does not collect this folder (``norecursedirs`` in pyproject.toml).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.reward_server.test_live_server import free_port, start_server, wait_ready

SERVER_PYTHON = os.environ.get("RLVR_SERVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def live_server() -> Iterator[str]:
    """A server on a free port; ``RLVR_SERVER_URL`` points at it for the adapters."""
    port = free_port()
    proc = start_server(port, {"RLVR_MATH_WORKERS": "1"}, python=SERVER_PYTHON)
    url = f"http://127.0.0.1:{port}"
    old = os.environ.get("RLVR_SERVER_URL")
    try:
        wait_ready(url, proc, timeout_s=180.0)
        os.environ["RLVR_SERVER_URL"] = url
        yield url
    finally:
        if old is None:
            os.environ.pop("RLVR_SERVER_URL", None)
        else:
            os.environ["RLVR_SERVER_URL"] = old
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def requests_to(url: str, route: str) -> int:
    """How many requests to ``route`` the server has answered with 200 (its ``/metrics``)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for line in text.splitlines():
        labels = re.match(r"rlvr_requests_total\{(.*)\} (\S+)$", line)
        if labels and 'code="200"' in labels.group(1) and f'route="{route}"' in labels.group(1):
            return int(float(labels.group(2)))
    return 0
