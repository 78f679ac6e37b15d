"""What the server takes in: a bound on queued items (backpressure) and the drain on SIGTERM.

:class:`ItemBudget` counts items rather than requests or connections, since a reward server's work is items: one
request of 4,096 items weighs as much as 4,096 requests of one. Items are *queued* from the moment their request is
admitted until it is answered. A request that would take the count past ``RLVR_MAX_QUEUED_ITEMS`` is refused whole
(a batch is never split) with ``429 Too Many Requests`` and a ``Retry-After`` that says how long the work queued
ahead of it takes to drain at the measured rates (see :meth:`ItemBudget.retry_after_s`). A trainer then backs off,
or its client moves to another replica.

:class:`Drain` is what SIGTERM starts (see :func:`install_drain_on_sigterm`): new requests get ``503`` with a
``Retry-After`` and ``/readyz`` says 503, requests in flight get up to ``RLVR_DRAIN_S`` to finish, and then the
items still unscored come back ``cancelled`` (a null reward, never a 500). Only then is uvicorn's own shutdown
started (it closes the listening socket and the idle connections, and runs the lifespan's shutdown).

Nothing here knows FastAPI; the middleware and the routers use these two classes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

logger = logging.getLogger("reward_server")

#: The window over which the drain rate behind ``Retry-After`` is measured, in seconds.
RATE_WINDOW_S = 10.0
#: ``Retry-After`` bounds, in seconds: a client waits at least this, and is never told to wait longer.
MIN_RETRY_AFTER_S = 1
MAX_RETRY_AFTER_S = 60
#: ``Retry-After`` when nothing was answered in the window yet (a burst at start-up).
UNKNOWN_RATE_RETRY_AFTER_S = 5
#: After ``RLVR_DRAIN_S``, how long requests get to send the answer that lists their cancelled items before
#: the drain cancels them outright (with a 503).
CANCEL_GRACE_S = 3.0


class PoolLoad(Protocol):
    """What admission reads of a worker pool: the items waiting for a worker, and how fast they are finished."""

    @property
    def queued_items(self) -> int: ...

    @property
    def items_per_s(self) -> float: ...


class QueueFull(Exception):
    """The items of a request do not fit under ``RLVR_MAX_QUEUED_ITEMS``, or their work under
    ``RLVR_MAX_QUEUED_WORK``; ``retry_after_s`` says when to retry."""

    def __init__(self, items: float, queued: float, limit: float, retry_after_s: int, what: str = "items") -> None:
        setting = "RLVR_MAX_QUEUED_ITEMS" if what == "items" else "RLVR_MAX_QUEUED_WORK"
        super().__init__(
            f"the server is at capacity: {queued:g} {what} are queued and {items:g} more would pass the limit of "
            f"{limit:g} ({setting}); retry in {retry_after_s} s or on another server"
        )
        self.retry_after_s = retry_after_s


class ItemBudget:
    """Items admitted and not yet answered, bounded by ``max_items``; and the rate at which items are answered.

    Args:
        max_items: the bound (``RLVR_MAX_QUEUED_ITEMS``).
        window_s: the window of the answer rate, in seconds.
        clock: monotonic seconds (tests pass a fake one).
        pool: the worker pool whose backlog and drain rate ``Retry-After`` accounts for (a function, since the pool
            starts after the budget is made; it returns ``None`` until then).
        max_work: the bound on queued work units (``RLVR_MAX_QUEUED_WORK``, see :mod:`reward_server.engine.work`);
            ``None``: none. A request of more work than the bound is admitted only when nothing else is queued.
        budget_s: the request budget for ``reference_work`` units (``RLVR_REQUEST_BUDGET_S``); ``None``: none.
        budget_max_s: the most a request's scaled budget may reach (``RLVR_REQUEST_BUDGET_MAX_S``).
        reference_work: the work ``budget_s`` is sized for (a full batch of plain items, ``RLVR_MAX_BATCH_ITEMS``).
    """

    def __init__(
        self,
        max_items: int,
        window_s: float = RATE_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        pool: Callable[[], PoolLoad | None] = lambda: None,
        max_work: float | None = None,
        budget_s: float | None = None,
        budget_max_s: float | None = None,
        reference_work: float = 4096.0,
    ):
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        self.max_items = max_items
        self.max_work = max_work
        self.budget_s = budget_s
        self.budget_max_s = budget_max_s
        self.reference_work = reference_work
        self.work = 0.0
        self.window_s = window_s
        self._clock = clock
        self._pool = pool
        self.queued = 0
        self._answered: deque[tuple[float, int, float]] = deque()  # (when, items, work) of answered requests

    @property
    def full(self) -> bool:
        """No request, however small, fits now."""
        return self.queued >= self.max_items

    def answer_rate(self) -> float:
        """Items answered per second over the last ``window_s`` (0.0 when none were)."""
        now = self._clock()
        while self._answered and self._answered[0][0] < now - self.window_s:
            self._answered.popleft()
        return sum(n for _, n, _ in self._answered) / self.window_s

    def work_rate(self) -> float:
        """Work units answered per second over the last ``window_s`` (0.0 when none were)."""
        self.answer_rate()  # drops what left the window
        return sum(w for _, _, w in self._answered) / self.window_s

    def retry_after_s(self, items: int) -> int:
        """Whole seconds until a request of ``items`` would fit and start, within the bounds above.

        The larger of two drain times, each from a measured rate:

        * room: ``queued + items - max_items`` items must be answered before ``items`` fit, at the rate items were
          answered over the last ``window_s``;
        * backlog: the items already waiting for a worker (``pool.queued_items``) start before anything sent now,
          at the pool's rate (``pool.items_per_s``). Coming back sooner only queues the batch behind them, where
          its request budget runs out.

        A drain time whose rate is unknown (nothing answered or finished yet) is left out; with neither known,
        :data:`UNKNOWN_RATE_RETRY_AFTER_S`.
        """
        waits: list[float] = []
        rate = self.answer_rate()
        if rate > 0:
            waits.append((self.queued + items - self.max_items) / rate)
        pool = self._pool()
        if pool is not None:
            backlog, pool_rate = pool.queued_items, pool.items_per_s
            if backlog > 0 and pool_rate > 0:
                waits.append(backlog / pool_rate)
        if not waits:
            return UNKNOWN_RATE_RETRY_AFTER_S
        return max(MIN_RETRY_AFTER_S, min(MAX_RETRY_AFTER_S, math.ceil(max(waits))))

    def refusal(self, items: int) -> QueueFull:
        """The :class:`QueueFull` for a request of ``items`` refused now."""
        return QueueFull(items, self.queued, self.max_items, self.retry_after_s(items))

    def work_fits(self, work: float) -> bool:
        """``work`` more units fit under ``max_work`` now (always, with no bound; alone, whatever its size)."""
        return self.max_work is None or self.work == 0 or self.work + work <= self.max_work

    def work_refusal(self, items: int, work: float) -> QueueFull:
        """The :class:`QueueFull` for a request of ``work`` units that does not fit now."""
        assert self.max_work is not None
        retry_after_s = self.retry_after_s(items)
        rate = self.work_rate()
        if rate > 0:  # the queued work that must drain before this fits, at the rate work was answered
            wait = (self.work + work - self.max_work) / rate
            retry_after_s = max(retry_after_s, min(MAX_RETRY_AFTER_S, math.ceil(wait)))
        return QueueFull(work, self.work, self.max_work, retry_after_s, what="work units")

    def scaled_budget_s(self, work: float) -> float | None:
        """The budget of a request of ``work`` units admitted now, in seconds.

        ``budget_s`` is what a request gets when the work queued ahead of it plus its own is at most
        ``reference_work``; beyond that the budget grows in proportion, up to ``budget_max_s``. So a request admitted
        behind a long queue gets the time to wait for it, rather than expiring items that never started.
        """
        if self.budget_s is None:
            return None
        scaled = self.budget_s * max(1.0, (self.work + work) / self.reference_work)
        return min(scaled, max(self.budget_s, self.budget_max_s or self.budget_s))

    @contextlib.contextmanager
    def admit(self, items: int, work: float = 0.0) -> Iterator[float | None]:
        """Hold ``items`` and ``work`` units of the budget while the block runs (all of them or none); the block
        gets the request's budget in seconds (:meth:`scaled_budget_s`, ``None`` without one).

        Raises:
            QueueFull: they do not fit now.
        """
        if self.queued + items > self.max_items:
            raise self.refusal(items)
        if not self.work_fits(work):
            raise self.work_refusal(items, work)
        budget_s = self.scaled_budget_s(work)
        self.queued += items
        self.work += work
        try:
            yield budget_s
        finally:
            self.queued -= items
            self.work -= work
            if self.queued == 0:
                self.work = 0.0  # no float drift once empty
            self._answered.append((self._clock(), items, work))


@dataclass(eq=False)
class InFlight:
    """One request in flight, for the drain: its arrival order, its work once admitted (``None`` before), and the
    event that tells its middleware to end it whole (a 503 if nothing was sent yet)."""

    seq: int
    work: float | None = None
    cut: asyncio.Event = field(default_factory=asyncio.Event)


class Drain:
    """The server's drain: requests in flight, and the state SIGTERM moves through.

    ``draining`` is True from the signal on: the middleware refuses new requests with 503 and ``/readyz`` answers
    503. The requests in flight are then kept **in arrival order** while their admitted work fits what the server
    answers in ``RLVR_DRAIN_S`` at the measured work rate (``work_rate``); the later ones are ended whole at once
    (503 with ``Retry-After``, their items unscored, so their client sends the whole batch elsewhere) and their
    workers go to the kept ones. A drain so leaves whole groups: a trainer gets each batch whole or not at all,
    rather than every batch with a share of ``cancelled`` items. With no rate measured yet, every request is kept.
    ``stop`` is set once ``RLVR_DRAIN_S`` has passed with requests still running: scoring then returns its
    unfinished items as ``cancelled``. ``force`` is set :data:`CANCEL_GRACE_S` later: whatever is still running is
    cancelled and answered 503.
    """

    def __init__(self, work_rate: Callable[[], float] = lambda: 0.0) -> None:
        self.draining = False
        self.in_flight = 0
        self.stop = asyncio.Event()
        self.force = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._work_rate = work_rate
        self._seq = 0
        self._requests: dict[int, InFlight] = {}

    @contextlib.contextmanager
    def request(self) -> Iterator[InFlight]:
        """Count one request as in flight while the block runs; the block gets its :class:`InFlight`."""
        self.in_flight += 1
        self._seq += 1
        entry = InFlight(self._seq)
        self._requests[entry.seq] = entry
        self._idle.clear()
        try:
            yield entry
        finally:
            del self._requests[entry.seq]
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    def cut_later_requests(self, drain_s: float) -> int:
        """End whole the requests that arrived after those whose work fits ``drain_s`` at the measured rate;
        returns how many were ended. A request not admitted yet (its work unknown) is ended once anything is."""
        rate = self._work_rate()
        if rate <= 0:
            return 0
        room, kept, cut = rate * drain_s, 0.0, 0
        for entry in (self._requests[seq] for seq in sorted(self._requests)):
            if entry.work is None:
                continue  # not admitted yet: decided below
            if cut or kept + entry.work > room:
                entry.cut.set()
                cut += 1
            else:
                kept += entry.work
        if cut:
            for entry in self._requests.values():
                if entry.work is None:
                    entry.cut.set()
                    cut += 1
        return cut

    async def run(self, drain_s: float) -> None:
        """Drain: refuse new work, let requests in flight finish within ``drain_s``, then cancel what is left."""
        self.draining = True
        start = time.monotonic()
        logger.warning(
            "draining: %d request(s) in flight get up to %g s to finish (RLVR_DRAIN_S); new ones get 503",
            self.in_flight,
            drain_s,
        )
        cut = self.cut_later_requests(drain_s)
        if cut:
            logger.warning("drain: %d later request(s) ended whole (503), to finish the earlier ones whole", cut)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), drain_s)
        if self.in_flight:
            logger.warning("drain: %g s passed; cancelling the items of %d request(s)", drain_s, self.in_flight)
            self.stop.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), CANCEL_GRACE_S)
        if self.in_flight:
            logger.warning("drain: cancelling %d request(s) that did not answer (503)", self.in_flight)
            self.force.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), CANCEL_GRACE_S)
        logger.warning("drained in %.1f s; shutting down", time.monotonic() - start)


_HANDLED = (signal.SIGTERM, signal.SIGINT)


def install_drain_on_sigterm(drain: Drain, drain_s: float) -> Callable[[], None]:
    """Make the first SIGTERM (or SIGINT) of this process run ``drain`` before the server's own shutdown.

    The handler in place (uvicorn's, which starts its graceful shutdown) is kept: when the drain is over it is put
    back and the signal raised again, so uvicorn shuts down as it would have, with nothing left in flight. A second
    signal during the drain goes straight to it (so a second Ctrl+C still forces the exit). This works under any
    server that handles the signal with ``signal.signal`` (``python -m reward_server``, ``uvicorn --workers N``).

    Call it from the running event loop, in the main thread; elsewhere (a test's ``TestClient``) it does nothing.
    Returns a function that puts the previous handlers back (the lifespan calls it at shutdown).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in _HANDLED}
    started: list[int] = []
    tasks: set[asyncio.Task[None]] = set()

    def restore() -> None:
        for sig, handler in previous.items():
            if signal.getsignal(sig) is on_signal:
                signal.signal(sig, handler)

    async def drain_then_exit(sig: int) -> None:
        try:
            await drain.run(drain_s)
        finally:
            restore()
            signal.raise_signal(sig)

    def on_signal(sig: int, frame: FrameType | None) -> None:
        if started:  # a second signal: the server's own handler decides (uvicorn forces the exit on a 2nd SIGINT)
            handler = previous[sig]
            if callable(handler):
                handler(sig, frame)
            return
        started.append(sig)

        def start() -> None:
            # A context of its own: not that of the request the signal happened to interrupt.
            task = loop.create_task(drain_then_exit(sig), context=contextvars.Context())
            tasks.add(task)  # a reference, so the task is not collected mid-drain
            task.add_done_callback(tasks.discard)

        # A signal handler runs between two bytecodes of the main thread, maybe inside the loop's own code:
        # hand the drain to the loop rather than touch it from here.
        loop.call_soon_threadsafe(start)

    for sig in _HANDLED:
        signal.signal(sig, on_signal)
    return restore
