"""A process pool for hang-prone, CPU-heavy verification (sympy), with per-task deadlines.

Why not ``concurrent.futures.ProcessPoolExecutor``: it cannot cancel a running task, so one hung sympy call
holds a worker forever, and one crashed worker breaks the whole executor. Here every worker is a separate
process with its own pipe, so the pool can

* give each task its own wall-clock deadline, counted from when a worker starts it (not queueing time),
* kill exactly the worker that overran and start a replacement (the task's outcome is ``timeout``),
* report a worker that died mid-task as ``crashed`` for that task alone,
* route tasks that share an ``affinity_key`` (the ground truth of a group) to the worker that already
  parsed it, so a group's reference is parsed once per batch rather than once per completion.

Workers come from a ``forkserver`` that pre-imports the handler's module, so a replacement is ready in
milliseconds instead of re-importing sympy.

The pool lives on one asyncio event loop (the server's); all its methods must be called from that loop.
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
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

logger = logging.getLogger(__name__)

# How many recently used affinity keys a worker is assumed to still hold in its cache.
_AFFINITY_MEMORY = 256
# How far down the queue an idle worker looks for a task that suits its cache.
_AFFINITY_SCAN = 512


class TaskStatus(enum.StrEnum):
    """How a task ended, from the pool's point of view (not the verdict)."""

    OK = "ok"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """What :meth:`WorkerPool.submit` returns.

    ``value`` is the handler's return value when ``status`` is ``ok``; ``detail`` explains the others.
    ``run_s`` is the time the task spent on a worker, queueing excluded.
    """

    status: TaskStatus
    value: Any = None
    detail: str | None = None
    run_s: float = 0.0


@dataclass(eq=False)
class _Task:
    payload: Any
    timeout_s: float
    key: str | None
    future: asyncio.Future[TaskOutcome]
    id: int = 0


@dataclass(eq=False)
class _Worker:
    index: int
    process: Any
    conn: Connection
    ready: bool = False
    task: _Task | None = None
    started_at: float = 0.0
    deadline: asyncio.TimerHandle | None = None
    keys: OrderedDict[str, None] = field(default_factory=OrderedDict)
    gone: bool = False  # detached from the pool: anything its reader thread still reports is ignored

    def remember(self, key: str | None) -> None:
        if key is None:
            return
        self.keys[key] = None
        self.keys.move_to_end(key)
        while len(self.keys) > _AFFINITY_MEMORY:
            self.keys.popitem(last=False)


def _worker_main(conn: Connection, handler_path: str, init_kwargs: dict[str, Any]) -> None:
    """Entry point of a worker process: load the handler, then serve tasks until the pipe closes."""
    # The parent owns shutdown; a Ctrl-C in the terminal must not kill workers mid-task with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    module_name, _, attr = handler_path.partition(":")
    module = importlib.import_module(module_name)
    init = getattr(module, "init_worker", None)
    if init is not None:
        init(**init_kwargs)
    handler: Callable[[Any], Any] = getattr(module, attr)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task_id, payload = conn.recv()
        except (EOFError, OSError):
            return
        try:
            result = ("ok", handler(payload))
        except BaseException as exc:  # a handler bug must cost one task, not the worker
            result = ("error", f"{type(exc).__name__}: {exc}"[:500])
        try:
            conn.send((task_id, *result))
        except (BrokenPipeError, OSError):
            return


class WorkerPool:
    """A fixed number of worker processes that run ``handler(payload)`` under per-task deadlines.

    Args:
        handler: ``"package.module:function"``; the function takes one picklable payload and returns a
            picklable result. If the module defines ``init_worker(**init_kwargs)``, each worker calls it once.
        num_workers: worker processes to keep alive.
        name: label for logs and metrics.
        init_kwargs: keyword arguments for the module's ``init_worker``.
        on_restart: called with a reason (``"timeout"`` or ``"crash"``) each time a worker is replaced.
        grace_s: extra seconds past a task's ``timeout_s`` before its worker is killed.

    Call :meth:`start` (awaiting readiness) before :meth:`submit`, and :meth:`close` at shutdown.
    """

    def __init__(
        self,
        handler: str,
        num_workers: int,
        *,
        name: str = "pool",
        init_kwargs: dict[str, Any] | None = None,
        on_restart: Callable[[str], None] | None = None,
        grace_s: float = 0.0,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.handler = handler
        self.num_workers = num_workers
        self.name = name
        self.grace_s = grace_s
        self._init_kwargs = dict(init_kwargs or {})
        self._on_restart = on_restart
        self._ctx = mp.get_context("forkserver")
        self._workers: list[_Worker] = []
        self._pending: deque[_Task] = deque()
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._all_ready = asyncio.Event()
        self._startup_failures = 0
        self._broken: str | None = None
        self.restarts = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self, timeout_s: float = 120.0) -> None:
        """Start the workers and wait until each has loaded its handler.

        Raises:
            TimeoutError: not all workers were ready within ``timeout_s``.
            RuntimeError: a worker died before it was ready (a broken handler module, say).
        """
        self._loop = asyncio.get_running_loop()
        module_name = self.handler.partition(":")[0]
        self._ctx.set_forkserver_preload([module_name])
        for i in range(self.num_workers):
            self._workers.append(self._spawn(i))
        await asyncio.wait_for(self._all_ready.wait(), timeout_s)
        if self._broken:
            await self.close()
            raise RuntimeError(f"worker pool {self.name!r} cannot start: {self._broken}")

    @property
    def ready(self) -> bool:
        """True once every worker has started at least once (replacements do not reset it), until the pool
        is closed or its workers can no longer start."""
        return self._all_ready.is_set() and not self._closed and self._broken is None

    @property
    def alive(self) -> int:
        """Workers that are up and serving now."""
        return sum(1 for w in self._workers if w.ready)

    async def close(self) -> None:
        """Kill every worker and fail the tasks still queued or running with ``cancelled``."""
        self._closed = True
        for w in self._workers:
            self._detach(w)
            if w.task is not None:
                self._finish(w, TaskOutcome(TaskStatus.CANCELLED, detail="pool closed"))
            w.conn.close()
            with contextlib.suppress(Exception):
                w.process.kill()
        while self._pending:
            task = self._pending.popleft()
            if not task.future.done():
                task.future.set_result(TaskOutcome(TaskStatus.CANCELLED, detail="pool closed"))
        for w in self._workers:
            await asyncio.to_thread(w.process.join, 5)
        self._workers.clear()

    # ------------------------------------------------------------------ public

    async def submit(self, payload: Any, *, timeout_s: float, affinity_key: str | None = None) -> TaskOutcome:
        """Run ``handler(payload)`` on a worker and return its :class:`TaskOutcome`.

        The deadline ``timeout_s`` (plus the pool's ``grace_s``) starts when a worker picks the task up.
        Never raises for a task's own failure: a hang gives ``timeout``, a dead worker ``crashed``.

        Raises:
            RuntimeError: the pool is closed.
        """
        if self._closed or self._loop is None:
            raise RuntimeError(f"worker pool {self.name!r} is not running")
        if self._broken:
            return TaskOutcome(TaskStatus.CRASHED, detail=f"workers cannot start: {self._broken}")
        future: asyncio.Future[TaskOutcome] = self._loop.create_future()
        self._pending.append(_Task(payload, timeout_s, affinity_key, future, next(self._ids)))
        self._dispatch()
        try:
            return await future
        except asyncio.CancelledError:
            # The caller went away (client disconnected); drop the task if it has not started yet.
            # (A task a worker holds already is not pending; `next` without a default would then raise
            # StopIteration, which a coroutine turns into a RuntimeError in place of the cancellation.)
            pending = next((t for t in self._pending if t.future is future), None)
            if pending is not None:
                self._pending.remove(pending)
            raise

    # ------------------------------------------------------------------ internals

    def _spawn(self, index: int) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main,
            args=(child_conn, self.handler, self._init_kwargs),
            name=f"rlvr-{self.name}-{index}",
            daemon=True,
        )
        process.start()
        child_conn.close()
        worker = _Worker(index=index, process=process, conn=parent_conn)
        assert self._loop is not None
        # A blocking reader thread per worker, not loop.add_reader: uvloop makes a watched fd non-blocking,
        # and a result or payload larger than the pipe buffer then fails half-way (BlockingIOError).
        threading.Thread(
            target=self._read_loop, args=(worker, self._loop), name=f"rlvr-{self.name}-reader-{index}", daemon=True
        ).start()
        return worker

    def _read_loop(self, worker: _Worker, loop: asyncio.AbstractEventLoop) -> None:
        """Reader thread: hand each message from the worker's pipe to the event loop, then its end."""
        while True:
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                message = None
            try:
                if message is None:
                    loop.call_soon_threadsafe(self._on_eof, worker)
                    return
                loop.call_soon_threadsafe(self._on_message, worker, message)
            except RuntimeError:  # the loop is closed: the pool is gone
                return

    def _detach(self, worker: _Worker) -> None:
        worker.gone = True
        if worker.deadline is not None:
            worker.deadline.cancel()
            worker.deadline = None

    def _replace(self, worker: _Worker, reason: str) -> None:
        """Kill ``worker`` (if still alive) and put a fresh process in its slot."""
        self._detach(worker)
        with contextlib.suppress(Exception):
            worker.process.kill()
        with contextlib.suppress(Exception):
            worker.conn.close()
        # Reap in the background so no zombie is left; never block the loop on it.
        if self._loop is not None:
            self._loop.run_in_executor(None, worker.process.join, 10)
        self.restarts += 1
        logger.warning("%s worker %d replaced (%s)", self.name, worker.index, reason)
        if self._on_restart is not None:
            self._on_restart(reason)
        if not self._closed:
            self._workers[worker.index] = self._spawn(worker.index)

    def _on_eof(self, worker: _Worker) -> None:
        """The worker's pipe closed: the process died (or was killed by us, then ``gone`` is set)."""
        if worker.gone:
            return
        if not worker.ready:
            self._on_startup_failure(worker)
            return
        task = worker.task
        if task is not None:
            # The pipe closes as the process exits; a short join reads its exit code (crashes only).
            worker.process.join(0.05)
            code = worker.process.exitcode
            self._finish(worker, TaskOutcome(TaskStatus.CRASHED, detail=f"worker died (exit code {code})"))
        self._replace(worker, "crash")
        self._dispatch()

    def _on_message(self, worker: _Worker, message: Any) -> None:
        if worker.gone:
            return
        if message[0] == "ready":
            worker.ready = True
            self._startup_failures = 0
            if all(w.ready for w in self._workers):
                self._all_ready.set()
            self._dispatch()
            return
        task_id, kind, value = message
        task = worker.task
        if task is None or task.id != task_id:
            return  # a late answer for a task that already timed out; cannot happen after a kill, but be safe
        run_s = time.monotonic() - worker.started_at
        if kind == "ok":
            outcome = TaskOutcome(TaskStatus.OK, value=value, run_s=run_s)
        else:
            outcome = TaskOutcome(TaskStatus.CRASHED, detail=str(value), run_s=run_s)
        self._finish(worker, outcome)
        self._dispatch()

    def _on_startup_failure(self, worker: _Worker) -> None:
        """A worker died before loading its handler. Retry a few times, then declare the pool broken
        rather than respawn forever (a handler that cannot import would otherwise fork without end)."""
        worker.process.join(0.05)
        if self._broken:
            self._detach(worker)  # the pool is already declared broken; do not respawn
            return
        self._startup_failures += 1
        reason = f"worker exited with code {worker.process.exitcode} before it was ready"
        if self._startup_failures >= 3 or not self._all_ready.is_set():
            self._broken = reason
            self._detach(worker)
            logger.error("%s pool broken: %s", self.name, reason)
            while self._pending:
                task = self._pending.popleft()
                if not task.future.done():
                    task.future.set_result(TaskOutcome(TaskStatus.CRASHED, detail=f"workers cannot start: {reason}"))
            self._all_ready.set()  # wake start(), which raises
            return
        self._replace(worker, "crash")

    def _finish(self, worker: _Worker, outcome: TaskOutcome) -> None:
        task = worker.task
        worker.task = None
        if worker.deadline is not None:
            worker.deadline.cancel()
            worker.deadline = None
        if task is not None and not task.future.done():
            task.future.set_result(outcome)

    def _on_deadline(self, worker: _Worker, task_id: int) -> None:
        task = worker.task
        if task is None or task.id != task_id:
            return
        run_s = time.monotonic() - worker.started_at
        worker.deadline = None
        self._finish(
            worker,
            TaskOutcome(TaskStatus.TIMEOUT, detail=f"no verdict within {task.timeout_s:g} s", run_s=run_s),
        )
        self._replace(worker, "timeout")
        self._dispatch()

    def _busy_keys(self) -> set[str]:
        return {w.task.key for w in self._workers if w.task is not None and w.task.key is not None}

    def _pick(self, worker: _Worker) -> _Task | None:
        """The next task for an idle worker: one whose key it holds, else a key no busy worker holds."""
        fallback: _Task | None = None
        busy = None
        for i, task in enumerate(self._pending):
            if i >= _AFFINITY_SCAN:
                break
            if task.future.done():
                continue
            if task.key is None or task.key in worker.keys:
                return task
            if fallback is None:
                if busy is None:
                    busy = self._busy_keys()
                if task.key not in busy:
                    fallback = task
        if fallback is not None:
            return fallback
        # Every pending key is in another worker's hands: steal the oldest rather than idle.
        while self._pending and self._pending[0].future.done():
            self._pending.popleft()
        return self._pending[0] if self._pending else None

    def _dispatch(self) -> None:
        if self._loop is None:
            return
        for worker in self._workers:
            if not self._pending:
                return
            if not worker.ready or worker.task is not None:
                continue
            task = self._pick(worker)
            if task is None:
                return
            self._pending.remove(task)
            try:
                worker.conn.send((task.id, task.payload))
            except (BrokenPipeError, OSError) as exc:
                # Not retried: a payload that breaks the pipe would break every worker in turn.
                if not task.future.done():
                    task.future.set_result(
                        TaskOutcome(TaskStatus.CRASHED, detail=f"could not hand the task over: {exc}")
                    )
                self._replace(worker, "crash")
                continue
            worker.task = task
            worker.started_at = time.monotonic()
            worker.remember(task.key)
            worker.deadline = self._loop.call_later(task.timeout_s + self.grace_s, self._on_deadline, worker, task.id)
