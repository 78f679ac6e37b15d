"""The pool's fair-share queue, pure: flows, their jobs and pieces, and which piece a free worker takes next.

Start-time fair queueing over worker time: a free worker takes the oldest piece of the flow with the least
*effective service* (the worker seconds its finished pieces used, plus the time its running pieces have run
so far); ties go to the older flow (the lower ``seq``). A new flow starts level with the flows waiting now
(the least effective service among them), so it gets no credit for the time before it came, and goes ahead
of a long backlog. A piece handed back (its worker stopped early or died) goes to the front of its flow.

Nothing here starts a process or a thread, waits, or reads a clock: the caller passes ``now`` (seconds on
one monotonic clock) and holds its own lock around every call. :mod:`.supervisor` drives the workers and
:mod:`.facade` resolves what callers wait for; both call in here.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


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


class Flow:
    """One request's share of the pool. Open it with :meth:`WorkerPool.open_flow`, pass it to
    :meth:`WorkerPool.run`, and :meth:`WorkerPool.close_flow` it when the request ends (which cancels what
    is left)."""

    def __init__(self, seq: int, service_s: float) -> None:
        self.seq = seq
        # Worker seconds its finished pieces used; the scheduler adds the time of those still running.
        self.service_s = service_s
        self.pending: deque[Piece] = deque()
        self.running: set[Piece] = set()
        self.jobs: set[Job] = set()
        self.closed = False


@dataclass(eq=False)
class Job:
    """What :meth:`WorkerPool.run` waits for: an outcome per payload.

    ``future`` is the caller's handle on the result (the facade's asyncio future); the queue never touches
    it. ``remaining`` counts the items without an outcome, and is -1 once the job is resolved.
    """

    flow: Flow
    payloads: Sequence[Any]
    timeouts_s: Sequence[float]
    future: Any
    outcomes: list[TaskOutcome | None]
    remaining: int


@dataclass(eq=False)
class Piece:
    """The part of a job that one worker takes at once: the job's unfinished indices.

    ``handoffs`` counts the workers in a row that died before taking it up; ``started_at`` is when it was
    picked; ``job_id`` and ``slot`` are the supervisor's (the hand-off's id, and the worker it went to).
    """

    job: Job
    indices: list[int]
    handoffs: int = 0
    started_at: float = 0.0
    job_id: float = 0.0
    slot: Any = None


def effective_service(flow: Flow, now: float) -> float:
    """Worker seconds ``flow`` has had by ``now``: its finished pieces' plus its running pieces' so far."""
    return flow.service_s + sum(now - p.started_at for p in flow.running)


class FairQueue:
    """The waiting pieces of every flow, and the order in which free workers take them (module docstring)."""

    def __init__(self) -> None:
        self._flows: dict[int, Flow] = {}  # flows with pending pieces, oldest first
        self._flow_seq = itertools.count()
        #: Items waiting for a worker (not yet started), over every flow.
        self.queued = 0

    def __bool__(self) -> bool:
        """True while some piece waits for a worker."""
        return bool(self._flows)

    @property
    def flows(self) -> list[Flow]:
        """The flows with pending pieces, oldest first."""
        return list(self._flows.values())

    def open_flow(self, now: float) -> Flow:
        """A new flow, level with the flows waiting at ``now`` (0 worker seconds if none waits)."""
        active = [effective_service(f, now) for f in self._flows.values()]
        return Flow(next(self._flow_seq), min(active, default=0.0))

    def enqueue(self, piece: Piece, front: bool = False) -> None:
        """Queue ``piece`` at the back of its flow, or at the front (a piece handed back)."""
        flow = piece.job.flow
        if front:
            flow.pending.appendleft(piece)
        else:
            flow.pending.append(piece)
        self._flows.setdefault(flow.seq, flow)
        self.queued += len(piece.indices)

    def pick(self, now: float) -> Piece | None:
        """The next piece: the oldest of the flow with the least worker time so far; it runs from ``now``."""
        if not self._flows:
            return None
        flow = min(self._flows.values(), key=lambda f: (effective_service(f, now), f.seq))
        piece = flow.pending.popleft()
        if not flow.pending:
            del self._flows[flow.seq]
        self.queued -= len(piece.indices)
        piece.started_at = now
        flow.running.add(piece)
        return piece

    def charge(self, piece: Piece, now: float) -> None:
        """``piece`` left its worker at ``now``: its flow is charged the worker time it held."""
        piece.job.flow.running.discard(piece)
        piece.job.flow.service_s += now - piece.started_at

    def settle(self, piece: Piece, results: Sequence[tuple[int, TaskOutcome]]) -> bool:
        """Record outcomes (``(position in piece, outcome)``; an item's first outcome counts). True when
        this completed the job: it is then resolved, and the caller hands its outcomes to whoever waits."""
        job = piece.job
        for pos, outcome in results:
            i = piece.indices[pos]
            if job.outcomes[i] is None:
                job.outcomes[i] = outcome
                job.remaining -= 1
        if job.remaining == 0:
            self._resolve(job)
            return True
        return False

    def cancel_job(self, job: Job, outcome: TaskOutcome) -> list[Piece] | None:
        """End ``job`` now: its pending pieces leave the queue and its items without an outcome get
        ``outcome``. Returns the job's pieces still on a worker (for the caller to stop), or ``None`` if the
        job was resolved already."""
        if job.remaining <= 0:
            return None
        flow = job.flow
        kept = deque(p for p in flow.pending if p.job is not job)
        self.queued -= sum(len(p.indices) for p in flow.pending if p.job is job)
        flow.pending = kept
        if not kept:
            self._flows.pop(flow.seq, None)
        running = [piece for piece in flow.running if piece.job is job]
        for i, o in enumerate(job.outcomes):
            if o is None:
                job.outcomes[i] = outcome
        job.remaining = 0
        self._resolve(job)
        return running

    def cancel_flow(self, flow: Flow, outcome: TaskOutcome) -> list[tuple[Job, list[Piece]]]:
        """:meth:`cancel_job` for each of ``flow``'s unresolved jobs: the jobs ended, each with its pieces
        still on a worker."""
        ended = []
        for job in list(flow.jobs):
            running = self.cancel_job(job, outcome)
            if running is not None:
                ended.append((job, running))
        return ended

    @staticmethod
    def _resolve(job: Job) -> None:
        job.flow.jobs.discard(job)
        job.remaining = -1  # resolved once
