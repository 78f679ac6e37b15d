"""Task handlers for the worker-pool tests (imported by worker processes)."""

from __future__ import annotations

import os
import signal
import time

_calls = 0


def init_worker(tag: str = "") -> None:
    global _calls
    _calls = 0


def handle(payload: dict) -> dict:
    """Act on ``payload["op"]``: echo, sleep, spin, swallow (the deadline), hang, cpu, big, die (exit the process),
    raise, or count calls."""
    global _calls
    _calls += 1
    op = payload["op"]
    if op == "echo":
        time.sleep(payload.get("delay", 0.0))  # an item that takes a while, so that one worker cannot take every job
        return {"value": payload["value"], "pid": os.getpid()}
    if op == "sleep":
        time.sleep(payload["seconds"])
        return {"slept": payload["seconds"], "pid": os.getpid()}
    if op == "spin":
        # Python code spinning for ``seconds``: the soft (CPU-time) deadline interrupts it.
        deadline = time.monotonic() + payload["seconds"]
        while time.monotonic() < deadline:
            sum(range(10_000))
        return {"pid": os.getpid()}
    if op == "hang":
        # Stuck where no signal gets through (as in C code): only a kill stops it early.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
        try:
            deadline = time.monotonic() + payload["seconds"]
            while time.monotonic() < deadline:
                sum(range(10_000))
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGPROF})
        return {"pid": os.getpid()}
    if op == "cpu":
        # Burns ``seconds`` of CPU time (not wall time): slower on a busy machine, never shorter.
        end = time.process_time() + payload["seconds"]
        while time.process_time() < end:
            sum(range(1_000))
        return {"cpu_s": payload["seconds"], "pid": os.getpid(), "nice": os.getpriority(os.PRIO_PROCESS, 0)}
    if op == "big":
        # A result far larger than a pipe buffer (64 KiB).
        return {"echo_len": len(payload.get("blob", "")), "blob": "x" * payload["size"], "pid": os.getpid()}
    if op == "swallow":
        # What sympy's and antlr's bare ``except:`` clauses do to the soft deadline: catch it and go on to a
        # result of their own ("not equal"), leaving whatever they were building half done.
        deadline = time.monotonic() + payload["seconds"]
        while time.monotonic() < deadline:
            try:
                sum(range(10_000))
            except:  # noqa: E722
                return {"verdict": "swallowed", "pid": os.getpid()}
        return {"verdict": "finished", "pid": os.getpid()}
    if op == "die":
        os._exit(3)
    if op == "raise":
        raise ValueError("handler bug")
    if op == "calls":
        return {"calls": _calls, "pid": os.getpid()}
    raise AssertionError(op)
