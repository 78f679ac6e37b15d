"""SIGTERM while the server starts: it stops without waiting for the language-model preload (issue 24: 16.9 s)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.reward_server.serverproc import free_port

pytestmark = pytest.mark.slow

LOADING = "loading the language models"


def test_sigterm_during_the_preload_does_not_wait_for_it(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "RLVR_MATH_WORKERS": "1",
        "RLVR_SANDBOX_POOL_SIZE": "1",
        "RLVR_PRELOAD_LANGUAGE_MODELS": "true",
    }
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reward_server", "--host", "127.0.0.1", "--port", str(free_port())],
            env=env,
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 120
            while LOADING not in log_path.read_text(errors="replace"):
                assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, "the preload never started"
                time.sleep(0.02)
            proc.terminate()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log_path.read_text(errors="replace")
    # It stopped between two languages, and the rest of the load never ran.
    assert "language-model preload abandoned" in text, text[-3000:]
    assert "language models loaded" not in text, text[-3000:]
    assert proc.returncode in (0, -15), text[-3000:]
