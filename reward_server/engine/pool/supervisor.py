"""The pool's worker processes: start each from the forkserver, replace it when it dies, is killed or
retires, back off after failed starts, mark slow workers and start extras in their place, and say whether
the pool is healthy.

Each worker has a *slot*, driven by a thread of its own in the server process (:meth:`Supervisor._drive`):
the thread starts the worker, then takes one piece after another from the :class:`~.fair_queue.FairQueue`,
hands it over, and watches the worker's own clock (wall time less the time it waited for a CPU) to keep the
hard deadline, kill a worker that stopped, mark a slow one and kill one whose request ended. What the worker
sends back is settled through the facade, which resolves what callers wait for. The worker's side of the
socket pair is :mod:`.worker`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing as mp
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Literal

from reward_server.engine.pool.fair_queue import FairQueue, Flow, Piece, TaskOutcome, TaskStatus
from reward_server.engine.pool.worker import _INDEX, _JOB, _STARTED, _STOP, _worker_main

logger = logging.getLogger(__name__)

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
#: The niceness of a slow worker (the slow lane): the lowest CPU priority, so it runs on what others leave.
_SLOW_NICE = 19


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
    piece: Piece | None = None
    thread: threading.Thread | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """What a pool was built with; :class:`~reward_server.engine.pool.WorkerPool` documents each field."""

    handler: str
    num_workers: int
    name: str
    init_kwargs: dict[str, Any]
    on_restart: Callable[[str], None] | None
    grace_s: float
    preload: tuple[str, ...]
    slow_item_s: float | None
    max_extra_workers: int
    handoff_timeout_s: float
    soft_clock: Literal["cpu", "wall"]
    unhealthy_after_s: float


class Supervisor:
    """The worker processes of one pool and the threads that drive them.

    Args:
        config: the pool's settings.
        queue: where the driver threads take pieces from and hand unfinished ones back to.
        work: the pool's one lock, as a condition that is notified when a piece is queued; every call into
            ``queue`` holds it.
        settle: records outcomes of a piece (``(position in piece, outcome)``) and resolves its job when it
            has them all; called with ``work`` held.
        cancel_flow: ends a flow's jobs with an outcome (when no worker can start); called without ``work``.
        signal_ready: called once every first worker is ready, or the first failed to start.
    """

    def __init__(
        self,
        config: PoolConfig,
        queue: FairQueue,
        work: threading.Condition,
        *,
        settle: Callable[[Piece, Sequence[tuple[int, TaskOutcome]]], None],
        cancel_flow: Callable[[Flow, TaskOutcome], None],
        signal_ready: Callable[[], None],
    ) -> None:
        self.config = config
        self._queue, self._work = queue, work
        self._settle, self._cancel_flow, self._signal_ready = settle, cancel_flow, signal_ready
        self._ctx = mp.get_context("forkserver")
        self._spawn_lock = threading.Lock()
        self.slots: list[_Slot] = []
        self._numbers = itertools.count()
        self._job_ids = itertools.count(1)
        #: Set (under ``work``) when the pool closes: the threads stop and no worker starts any more.
        self.closed = False
        #: Set by the facade once every first worker was ready.
        self.started = False
        self._initializing = True  # until every first worker is ready, or one fails to start
        self._ready_count = 0
        self.start_timeout_s = 120.0
        #: Why the first start failed, if it did.
        self.start_error: str | None = None
        self._start_failures = 0  # consecutive, over all slots, since a worker last became ready
        self._last_start_error: str | None = None
        self._not_serving_since = time.monotonic()
        self.restarts = 0
        self.slow_items = 0  # items moved to the slow lane

    def start(self, timeout_s: float) -> None:
        """Start a thread per worker; each starts its worker and waits up to ``timeout_s`` for it."""
        self.start_timeout_s = timeout_s
        self._ctx.set_forkserver_preload([self.config.handler.partition(":")[0], *self.config.preload])
        with self._work:
            for _ in range(self.config.num_workers):
                self._add_slot()

    @property
    def alive(self) -> int:
        """Workers that are up and serving now (slow ones included)."""
        return sum(1 for s in self.slots if s.ready)

    @property
    def health(self) -> tuple[bool, str | None]:
        """``(ok, why not)``: false once the pool is closed, or when no worker has served for
        ``unhealthy_after_s`` or the last five attempts to start one failed. The pool keeps trying with
        back-off meanwhile and turns healthy again as soon as a worker starts."""
        if self.closed:
            return False, "the pool is closed"
        if self.alive > 0:
            return True, None
        down_s = time.monotonic() - self._not_serving_since
        if self.started and (self._start_failures >= _FAILED_STARTS or down_s > self.config.unhealthy_after_s):
            reason = self._last_start_error or "no worker process is up"
            return False, f"no {self.config.name} worker is up (for {down_s:.0f} s); the last start failed: {reason}"
        return True, None

    def flows_on_workers(self) -> list[Flow]:
        """The flows of the pieces on a worker now (call with ``work`` held)."""
        return [s.piece.job.flow for s in self.slots if s.piece]

    def kill_all(self) -> list[threading.Thread]:
        """Kill every worker (after :attr:`closed` is set); the driver threads, for the caller to join."""
        for slot in list(self.slots):
            with contextlib.suppress(Exception):
                if slot.process is not None:
                    slot.process.kill()
        return [s.thread for s in self.slots if s.thread is not None]

    @staticmethod
    def stop_after_item(piece: Piece) -> None:
        """Ask the worker that runs ``piece`` to leave it after its current item (its job was cancelled)."""
        if piece.slot is not None and piece.slot.control is not None:
            piece.slot.control[_STOP] = piece.job_id

    def _add_slot(self) -> _Slot:
        slot = _Slot(next(self._numbers))
        self.slots.append(slot)
        slot.thread = threading.Thread(target=self._drive, args=(slot,), name=f"rlvr-{self.config.name}-{slot.number}")
        slot.thread.daemon = True
        slot.thread.start()
        return slot

    def _surplus(self, slot: _Slot) -> bool:
        """Is this slot one too many (its slow worker has retired and the extra that replaced it serves)?"""
        slow = sum(1 for s in self.slots if s.slow)
        return len(self.slots) > self.config.num_workers + slow

    # ------------------------------------------------------------------ driver threads

    def _drive(self, slot: _Slot) -> None:
        """A slot's life: start a worker, serve jobs until it dies or retires, start another (with back-off
        after failed starts), until the pool closes or the slot is surplus."""
        failures = 0
        while not self.closed:
            error = self._start_worker(slot)
            if error is None:
                failures = 0
                self._serve(slot)
            elif self.closed:
                break
            else:
                failures += 1
                if self._note_start_failure(error):
                    break
                backoff_s = min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2 ** (failures - 1))
                logger.error("%s worker failed to start (%s); next try in %.1f s", self.config.name, error, backoff_s)
                with self._work:
                    self._work.wait_for(lambda: self.closed, backoff_s)
            with self._work:
                if self.closed or self._surplus(slot):
                    break
        with self._work:
            if slot in self.slots:
                self.slots.remove(slot)

    def _note_start_failure(self, error: str) -> bool:
        """Count a failed start; during :meth:`start` the first one fails the pool (returns True). Once the
        pool is unhealthy, what waits for a worker ends ``crashed`` rather than wait for one to start."""
        with self._work:
            self._start_failures += 1
            self._last_start_error = error
            initializing, self._initializing = self._initializing, False
            if initializing:
                self.start_error = error
            flows = self._queue.flows
        if initializing:
            self._signal_ready()
            return True
        healthy, why = self.health
        if not healthy:
            lost = TaskOutcome(TaskStatus.CRASHED, detail=f"workers cannot start: {why}")
            for flow in flows:
                self._cancel_flow(flow, lost)
        return False

    def _start_worker(self, slot: _Slot) -> str | None:
        """Start a worker in ``slot`` and wait until it is ready; the reason it failed, else ``None``."""
        with self._spawn_lock:
            if self.closed:
                return "pool closed"
            parent, child = self._ctx.Pipe(duplex=True)
            control = self._ctx.RawArray("d", 4)
            process = self._ctx.Process(
                target=_worker_main,
                args=(child, control, self.config.handler, self.config.init_kwargs, self.config.soft_clock),
                name=f"rlvr-{self.config.name}-{slot.number}",
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
        _set_socket_timeouts(parent, self.config.handoff_timeout_s)
        try:
            arrived = parent.poll(self.start_timeout_s)
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
        with self._work:
            slot.ready = True
            self._start_failures = 0
            all_ready = False
            if self._initializing:
                self._ready_count += 1
                all_ready = self._ready_count == self.config.num_workers
                self._initializing = not all_ready
        if all_ready:
            self._signal_ready()
        return None

    def _serve(self, slot: _Slot) -> None:
        """Hand ``slot``'s worker one piece after another until it dies, retires or the pool closes."""
        try:
            while True:
                with self._work:
                    self._work.wait_for(lambda: self.closed or bool(self._queue), _IDLE_CHECK_S)
                    if self.closed:
                        return
                    piece = self._queue.pick(time.monotonic())
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
                with self._work:
                    slot.piece = None
                    self._queue.charge(piece, time.monotonic())
                if not alive:
                    return
                if slot.slow:  # the extra worker started for it serves on; this one leaves
                    logger.info("%s worker %d leaves after a slow item", self.config.name, slot.number)
                    return
        finally:
            self._stop_worker(slot)

    def _idle_worker_died(self, slot: _Slot) -> bool:
        assert slot.conn is not None and slot.process is not None
        try:
            gone = slot.conn.poll(0) or not slot.process.is_alive()
        except (OSError, ValueError):
            gone = True
        if gone and not self.closed:
            self._retire(slot, "crash")
        return gone

    def _retire(self, slot: _Slot, reason: str) -> None:
        if self.closed:
            return
        self.restarts += 1
        logger.warning("%s worker %d replaced (%s)", self.config.name, slot.number, reason)
        if self.config.on_restart is not None:
            self.config.on_restart(reason)

    def _stop_worker(self, slot: _Slot) -> None:
        with self._work:
            slot.ready = False
            if not any(s.ready for s in self.slots):
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

    def _run_piece(self, slot: _Slot, piece: Piece) -> bool:
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
                if self.closed:
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
                with self._work:
                    self._settle(piece, outcomes)
                if kind in ("done", "retired"):
                    rest = [i for pos, i in enumerate(piece.indices) if pos not in done]
                    if rest:  # stopped early (slow, cancelled or retired): the rest goes back to the queue
                        with self._work:
                            if piece.job.remaining > 0:
                                self._queue.enqueue(Piece(job, rest), front=True)
                                self._work.notify()
                    return kind == "done"
                continue
            # No message within _WATCH_S: look at the worker's clock.
            if control[_JOB] != piece.job_id:
                if self._own_time(slot, handed, wait_at_handoff) > self.config.handoff_timeout_s:
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
            if own_s > timeout_s + self.config.grace_s:
                self._lose_worker(slot, piece, done, index, "timeout", f"no verdict within {timeout_s:g} s")
                return False
            if job.remaining <= 0 and own_s > _ABANDONED_S:
                # Nobody waits for this item any more (the client left, the budget ran out) and it is not a
                # quick one: its CPU is worth more to the others than a warm worker.
                self._lose_worker(slot, piece, done, None, "cancelled", "the request ended")
                return False
            if self.config.slow_item_s is not None and own_s > self.config.slow_item_s and not slot.slow:
                self._mark_slow(slot, piece)

    def _mark_slow(self, slot: _Slot, piece: Piece) -> None:
        """The item has run long: it moves to the slow lane. Its worker drops to the lowest CPU priority (nice
        19), so that the serving workers' items take the CPU first and the slow item runs on what they leave;
        its deadline counts its own time, so waiting for a CPU does not shorten it. The worker finishes only
        this item (the rest of its piece goes back to the queue when it does), and a worker starts to take
        its place meanwhile."""
        slot.slow = True
        slot.control[_STOP] = piece.job_id
        with contextlib.suppress(OSError):  # it may have just exited; a platform without nice keeps it as is
            os.setpriority(os.PRIO_PROCESS, slot.pid, _SLOW_NICE)
        self.slow_items += 1
        with self._work:
            extra = len(self.slots) - self.config.num_workers
            if not self.closed and extra < self.config.max_extra_workers:
                self._add_slot()

    def _lose_worker(
        self, slot: _Slot, piece: Piece, done: set[int], current: int | None, reason: str, detail: str
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
                    self._queue.enqueue(Piece(piece.job, rest, handoffs), front=True)
                    self._work.notify()


def _outcome(status: str, value: Any, cpu_s: float) -> TaskOutcome:
    if status == "ok":
        return TaskOutcome(TaskStatus.OK, value=value, run_s=cpu_s)
    if status == "timeout":
        return TaskOutcome(TaskStatus.TIMEOUT, detail=value, run_s=cpu_s)
    return TaskOutcome(TaskStatus.CRASHED, detail=value, run_s=cpu_s)
