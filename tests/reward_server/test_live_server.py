"""The server as users start it: ``python -m reward_server`` in a subprocess, on a free 127.0.0.1 port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import CHILD_PYTHONPATH, REPO_ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, extra_env: dict[str, str] | None = None, python: str = sys.executable) -> subprocess.Popen:
    env = {**os.environ, "RLVR_MATH_WORKERS": "2", "PYTHONPATH": CHILD_PYTHONPATH, **(extra_env or {})}
    return subprocess.Popen(
        [python, "-m", "reward_server", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.stdout.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready within {timeout_s} s")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM (the server drains), then SIGKILL if it is still there after 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def live_server() -> Iterator[str]:
    port = free_port()
    proc = start_server(port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield url
    finally:
        stop_server(proc)


def test_live_batch(live_server: str) -> None:
    items = [
        {"id": "a", "response": "<think>2+2</think> The answer is $\\boxed{4}$.", "ground_truth": "4"},
        {"id": "b", "response": "The answer is 5.", "ground_truth": "#### 4"},
        # Cancels to 4, which only ten-billion-digit arithmetic could show: a real hang (a bare tower now gets a
        # verdict by magnitude at once).
        {"id": "c", "response": "\\boxed{10^{10^{10}} - 10^{10^{10}} + 4}", "ground_truth": "4"},
    ]
    r = httpx.post(f"{live_server}/v1/rewards", json={"items": items}, timeout=30)
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["id"] for x in results] == ["a", "b", "c"]
    assert [x["reward"] for x in results] == [1.0, 0.0, None]
    assert results[2]["status"] == "timeout"
    # The server is still healthy after the hang.
    assert httpx.get(f"{live_server}/healthz").json()["status"] == "ok"
    r = httpx.post(f"{live_server}/v1/math/verify", json={"response": "\\boxed{4}", "ground_truth": "4"})
    assert r.json()["correct"] is True


def test_score_cli_offline_and_remote(live_server: str, tmp_path: Path) -> None:
    src = tmp_path / "items.jsonl"
    rows = [
        {"response": "\\boxed{7}", "ground_truth": "7"},
        {"id": "x", "response": "\\boxed{8}", "ground_truth": "7"},
    ]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    env = {**os.environ, "RLVR_MATH_WORKERS": "1", "PYTHONPATH": CHILD_PYTHONPATH}
    outputs = []
    for extra in ([], ["--url", live_server]):
        out = tmp_path / f"out{len(outputs)}.jsonl"
        subprocess.run(
            [sys.executable, "-m", "reward_server", "score", str(src), "-o", str(out), *extra],
            env=env,
            cwd=REPO_ROOT,
            check=True,
            timeout=120,
            capture_output=True,
        )
        outputs.append([json.loads(line) for line in out.read_text().splitlines()])
    for results in outputs:
        assert [(r["id"], r["reward"]) for r in results] == [("1", 1.0), ("x", 0.0)]


def test_score_cli_rejects_bad_input(tmp_path: Path) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text('{"response": "1"}\nnot json\n')
    proc = subprocess.run(
        [sys.executable, "-m", "reward_server", "score", str(src)],
        env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "not JSON" in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr


def test_abandoned_requests_leave_the_queue(tmp_path: Path) -> None:
    """A client that gives up (timeout, retry) must not leave its queued items to delay the next request."""
    port = free_port()
    proc = start_server(port, {"RLVR_MATH_TIMEOUT_S": "2", "RLVR_PRELOAD_LANGUAGE_MODELS": "false"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        stuck = "\\boxed{10^{10^{10}} - 10^{10^{10}} + 1}"  # cancels to 1: only exact arithmetic could tell
        hang = [{"id": str(i), "response": stuck, "ground_truth": "1"} for i in range(12)]
        # 12 items of 2 s each on 2 workers would hold the pool for 12 s.
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/rewards", json={"items": hang}, timeout=1.0)
        start = time.monotonic()
        r = httpx.post(f"{url}/v1/math/verify", json={"response": "\\boxed{1}", "ground_truth": "1"}, timeout=30)
        assert r.json()["correct"] is True
        # At most the two items already running (2 s each) are waited for.
        assert time.monotonic() - start < 5.0
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.parametrize(
    ("lines", "extra", "message"),
    [
        (['{"response": "1", "ground_truth": "1"}', '{"response": 5}'], [], "bad.jsonl:2: response"),
        (['{"id": "a", "response": "1", "ground_truth": "1"}'] * 2, [], "bad.jsonl:2: duplicate id"),
        (['{"response": "1", "ground_truth": "1"}'], ["--url", "http://127.0.0.1:9"], "cannot reach"),
        # No model configured: said before anything starts, with what to set.
        (
            ['{"response": "1", "ground_truth": "1"}', '{"response": "1", "components": {"reward_model": 1}}'],
            [],
            "bad.jsonl:2: the reward_model component is unavailable: this server has no reward model: start it "
            "with RLVR_REWARD_MODEL_PATH=",
        ),
    ],
)
def test_score_cli_errors_name_the_line(tmp_path: Path, lines: list[str], extra: list[str], message: str) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "reward_server", "score", str(src), "-o", str(out), *extra],
        env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, "RLVR_MATH_WORKERS": "1"},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert message in " ".join(proc.stderr.split())
    # Its own line, not written after the progress bar's text ("scoring: 0%| | 0/1 [...]error: cannot reach").
    assert any(line.startswith("error: ") for line in proc.stderr.splitlines()), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not list(tmp_path.glob(".*partial"))
