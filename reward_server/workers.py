"""A process pool for hang-prone, CPU-heavy scoring: one hand-off per group, deadlines in each item's own
time, and a fair share of the workers for every request.

Why not ``concurrent.futures.ProcessPoolExecutor``: it cannot cancel a running task, so one hung sympy call
holds a worker forever, and one crashed worker breaks the whole executor. Here every worker is a separate
process with its own socket pair, driven by its own thread in the server process, so that

* **nothing blocks the event loop.** Spawning a worker, handing it work and reading its results happen in
  that thread; the loop only queues jobs and receives one callback per finished job (a group of items, not
  an item). A stopped (``SIGSTOP``) worker or forkserver holds up its own thread and nothing else.
* **a deadline is the item's own time.** The worker arms a soft deadline per item on its *CPU time*
  (``ITIMER_PROF``; on wall time with ``soft_clock="wall"``, for handlers that run many threads or wait on a
  GPU): a slow sympy call becomes ``timeout``. The deadline arrives as an exception at whatever line the
  handler is on: inside an import, a cache update or a bare ``except:`` of sympy, antlr or mpmath (which
  swallows it, after which the handler goes on to a result of its own). Either way the process's state can
  no longer be trusted (a half-imported mpmath, a cached "no parse" served to every later item in
  microseconds as a wrong answer), so the item is ``timeout`` and the worker answers for what it finished
  and leaves; a fresh one from the forkserver takes its place. The hard deadline
  (``timeout_s + grace_s``) is kept by the driver thread from the worker's own clock: the wall time since
  the worker started the item, less the time it waited for a CPU (``/proc/PID/schedstat``). Only then is the
  worker killed and replaced. A late event loop, a loaded machine or a busy neighbour never turns a verdict
  into ``timeout``, and results a worker sent are never discarded for lateness.
* **a job is a group.** :meth:`WorkerPool.run` hands over many payloads at once (a group's completions,
  which share a reference the worker parses once); the worker sends results back in bulk, flushing every
  few milliseconds so that a worker killed mid-job loses little. When a worker dies or is killed, the item
  it was on gets ``crashed`` or ``timeout`` and the job's other unfinished items go back to the queue.
* **requests share the workers fairly.** Each request opens a :class:`Flow`; a free worker takes the next
  job of the flow that has had the least worker time (start-time fair queueing: a new flow starts level
  with the others, it gets no credit for the time before it came). A worker whose item has run longer than
  ``slow_item_s`` is *slow*: it is told to stop after that item (the rest of its job goes back to the
  queue), and an extra worker takes its place meanwhile, up to ``max_extra_workers``; the slow worker
  leaves when its item ends. A slow item thus shares the CPU with the others (the kernel time-slices
  them) instead of holding a worker that another request waits for, and its deadline, in its own time,
  does not shrink for the sharing. An item whose request has ended is not worth that CPU: once it has run
  a quarter of a second, its worker is killed.
* **a pool that cannot start says so.** A worker that dies before it is ready is started again with
  exponential backoff; :attr:`WorkerPool.health` turns false while no worker can start, so ``/healthz``
  fails and an orchestrator restarts the process.

Workers come from a ``forkserver`` that pre-imports the handler's module (and ``preload``), so a
replacement is ready in milliseconds instead of re-importing sympy.

Every public method is called from one asyncio event loop (the server's); the driver threads talk to it
with ``call_soon_threadsafe`` and share state under one lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import importlib
import itertools
import logging
import multiprocessing as mp
import os
import signal
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Literal

logger = logging.getLogger(__name__)

# Each worker's control block, shared memory of doubles: the job it is on, the item's index in that job
# (-1 when idle), the wall time (time.monotonic) it started that item, and a job id the driver asks it to
# stop after its current item. The worker writes STARTED, then INDEX, then JOB, so a reader that sees JOB
# sees the item that goes with it, or a later one (it never underestimates the item's start).
_JOB, _INDEX, _STARTED, _STOP = range(4)
# How often a worker sends back what it has finished of a long job.
_FLUSH_S = 0.02
# How often a driver thread looks at its busy worker's clock, and checks that an idle one is still there.
_WATCH_S = 0.05
_IDLE_CHECK_S = 0.5
# An item nobody waits for any more (its request ended) may finish if it is quick; past this much of its
# own time its worker is killed instead, so that it does not hold a CPU that others wait for.
_ABANDONED_S = 0.25
# Back-off between attempts to start a worker that died before it was ready.
_BACKOFF_FIRST_S = 0.5
_BACKOFF_MAX_S = 30.0
# Failed starts in a row, with no worker up, after which the pool is unhealthy (it keeps trying).
_FAILED_STARTS = 5
# How often a job may go back to the queue because its worker died before taking it up.
_MAX_HANDOFFS = 3
# How long throughput is averaged over, for :attr:`WorkerPool.items_per_s`.
_RATE_WINDOW_S = 10.0


class TaskStatus(enum.StrEnum):
    """How an item ended, from the pool's point of view (not the verdict)."""

    OK = "ok"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """One item's outcome.

    ``value`` is the handler's return value when ``status`` is ``ok``; ``detail`` explains the others.
    ``run_s`` is the CPU time the item used on its worker (queueing and waiting for a CPU excluded).
    """

    status: TaskStatus
    value: Any = None
    detail: str | None = None
    run_s: float = 0.0


# ---------------------------------------------------------------------------------------------- worker


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


# ---------------------------------------------------------------------------------------------- server side


def _runqueue_wait_s(pid: int) -> float | None:
    """Seconds process ``pid`` has spent runnable but waiting for a CPU, or ``None`` if unknown (no
    ``/proc/PID/schedstat``); a stopped or sleeping process does not wait for a CPU."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _set_socket_timeouts(conn: Connection, seconds: float) -> None:
    """Bound every blocking read and write on ``conn`` (a socket pair end) to ``seconds`` without progress,
    so a stopped worker can hold a driver thread only that long."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    finally:
        sock.close()


class Flow:
    """One request's share of the pool. Open it with :meth:`WorkerPool.open_flow`, pass it to
    :meth:`WorkerPool.run`, and :meth:`WorkerPool.close_flow` it when the request ends (which cancels what
    is left)."""

    def __init__(self, seq: int, service_s: float) -> None:
        self.seq = seq
        # Worker seconds its finished pieces used; the scheduler adds the time of those still running.
        self.service_s = service_s
        self.pending: deque[_Piece] = deque()
        self.running: set[_Piece] = set()
        self.jobs: set[_Job] = set()
        self.closed = False


@dataclass(eq=False)
class _Job:
    """What :meth:`WorkerPool.run` waits for: an outcome per payload."""

    flow: Flow
    payloads: Sequence[Any]
    timeouts_s: Sequence[float]
    future: asyncio.Future[list[TaskOutcome]]
    outcomes: list[TaskOutcome | None]
    remaining: int


@dataclass(eq=False)
class _Piece:
    """The part of a job that one worker takes at once: the job's unfinished indices."""

    job: _Job
    indices: list[int]
    handoffs: int = 0
    started_at: float = 0.0
    job_id: float = 0.0
    slot: _Slot | None = None


@dataclass(eq=False)
class _Slot:
    """A worker process and the thread that drives it."""

    number: int
    process: Any = None
    conn: Connection | None = None
    control: Any = None
    pid: int = 0
    ready: bool = False
    slow: bool = False
    piece: _Piece | None = None
    thread: threading.Thread | None = field(default=None, repr=False)


class WorkerPool:
    """Worker processes that run ``handler(payload)`` for each payload of a job, under per-item deadlines.

    Args:
        handler: ``"package.module:function"``; the function takes one picklable payload and returns a
            picklable result. If the module defines ``init_worker(**init_kwargs)``, each worker calls it once.
        num_workers: worker processes to keep serving.
        name: label for logs and metrics.
        init_kwargs: keyword arguments for the module's ``init_worker``.
        on_restart: called with a reason (``"timeout"``, ``"crash"``, ``"unresponsive"``, ``"cancelled"``)
            each time a worker is killed or dies and another takes its place; called from a pool thread.
        grace_s: extra seconds of the item's own time past its ``timeout_s`` before its worker is killed.
        preload: more modules for the forkserver to import once (what the handler imports lazily).
        slow_item_s: an item that has run this long (its own time) makes its worker *slow* (see the module
            docstring); ``None`` turns that off.
        max_extra_workers: most workers started in place of slow ones at once (default ``num_workers``).
        soft_clock: what the in-worker soft deadline counts: the worker's CPU time (``"cpu"``: a loaded machine
            does not shorten an item's time), or wall time (``"wall"``: for a handler that runs many threads,
            whose CPU time grows faster than the clock, or that waits on a GPU).
        handoff_timeout_s: how long (its own time) a worker may take to accept a job or a write before it
            is deemed stopped, killed, and the job handed to another.
        unhealthy_after_s: with no worker serving for this long, :attr:`health` says so.

    Call :meth:`start` before :meth:`run`, and :meth:`close` at shutdown.
    """

    def __init__(
        self,
        handler: str,
        num_workers: int,
        *,
        name: str = "pool",
        init_kwargs: dict[str, Any] | None = None,
        on_restart: Callable[[str], None] | None = None,
        grace_s: float = 0.25,
        preload: Sequence[str] = (),
        slow_item_s: float | None = 1.0,
        max_extra_workers: int | None = None,
        handoff_timeout_s: float = 2.0,
        soft_clock: Literal["cpu", "wall"] = "cpu",
        unhealthy_after_s: float = 60.0,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.handler = handler
        self.num_workers = num_workers
        self.name = name
        self.grace_s = grace_s
        self.slow_item_s = slow_item_s
        self.soft_clock = soft_clock
        self.max_extra_workers = num_workers if max_extra_workers is None else max_extra_workers
        self.handoff_timeout_s = handoff_timeout_s
        self.unhealthy_after_s = unhealthy_after_s
        self._preload = [handler.partition(":")[0], *preload]
        self._init_kwargs = dict(init_kwargs or {})
        self._on_restart = on_restart
        self._ctx = mp.get_context("forkserver")
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._spawn_lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._numbers = itertools.count()
        self._flows: dict[int, Flow] = {}  # flows with pending pieces, oldest first
        self._flow_seq = itertools.count()
        self._job_ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._started = False
        self._initializing = True  # until every first worker is ready, or one fails to start
        self._ready_count = 0
        self._start_timeout_s = 120.0
        self._all_ready: asyncio.Event | None = None
        self._start_error: str | None = None
        self._start_failures = 0  # consecutive, over all slots, since a worker last became ready
        self._last_start_error: str | None = None
        self._not_serving_since = time.monotonic()
        self._queued = 0
        self._finished: deque[tuple[float, int]] = deque()
        self._finished_count = 0  # the sum of the counts in _finished
        self._created = time.monotonic()
        self.restarts = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self, timeout_s: float = 120.0) -> None:
        """Start the workers and wait until each has loaded its handler.

        Raises:
            TimeoutError: not all workers were ready within ``timeout_s``.
            RuntimeError: a worker died before it was ready (a broken handler module, say).
        """
        self._loop = asyncio.get_running_loop()
        self._all_ready = asyncio.Event()
        self._start_timeout_s = timeout_s
        self._ctx.set_forkserver_preload(self._preload)
        with self._lock:
            for _ in range(self.num_workers):
                self._add_slot()
        try:
            await asyncio.wait_for(self._all_ready.wait(), timeout_s)
        except TimeoutError:
            await self.close()
            raise
        if self._start_error is not None:
            await self.close()
            raise RuntimeError(f"worker pool {self.name!r} cannot start: {self._start_error}")
        self._started = True

    @property
    def ready(self) -> bool:
        """True once every worker has started at least once, until the pool is closed or stops being
        healthy (a restart of one worker does not make it unready: its jobs wait in the queue)."""
        return self._started and self.health[0]

    @property
    def alive(self) -> int:
        """Workers that are up and serving now (slow ones included)."""
        return sum(1 for s in self._slots if s.ready)

    @property
    def health(self) -> tuple[bool, str | None]:
        """``(ok, why not)``: false once the pool is closed, or when no worker has served for
        ``unhealthy_after_s`` or the last five attempts to start one failed. The pool keeps trying with
        back-off meanwhile and turns healthy again as soon as a worker starts."""
        if self._closed:
            return False, "the pool is closed"
        if self.alive > 0:
            return True, None
        down_s = time.monotonic() - self._not_serving_since
        if self._started and (self._start_failures >= _FAILED_STARTS or down_s > self.unhealthy_after_s):
            reason = self._last_start_error or "no worker process is up"
            return False, f"no {self.name} worker is up (for {down_s:.0f} s); the last start failed: {reason}"
        return True, None

    @property
    def queued_items(self) -> int:
        """Items waiting for a worker (not yet started), over every request. Cheap; for admission control."""
        return self._queued

    @property
    def items_per_s(self) -> float:
        """Items finished per second over the last 10 s (or since the pool started, if sooner)."""
        now = time.monotonic()
        with self._lock:
            while self._finished and self._finished[0][0] < now - _RATE_WINDOW_S:
                self._finished_count -= self._finished.popleft()[1]
            count = self._finished_count
        return count / max(1e-3, min(_RATE_WINDOW_S, now - self._created))

    async def close(self) -> None:
        """Stop every worker; items still queued or running end ``cancelled``."""
        with self._work:
            self._closed = True
            flows = list({*self._flows.values(), *(s.piece.job.flow for s in self._slots if s.piece)})
            self._work.notify_all()
        for flow in flows:
            self._cancel_flow(flow, TaskOutcome(TaskStatus.CANCELLED, detail="pool closed"))
        for slot in list(self._slots):
            with contextlib.suppress(Exception):
                if slot.process is not None:
                    slot.process.kill()
        threads = [s.thread for s in self._slots if s.thread is not None]
        await asyncio.to_thread(_join_all, threads, 10.0)

    # ------------------------------------------------------------------ public

    def open_flow(self) -> Flow:
        """A new request's flow, level with the flows already waiting (see the module docstring)."""
        with self._lock:
            now = time.monotonic()
            active = [self._effective_service(f, now) for f in self._flows.values()]
            return Flow(next(self._flow_seq), min(active, default=0.0))

    def close_flow(self, flow: Flow, status: TaskStatus = TaskStatus.CANCELLED, detail: str | None = None) -> None:
        """End a flow: its items not finished yet get ``status`` (with ``detail``) now. An item already on a
        worker may finish if it is quick (its result is dropped); one that runs on past a quarter of a second
        has its worker killed and replaced."""
        flow.closed = True
        self._cancel_flow(flow, TaskOutcome(status, detail=detail or "the request ended"))

    async def run(self, flow: Flow, payloads: Sequence[Any], timeouts_s: Sequence[float]) -> list[TaskOutcome]:
        """Run ``handler(payload)`` for each payload as one job (one hand-off), each under its ``timeout_s``.

        The deadline counts the item's own time on its worker, not queueing. Never raises for an item's
        failure: a hang gives ``timeout``, a dead worker ``crashed``. Outcomes come in payload order.

        Raises:
            RuntimeError: the pool is not running.
            ValueError: ``payloads`` and ``timeouts_s`` differ in length.
        """
        if self._closed or self._loop is None:
            raise RuntimeError(f"worker pool {self.name!r} is not running")
        if len(payloads) != len(timeouts_s):
            raise ValueError(f"{len(payloads)} payloads but {len(timeouts_s)} timeouts")
        if not payloads:
            return []
        healthy, why = self.health
        if not healthy:
            return [TaskOutcome(TaskStatus.CRASHED, detail=f"workers cannot start: {why}")] * len(payloads)
        future: asyncio.Future[list[TaskOutcome]] = self._loop.create_future()
        job = _Job(flow, payloads, timeouts_s, future, [None] * len(payloads), len(payloads))
        with self._work:
            if flow.closed:
                raise RuntimeError("the flow is closed")
            flow.jobs.add(job)
            self._enqueue(_Piece(job, list(range(len(payloads)))))
        try:
            return await future
        except asyncio.CancelledError:
            self._cancel_job(job, TaskOutcome(TaskStatus.CANCELLED, detail="the request was cancelled"))
            raise

    async def submit(self, payload: Any, *, timeout_s: float) -> TaskOutcome:
        """Run one payload in a flow of its own (a single-item request)."""
        flow = self.open_flow()
        try:
            return (await self.run(flow, [payload], [timeout_s]))[0]
        finally:
            self.close_flow(flow)

    # ------------------------------------------------------------------ scheduling (under self._lock)

    def _enqueue(self, piece: _Piece, front: bool = False) -> None:
        flow = piece.job.flow
        if front:
            flow.pending.appendleft(piece)
        else:
            flow.pending.append(piece)
        self._flows.setdefault(flow.seq, flow)
        self._queued += len(piece.indices)
        self._work.notify()

    @staticmethod
    def _effective_service(flow: Flow, now: float) -> float:
        return flow.service_s + sum(now - p.started_at for p in flow.running)

    def _pick(self) -> _Piece | None:
        """The next piece: the oldest of the flow with the least worker time so far."""
        if not self._flows:
            return None
        now = time.monotonic()
        flow = min(self._flows.values(), key=lambda f: (self._effective_service(f, now), f.seq))
        piece = flow.pending.popleft()
        if not flow.pending:
            del self._flows[flow.seq]
        self._queued -= len(piece.indices)
        piece.started_at = now
        flow.running.add(piece)
        return piece

    def _settle(self, piece: _Piece, results: Sequence[tuple[int, TaskOutcome]]) -> None:
        """Record outcomes (``(position in piece, outcome)``); resolve the job when it has them all."""
        job = piece.job
        for pos, outcome in results:
            i = piece.indices[pos]
            if job.outcomes[i] is None:
                job.outcomes[i] = outcome
                job.remaining -= 1
        if results:
            self._finished.append((time.monotonic(), len(results)))
            self._finished_count += len(results)
        if job.remaining == 0:
            self._resolve(job)

    def _resolve(self, job: _Job) -> None:
        job.flow.jobs.discard(job)
        job.remaining = -1  # resolved once
        outcomes = [o for o in job.outcomes if o is not None]
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(_set_result, job.future, outcomes)

    def _cancel_job(self, job: _Job, outcome: TaskOutcome) -> None:
        with self._lock:
            if job.remaining <= 0:
                return
            flow = job.flow
            kept = deque(p for p in flow.pending if p.job is not job)
            self._queued -= sum(len(p.indices) for p in flow.pending if p.job is job)
            flow.pending = kept
            if not kept:
                self._flows.pop(flow.seq, None)
            for piece in list(flow.running):
                if piece.job is job and piece.slot is not None and piece.slot.control is not None:
                    piece.slot.control[_STOP] = piece.job_id
            for i, o in enumerate(job.outcomes):
                if o is None:
                    job.outcomes[i] = outcome
            job.remaining = 0
            self._resolve(job)

    def _cancel_flow(self, flow: Flow, outcome: TaskOutcome) -> None:
        with self._lock:
            jobs = list(flow.jobs)
        for job in jobs:
            self._cancel_job(job, outcome)

    def _add_slot(self) -> _Slot:
        slot = _Slot(next(self._numbers))
        self._slots.append(slot)
        slot.thread = threading.Thread(target=self._drive, args=(slot,), name=f"rlvr-{self.name}-{slot.number}")
        slot.thread.daemon = True
        slot.thread.start()
        return slot

    def _surplus(self, slot: _Slot) -> bool:
        """Is this slot one too many (its slow worker has retired and the extra that replaced it serves)?"""
        slow = sum(1 for s in self._slots if s.slow)
        return len(self._slots) > self.num_workers + slow

    # ------------------------------------------------------------------ driver threads

    def _drive(self, slot: _Slot) -> None:
        """A slot's life: start a worker, serve jobs until it dies or retires, start another (with back-off
        after failed starts), until the pool closes or the slot is surplus."""
        failures = 0
        while not self._closed:
            error = self._start_worker(slot)
            if error is None:
                failures = 0
                self._serve(slot)
            elif self._closed:
                break
            else:
                failures += 1
                if self._note_start_failure(error):
                    break
                backoff_s = min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2 ** (failures - 1))
                logger.error("%s worker failed to start (%s); next try in %.1f s", self.name, error, backoff_s)
                with self._work:
                    self._work.wait_for(lambda: self._closed, backoff_s)
            with self._lock:
                if self._closed or self._surplus(slot):
                    break
        with self._lock:
            if slot in self._slots:
                self._slots.remove(slot)

    def _note_start_failure(self, error: str) -> bool:
        """Count a failed start; during :meth:`start` the first one fails the pool (returns True). Once the
        pool is unhealthy, what waits for a worker ends ``crashed`` rather than wait for one to start."""
        with self._lock:
            self._start_failures += 1
            self._last_start_error = error
            initializing, self._initializing = self._initializing, False
            if initializing:
                self._start_error = error
            flows = list(self._flows.values())
        if initializing:
            self._signal_ready()
            return True
        healthy, why = self.health
        if not healthy:
            lost = TaskOutcome(TaskStatus.CRASHED, detail=f"workers cannot start: {why}")
            for flow in flows:
                self._cancel_flow(flow, lost)
        return False

    def _signal_ready(self) -> None:
        loop, event = self._loop, self._all_ready
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    def _start_worker(self, slot: _Slot) -> str | None:
        """Start a worker in ``slot`` and wait until it is ready; the reason it failed, else ``None``."""
        with self._spawn_lock:
            if self._closed:
                return "pool closed"
            parent, child = self._ctx.Pipe(duplex=True)
            control = self._ctx.RawArray("d", 4)
            process = self._ctx.Process(
                target=_worker_main,
                args=(child, control, self.handler, self._init_kwargs, self.soft_clock),
                name=f"rlvr-{self.name}-{slot.number}",
                daemon=True,
            )
            try:
                process.start()
            except Exception as exc:  # the forkserver could not fork (out of memory, say)
                parent.close()
                child.close()
                return f"{type(exc).__name__}: {exc}"
            child.close()
        slot.process, slot.conn, slot.control, slot.slow = process, parent, control, False
        _set_socket_timeouts(parent, self.handoff_timeout_s)
        try:
            arrived = parent.poll(self._start_timeout_s)
            message = parent.recv() if arrived else None
        except (EOFError, OSError):
            message = None
        if not (isinstance(message, tuple) and message[0] == "ready"):
            with contextlib.suppress(Exception):
                process.kill()
            process.join(5)
            parent.close()
            slot.process = slot.conn = None
            if message is None and process.exitcode not in (None, -signal.SIGKILL):
                return f"worker exited with code {process.exitcode} before it was ready"
            return "worker did not get ready in time"
        slot.pid = message[1]
        with self._lock:
            slot.ready = True
            self._start_failures = 0
            all_ready = False
            if self._initializing:
                self._ready_count += 1
                all_ready = self._ready_count == self.num_workers
                self._initializing = not all_ready
        if all_ready:
            self._signal_ready()
        return None

    def _serve(self, slot: _Slot) -> None:
        """Hand ``slot``'s worker one piece after another until it dies, retires or the pool closes."""
        try:
            while True:
                with self._work:
                    self._work.wait_for(lambda: self._closed or bool(self._flows), _IDLE_CHECK_S)
                    if self._closed:
                        return
                    piece = self._pick()
                    if piece is not None:
                        piece.slot = slot
                        piece.job_id = float(next(self._job_ids))
                        slot.piece = piece
                if piece is None:
                    # Idle: an idle worker has nothing to say, so anything readable is its end (killed, OOM).
                    if self._idle_worker_died(slot):
                        return
                    continue
                alive = self._run_piece(slot, piece)
                with self._lock:
                    slot.piece = None
                    piece.job.flow.running.discard(piece)
                    piece.job.flow.service_s += time.monotonic() - piece.started_at
                if not alive:
                    return
                if slot.slow:  # the extra worker started for it serves on; this one leaves
                    logger.info("%s worker %d leaves after a slow item", self.name, slot.number)
                    return
        finally:
            self._stop_worker(slot)

    def _idle_worker_died(self, slot: _Slot) -> bool:
        assert slot.conn is not None and slot.process is not None
        try:
            gone = slot.conn.poll(0) or not slot.process.is_alive()
        except (OSError, ValueError):
            gone = True
        if gone and not self._closed:
            self._retire(slot, "crash")
        return gone

    def _retire(self, slot: _Slot, reason: str) -> None:
        if self._closed:
            return
        self.restarts += 1
        logger.warning("%s worker %d replaced (%s)", self.name, slot.number, reason)
        if self._on_restart is not None:
            self._on_restart(reason)

    def _stop_worker(self, slot: _Slot) -> None:
        with self._lock:
            slot.ready = False
            if not any(s.ready for s in self._slots):
                self._not_serving_since = time.monotonic()
        if slot.conn is not None:
            with contextlib.suppress(Exception):
                slot.conn.close()
        if slot.process is not None:
            slot.process.join(0.5)
            if slot.process.exitcode is None:
                with contextlib.suppress(Exception):
                    slot.process.kill()
                slot.process.join(5)
        slot.process = slot.conn = None
        slot.slow = False

    def _own_time(self, slot: _Slot, since_wall: float, wait_at: float | None) -> float:
        """The worker's own time since ``since_wall``: wall time less what it waited for a CPU since then."""
        elapsed = time.monotonic() - since_wall
        if wait_at is None:
            return elapsed
        wait = _runqueue_wait_s(slot.pid)
        return elapsed if wait is None else elapsed - max(0.0, wait - wait_at)

    def _run_piece(self, slot: _Slot, piece: _Piece) -> bool:
        """Hand ``piece`` to ``slot``'s worker and collect its results; False if the worker is gone."""
        conn, control, job = slot.conn, slot.control, piece.job
        assert conn is not None and control is not None
        items = [(job.payloads[i], job.timeouts_s[i]) for i in piece.indices]
        handed = time.monotonic()
        wait_at_handoff = _runqueue_wait_s(slot.pid)
        done: set[int] = set()
        try:
            conn.send((piece.job_id, items))
        except (OSError, ValueError) as exc:  # a stopped worker: the write made no progress in time
            self._lose_worker(slot, piece, done, None, "unresponsive", f"could not hand the job over: {exc}")
            return False
        watched = -1  # the index whose start we saw last
        wait_at_start: float | None = None
        while True:
            try:
                message = conn.recv() if conn.poll(_WATCH_S) else None
            except (EOFError, OSError):
                if self._closed:
                    return False
                index = int(control[_INDEX])
                current = index if control[_JOB] == piece.job_id and index >= 0 else None
                slot.process.join(0.05)
                code = slot.process.exitcode
                self._lose_worker(slot, piece, done, current, "crash", f"worker died (exit code {code})")
                return False
            if message is not None:
                kind, _, results = message
                if kind == "retired":  # a deadline interrupted it: it exits, and another takes its place
                    self._retire(slot, "timeout")  # before anything is settled, as in _lose_worker
                outcomes = [(pos, _outcome(status, value, cpu_s)) for pos, status, value, cpu_s in results]
                done.update(pos for pos, _ in outcomes)
                with self._lock:
                    self._settle(piece, outcomes)
                if kind in ("done", "retired"):
                    rest = [i for pos, i in enumerate(piece.indices) if pos not in done]
                    if rest:  # stopped early (slow, cancelled or retired): the rest goes back to the queue
                        with self._work:
                            if piece.job.remaining > 0:
                                self._enqueue(_Piece(job, rest), front=True)
                    return kind == "done"
                continue
            # No message within _WATCH_S: look at the worker's clock.
            if control[_JOB] != piece.job_id:
                if self._own_time(slot, handed, wait_at_handoff) > self.handoff_timeout_s:
                    self._lose_worker(slot, piece, done, None, "unresponsive", "the worker did not take the job")
                    return False
                continue
            index = int(control[_INDEX])
            if index < 0:
                continue  # finished; its "done" is on the way
            if index != watched:
                watched, wait_at_start = index, _runqueue_wait_s(slot.pid)
            own_s = self._own_time(slot, control[_STARTED], wait_at_start)
            timeout_s = job.timeouts_s[piece.indices[index]]
            if own_s > timeout_s + self.grace_s:
                self._lose_worker(slot, piece, done, index, "timeout", f"no verdict within {timeout_s:g} s")
                return False
            if job.remaining <= 0 and own_s > _ABANDONED_S:
                # Nobody waits for this item any more (the client left, the budget ran out) and it is not a
                # quick one: its CPU is worth more to the others than a warm worker.
                self._lose_worker(slot, piece, done, None, "cancelled", "the request ended")
                return False
            if self.slow_item_s is not None and own_s > self.slow_item_s and not slot.slow:
                self._mark_slow(slot, piece)

    def _mark_slow(self, slot: _Slot, piece: _Piece) -> None:
        """The item has run long: let the worker finish only this item (the rest of its piece goes back to
        the queue when it does), and start a worker to take its place meanwhile."""
        slot.slow = True
        slot.control[_STOP] = piece.job_id
        with self._lock:
            extra = len(self._slots) - self.num_workers
            if not self._closed and extra < self.max_extra_workers:
                self._add_slot()

    def _lose_worker(
        self, slot: _Slot, piece: _Piece, done: set[int], current: int | None, reason: str, detail: str
    ) -> None:
        """The worker is dead or must die: ``current`` (if known) ends ``timeout``/``crashed``, the piece's
        other unfinished items go back to the queue (a piece that never started, at most _MAX_HANDOFFS)."""
        with contextlib.suppress(Exception):
            slot.process.kill()
        self._retire(slot, reason)  # before anything is settled: whoever sees an outcome sees the restart
        status = TaskStatus.TIMEOUT if reason == "timeout" else TaskStatus.CRASHED
        with self._work:
            if current is not None:
                done.add(current)
                self._settle(piece, [(current, TaskOutcome(status, detail=detail))])
            rest = [i for pos, i in enumerate(piece.indices) if pos not in done]
            if rest and piece.job.remaining > 0:
                handoffs = piece.handoffs + (1 if current is None else 0)
                if handoffs >= _MAX_HANDOFFS:
                    lost = TaskOutcome(TaskStatus.CRASHED, detail=f"{detail} ({handoffs} workers in a row)")
                    self._settle(piece, [(pos, lost) for pos in range(len(piece.indices)) if pos not in done])
                else:
                    self._enqueue(_Piece(piece.job, rest, handoffs), front=True)


def _outcome(status: str, value: Any, cpu_s: float) -> TaskOutcome:
    if status == "ok":
        return TaskOutcome(TaskStatus.OK, value=value, run_s=cpu_s)
    if status == "timeout":
        return TaskOutcome(TaskStatus.TIMEOUT, detail=value, run_s=cpu_s)
    return TaskOutcome(TaskStatus.CRASHED, detail=value, run_s=cpu_s)


def _join_all(threads: Sequence[threading.Thread], timeout_s: float) -> None:
    for thread in threads:
        thread.join(timeout_s)


def _set_result(future: asyncio.Future[list[TaskOutcome]], outcomes: list[TaskOutcome]) -> None:
    if not future.done():
        future.set_result(outcomes)
