"""The pool's async interface, :class:`WorkerPool`: what the scoring engine calls from the event loop.

It ties the parts together: jobs wait in a :class:`~.fair_queue.FairQueue`, the :class:`~.supervisor.Supervisor`'s
driver threads take them to worker processes (:mod:`.worker`) and settle their outcomes here, and each job's
future is resolved on the loop with ``call_soon_threadsafe``. Every public method is called from one asyncio
event loop (the server's); the driver threads share the queue with it under one lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

from reward_server.engine.pool.fair_queue import FairQueue, Flow, Job, Piece, TaskOutcome, TaskStatus
from reward_server.engine.pool.supervisor import PoolConfig, Supervisor, _Slot

# How long throughput is averaged over, for :attr:`WorkerPool.items_per_s`.
_RATE_WINDOW_S = 10.0


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
        slow_item_s: an item that has run this long (its own time) makes its worker *slow* (see
            :mod:`reward_server.engine.pool`); ``None`` turns that off.
        max_extra_workers: most workers started in place of slow ones at once (default ``4 * num_workers``:
            slow workers run at nice 19, so the extras add processes, not CPU contention, to the serving ones).
        soft_clock: what the in-worker soft deadline counts: the worker's CPU time (``"cpu"``: a loaded machine
            does not shorten an item's time), or wall time (``"wall"``: for a handler that runs many threads,
            whose CPU time grows faster than the clock, or that waits on a GPU).
        handoff_timeout_s: how long (its own time) a worker may take to accept a job or a write before it
            is deemed stopped, killed, and the job handed to another.
        unhealthy_after_s: with no worker serving for this long, :attr:`health` says so.

    Call :meth:`start` before :meth:`run`, and :meth:`close` at shutdown. The settings are kept, frozen, in
    :attr:`config` (a :class:`~.supervisor.PoolConfig`).
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
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._queue = FairQueue()
        self.config = PoolConfig(
            handler=handler,
            num_workers=num_workers,
            name=name,
            init_kwargs=dict(init_kwargs or {}),
            on_restart=on_restart,
            grace_s=grace_s,
            preload=tuple(preload),
            slow_item_s=slow_item_s,
            max_extra_workers=4 * num_workers if max_extra_workers is None else max_extra_workers,
            handoff_timeout_s=handoff_timeout_s,
            soft_clock=soft_clock,
            unhealthy_after_s=unhealthy_after_s,
        )
        self._supervisor = Supervisor(
            self.config,
            self._queue,
            self._work,
            settle=self._settle,
            cancel_flow=self._cancel_flow,
            signal_ready=self._signal_ready,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._all_ready: asyncio.Event | None = None
        self._finished: deque[tuple[float, int]] = deque()
        self._finished_count = 0  # the sum of the counts in _finished
        self._created = time.monotonic()

    @property
    def num_workers(self) -> int:
        """Worker processes the pool keeps serving (extras for slow workers aside)."""
        return self.config.num_workers

    @property
    def restarts(self) -> int:
        """Workers replaced so far (killed, dead or retired)."""
        return self._supervisor.restarts

    @property
    def _slots(self) -> list[_Slot]:
        return self._supervisor.slots

    # ------------------------------------------------------------------ lifecycle

    async def start(self, timeout_s: float = 120.0) -> None:
        """Start the workers and wait until each has loaded its handler.

        Raises:
            TimeoutError: not all workers were ready within ``timeout_s``.
            RuntimeError: a worker died before it was ready (a broken handler module, say).
        """
        self._loop = asyncio.get_running_loop()
        self._all_ready = asyncio.Event()
        self._supervisor.start(timeout_s)
        try:
            await asyncio.wait_for(self._all_ready.wait(), timeout_s)
        except TimeoutError:
            await self.close()
            raise
        if self._supervisor.start_error is not None:
            await self.close()
            raise RuntimeError(f"worker pool {self.config.name!r} cannot start: {self._supervisor.start_error}")
        self._supervisor.started = True

    @property
    def ready(self) -> bool:
        """True once every worker has started at least once, until the pool is closed or stops being
        healthy (a restart of one worker does not make it unready: its jobs wait in the queue)."""
        return self._supervisor.started and self.health[0]

    @property
    def slow_items(self) -> int:
        """Items moved to the slow lane so far (past ``slow_item_s`` of their own time)."""
        return self._supervisor.slow_items

    @property
    def alive(self) -> int:
        """Workers that are up and serving now (slow ones included)."""
        return self._supervisor.alive

    @property
    def health(self) -> tuple[bool, str | None]:
        """``(ok, why not)``: false once the pool is closed, or when no worker has served for
        ``unhealthy_after_s`` or the last five attempts to start one failed. The pool keeps trying with
        back-off meanwhile and turns healthy again as soon as a worker starts."""
        return self._supervisor.health

    @property
    def queued_items(self) -> int:
        """Items waiting for a worker (not yet started), over every request. Cheap; for admission control."""
        return self._queue.queued

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
            self._supervisor.closed = True
            flows = list({*self._queue.flows, *self._supervisor.flows_on_workers()})
            self._work.notify_all()
        for flow in flows:
            self._cancel_flow(flow, TaskOutcome(TaskStatus.CANCELLED, detail="pool closed"))
        threads = self._supervisor.kill_all()
        await asyncio.to_thread(_join_all, threads, 10.0)

    # ------------------------------------------------------------------ public

    def flow_waiting(self, flow: Flow) -> int:
        """Items of ``flow`` still waiting for a worker (not started)."""
        with self._lock:
            return sum(len(piece.indices) for piece in flow.pending)

    def open_flow(self) -> Flow:
        """A new request's flow, level with the flows already waiting (see :mod:`reward_server.engine.pool`)."""
        with self._lock:
            return self._queue.open_flow(time.monotonic())

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
        if self._supervisor.closed or self._loop is None:
            raise RuntimeError(f"worker pool {self.config.name!r} is not running")
        if len(payloads) != len(timeouts_s):
            raise ValueError(f"{len(payloads)} payloads but {len(timeouts_s)} timeouts")
        if not payloads:
            return []
        healthy, why = self.health
        if not healthy:
            return [TaskOutcome(TaskStatus.CRASHED, detail=f"workers cannot start: {why}")] * len(payloads)
        future: asyncio.Future[list[TaskOutcome]] = self._loop.create_future()
        job = Job(flow, payloads, timeouts_s, future, [None] * len(payloads), len(payloads))
        with self._work:
            if flow.closed:
                raise RuntimeError("the flow is closed")
            flow.jobs.add(job)
            self._queue.enqueue(Piece(job, list(range(len(payloads)))))
            self._work.notify()
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

    # ------------------------------------------------------------------ outcomes (called by the driver threads too)

    def _settle(self, piece: Piece, results: Sequence[tuple[int, TaskOutcome]]) -> None:
        """Record outcomes (``(position in piece, outcome)``); resolve the job when it has them all. Called
        with the lock held."""
        resolved = self._queue.settle(piece, results)
        if results:
            self._finished.append((time.monotonic(), len(results)))
            self._finished_count += len(results)
        if resolved:
            self._resolve(piece.job)

    def _resolve(self, job: Job) -> None:
        outcomes = [o for o in job.outcomes if o is not None]
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(_set_result, job.future, outcomes)

    def _cancel_job(self, job: Job, outcome: TaskOutcome) -> None:
        with self._lock:
            running = self._queue.cancel_job(job, outcome)
            if running is not None:
                self._stop_and_resolve(job, running)

    def _cancel_flow(self, flow: Flow, outcome: TaskOutcome) -> None:
        with self._lock:
            for job, running in self._queue.cancel_flow(flow, outcome):
                self._stop_and_resolve(job, running)

    def _stop_and_resolve(self, job: Job, running: list[Piece]) -> None:
        for piece in running:  # its worker leaves the job after the current item, which may finish if quick
            self._supervisor.stop_after_item(piece)
        self._resolve(job)

    def _signal_ready(self) -> None:
        loop, event = self._loop, self._all_ready
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)


def _join_all(threads: Sequence[threading.Thread], timeout_s: float) -> None:
    for thread in threads:
        thread.join(timeout_s)


def _set_result(future: asyncio.Future[list[TaskOutcome]], outcomes: list[TaskOutcome]) -> None:
    if not future.done():
        future.set_result(outcomes)
