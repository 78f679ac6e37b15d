"""The worker-process side of the pool: load the handler, run each item of a job under a soft deadline in the
item's own time, and send the results back in bulk.

A worker is started by :mod:`.supervisor` (from a forkserver) with :func:`_worker_main` as its target and
talks to its driver thread over a socket pair and a small control block (below). The soft deadline is an
interval timer on the worker's CPU time (``ITIMER_PROF``) or wall time (``ITIMER_REAL``); when it fires
inside the handler, the item is ``timeout`` and the worker leaves after answering, since its state can no
longer be trusted (see :mod:`reward_server.engine.pool`).
"""

from __future__ import annotations

import importlib
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

# Each worker's control block, shared memory of doubles: the job it is on, the item's index in that job
# (-1 when idle), the wall time (time.monotonic) it started that item, and a job id the driver asks it to
# stop after its current item. The worker writes STARTED, then INDEX, then JOB, so a reader that sees JOB
# sees the item that goes with it, or a later one (it never underestimates the item's start).
_JOB, _INDEX, _STARTED, _STOP = range(4)
# How often a worker sends back what it has finished of a long job.
_FLUSH_S = 0.02

#: The clock of the soft deadline in this worker: ``"cpu"`` (the process's CPU time, ``ITIMER_PROF``) or
#: ``"wall"`` (``ITIMER_REAL``), set by :func:`_worker_main`.
_soft_clock = "cpu"
#: Set when the current item's soft deadline fired (see the module docstring: then the item is ``timeout``
#: and this worker leaves after answering).
_deadline_fired = False


class _ItemDeadline(BaseException):
    """Raised by SIGPROF inside a worker when an item has used its CPU time. A BaseException, so no
    ``except Exception`` in sympy or math-verify swallows it and turns a timeout into a wrong answer."""


# The CPU time (time.process_time) at which the current item's soft deadline falls.
_cpu_deadline = 0.0


def _clock() -> float:
    return time.process_time() if _soft_clock == "cpu" else time.monotonic()


def _timer() -> int:
    return signal.ITIMER_PROF if _soft_clock == "cpu" else signal.ITIMER_REAL


def _on_cpu_deadline(signum: int, frame: Any) -> None:
    global _deadline_fired
    # ITIMER_PROF is sampled on clock ticks, off by 10% and more on a busy machine: check the exact clock
    # and wait out what is left, so an item never gets less than its time.
    left = _cpu_deadline - _clock()
    if left > 0:
        signal.setitimer(_timer(), max(left, 1e-4))
        return
    _deadline_fired = True
    raise _ItemDeadline


def _run_item(handler: Callable[[Any], Any], payload: Any, timeout_s: float) -> tuple[str, Any, float]:
    """``(status, value or detail, cpu_s)`` of one item, under a soft deadline of ``timeout_s`` seconds of the
    worker's soft clock. After it, :data:`_deadline_fired` says whether the deadline interrupted the handler (the
    worker must then leave)."""
    global _cpu_deadline, _deadline_fired
    missing = value = object()
    error: str | None = None
    raised = False
    cpu0 = time.process_time()
    _cpu_deadline = _clock() + timeout_s
    _deadline_fired = False
    try:
        try:
            signal.setitimer(_timer(), max(0.0, timeout_s))
            value = handler(payload)
        finally:
            signal.setitimer(_timer(), 0)
    except _ItemDeadline:
        raised = True
    except BaseException as exc:  # a handler bug costs one item, not the worker
        error = f"{type(exc).__name__}: {exc}"[:500]
    cpu_s = time.process_time() - cpu0
    if _deadline_fired and raised and value is not missing:
        _deadline_fired = False  # it landed after the handler returned, before the disarm: the value counts
    if _deadline_fired:  # interrupted, or swallowed and then a value (or an error) of the handler's own making
        return "timeout", f"no verdict within {timeout_s:g} s", cpu_s
    if error is not None:
        return "error", error, cpu_s
    return "ok", value, cpu_s


def _worker_main(
    conn: Connection, control: Any, handler_path: str, init_kwargs: dict[str, Any], soft_clock: str = "cpu"
) -> None:
    """Entry point of a worker process: load the handler, then run jobs until the socket closes.

    A job is ``(job_id, [(payload, timeout_s), ...])``. The worker answers ``("part", job_id, results)``
    every ``_FLUSH_S`` of a long job and ``("done", job_id, results)`` when it leaves the job, each result
    ``(index, status, value, cpu_s)``. It leaves a job early when the driver asks it to (``_STOP``); the
    driver requeues what has no result. After an item whose soft deadline interrupted the handler it answers
    ``("retired", job_id, results)`` instead, and exits: its state may be corrupt (module docstring).
    """
    global _soft_clock
    _soft_clock = soft_clock
    # The parent owns shutdown; a Ctrl-C in the terminal must not kill workers mid-item with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    module_name, _, attr = handler_path.partition(":")
    module = importlib.import_module(module_name)
    init = getattr(module, "init_worker", None)
    if init is not None:
        init(**init_kwargs)
    handler: Callable[[Any], Any] = getattr(module, attr)
    signal.signal(signal.SIGPROF if soft_clock == "cpu" else signal.SIGALRM, _on_cpu_deadline)
    control[_INDEX] = -1
    try:
        conn.send(("ready", os.getpid()))
        while True:
            job_id, items = conn.recv()
            results: list[tuple[int, str, Any, float]] = []
            flushed = time.monotonic()
            try:
                for i, (payload, timeout_s) in enumerate(items):
                    if control[_STOP] == job_id:
                        break
                    control[_STARTED] = time.monotonic()
                    control[_INDEX] = i
                    control[_JOB] = job_id
                    results.append((i, *_run_item(handler, payload, timeout_s)))
                    if _deadline_fired:
                        break
                    now = time.monotonic()
                    if now - flushed >= _FLUSH_S and i + 1 < len(items):
                        conn.send(("part", job_id, results))
                        results, flushed = [], now
            except _ItemDeadline:  # a signal that landed between items, after its timer was disarmed
                pass
            control[_INDEX] = -1
            if _deadline_fired:
                conn.send(("retired", job_id, results))
                return
            conn.send(("done", job_id, results))
    except (EOFError, OSError):  # the server closed the socket: this worker is done
        return
