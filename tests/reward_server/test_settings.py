"""Settings come from RLVR_* variables and fail fast with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from reward_server.settings import Settings


def test_env_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLVR_MATH_WORKERS", "3")
    monkeypatch.setenv("RLVR_MATH_TIMEOUT_S", "1.5")
    monkeypatch.setenv("RLVR_PORT", "9001")
    s = Settings()
    assert (s.math_workers, s.math_timeout_s, s.port, s.host) == (3, 1.5, 9001, "127.0.0.1")


@pytest.mark.parametrize(
    ("var", "value", "field"),
    [
        ("RLVR_MATH_WORKERS", "0", "math_workers"),
        ("RLVR_PORT", "70000", "port"),
        ("RLVR_MATH_TIMEOUT_S", "-1", "math_timeout_s"),
        ("RLVR_LOG_LEVEL", "loud", "log_level"),
    ],
)
def test_bad_values_fail_fast(monkeypatch: pytest.MonkeyPatch, var: str, value: str, field: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ValidationError) as exc:
        Settings()
    assert field in str(exc.value)


def test_timeout_above_its_cap_is_rejected() -> None:
    with pytest.raises(ValidationError, match="RLVR_MATH_MAX_TIMEOUT_S"):
        Settings(math_timeout_s=60, math_max_timeout_s=30)


@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        ("RLVR_API_KEYS", "short", "an API key in RLVR_API_KEYS has 5 characters; at least 16"),
        ("RLVR_MAX_QUEUED_ITEMS", "10", "max_queued_items (10) must be at least max_batch_items (4096)"),
        ("RLVR_PORT", "abc", "RLVR_PORT: Input should be a valid integer"),
    ],
)
def test_a_bad_setting_stops_the_server_with_one_line(var: str, value: str, says: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
    run = subprocess.run(
        [sys.executable, "-m", "reward_server"], env={**env, var: value}, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: bad setting: ") and says in run.stderr
    assert "Traceback" not in run.stderr and "pydantic" not in run.stderr
