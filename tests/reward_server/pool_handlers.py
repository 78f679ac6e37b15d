"""Task handlers for the worker-pool tests (imported by worker processes)."""

from __future__ import annotations

import os
import time

_calls = 0


def init_worker(tag: str = "") -> None:
    global _calls
    _calls = 0


def handle(payload: dict) -> dict:
    """Act on ``payload["op"]``: echo, sleep, die (exit the process), raise, or count calls."""
    global _calls
    _calls += 1
    op = payload["op"]
    if op == "echo":
        return {"value": payload["value"], "pid": os.getpid()}
    if op == "sleep":
        time.sleep(payload["seconds"])
        return {"slept": payload["seconds"], "pid": os.getpid()}
    if op == "spin":
        # A C-level loop that ignores signals until it finishes: only a kill stops it early.
        deadline = time.monotonic() + payload["seconds"]
        while time.monotonic() < deadline:
            sum(range(10_000))
        return {"pid": os.getpid()}
    if op == "big":
        # A result far larger than a pipe buffer (64 KiB).
        return {"echo_len": len(payload.get("blob", "")), "blob": "x" * payload["size"], "pid": os.getpid()}
    if op == "die":
        os._exit(3)
    if op == "raise":
        raise ValueError("handler bug")
    if op == "calls":
        return {"calls": _calls, "pid": os.getpid()}
    raise AssertionError(op)
