"""The pool's fair-share queue on its own: no processes, no clock (the time is passed in), so each policy is a
row of a table with its values worked out by hand, and the whole file runs in milliseconds.

The policy (reward_server/engine/pool/fair_queue.py): a free worker takes the oldest piece of the waiting flow
with the least effective service (worker seconds of its finished pieces, plus ``now - started_at`` of its
running ones), ties to the older flow; a new flow starts at the least effective service of the flows waiting
now; a piece handed back goes to the front of its flow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from reward_server.engine.pool.fair_queue import (
    FairQueue,
    Flow,
    Job,
    Piece,
    TaskOutcome,
    TaskStatus,
    effective_service,
)

OK = TaskOutcome(TaskStatus.OK, value=1)
GONE = TaskOutcome(TaskStatus.CANCELLED, detail="the request ended")


def job(flow: Flow, n: int = 1) -> Job:
    """A job of ``n`` items in ``flow``, as :meth:`WorkerPool.run` makes it (no future: nobody waits here)."""
    j = Job(flow, [None] * n, [1.0] * n, None, [None] * n, n)
    flow.jobs.add(j)
    return j


def flows_with_service(queue: FairQueue, services: list[float]) -> list[Flow]:
    flows = [queue.open_flow(0.0) for _ in services]
    for flow, service_s in zip(flows, services, strict=True):
        flow.service_s = service_s
    return flows


def run_since(flow: Flow, started_at: float) -> Piece:
    """A piece of ``flow`` on a worker since ``started_at``."""
    piece = Piece(job(flow), [0], started_at=started_at)
    flow.running.add(piece)
    return piece


# (reason, service_s per flow (flow "a" opened first, then "b", ...), the pieces in enqueue order (a tag's letter
# is its flow; a trailing "<" enqueues it at the front), running pieces ({flow: started_at}), now, pick order).
PICKS = [
    ("the flow with the least service goes first", [2.0, 0.5], "a1 b1", {}, 0.0, "b1 a1"),
    ("a tie goes to the older flow, whatever the enqueue order", [1.0, 1.0], "b1 a1", {}, 0.0, "a1 b1"),
    (
        "a flow's pieces go oldest first; a pick at the same instant costs nothing",
        [0.0, 5.0],
        "a1 a2 b1",
        {},
        0.0,
        "a1 a2 b1",
    ),
    ("a running piece counts its time so far: 0 + (3 - 0) = 3 > 1", [0.0, 1.0], "a1 b1", {0: 0.0}, 3.0, "b1 a1"),
    ("a piece that starts now costs nothing yet: 0 + (3 - 3) = 0 < 1", [0.0, 1.0], "a1 b1", {0: 3.0}, 3.0, "a1 b1"),
    ("running time can tie: 0.5 + (2 - 1.5) = 1 = 1, the older flow wins", [0.5, 1.0], "b1 a1", {0: 1.5}, 2.0, "a1 b1"),
    ("a piece handed back goes ahead of its flow's older pieces", [0.0], "a1 a2 a0<", {}, 0.0, "a0 a1 a2"),
    ("a piece handed back does not jump a flow with less service", [1.0, 0.0], "a1 a0< b1", {}, 0.0, "b1 a0 a1"),
    ("three flows: least service first (0.2 < 0.7 < 3)", [3.0, 0.7, 0.2], "a b c", {}, 0.0, "c b a"),
    ("nothing queued: no piece", [0.0], "", {}, 0.0, ""),
]


@pytest.mark.parametrize(("reason", "services", "queued", "running", "now", "order"), PICKS, ids=[c[0] for c in PICKS])
def test_pick_order(
    reason: str, services: list[float], queued: str, running: dict[int, float], now: float, order: str
) -> None:
    queue = FairQueue()
    flows = flows_with_service(queue, services)
    for i, started_at in running.items():
        run_since(flows[i], started_at)
    tags: dict[int, str] = {}
    for tag in queued.split():
        piece = Piece(job(flows[ord(tag[0]) - ord("a")]), [0])
        tags[id(piece)] = tag.rstrip("<")
        queue.enqueue(piece, front=tag.endswith("<"))
    assert queue.queued == len(queued.split()) and bool(queue) == bool(queued)
    picked = []
    while (next_piece := queue.pick(now)) is not None:
        assert next_piece.started_at == now and next_piece in next_piece.job.flow.running
        picked.append(tags[id(next_piece)])
    assert picked == order.split()
    assert queue.queued == 0 and not queue and queue.flows == []


@dataclass
class OpenCase:
    reason: str
    waiting: list[tuple[float, float | None]]  # per waiting flow: (service_s, started_at of a running piece)
    now: float
    service_s: float  # the new flow's
    busy: list[float] = field(default_factory=list)  # flows with running pieces only (started_at), not waiting


OPENS = [
    OpenCase("nobody waits: a new flow starts at 0", [], 5.0, 0.0),
    OpenCase("level with the least of the waiting flows", [(2.0, None), (5.0, None)], 1.0, 2.0),
    OpenCase("a waiting flow's running piece counts: 2 + (4 - 1) = 5 < 6", [(2.0, 1.0), (6.0, None)], 4.0, 5.0),
    OpenCase("a flow that only runs (nothing pending) does not wait: 0", [], 10.0, 0.0, busy=[0.0]),
    OpenCase("only waiting flows set the level, not a busy one", [(4.0, None)], 10.0, 4.0, busy=[0.0]),
]


@pytest.mark.parametrize("case", OPENS, ids=[c.reason for c in OPENS])
def test_a_new_flow_starts_level_with_those_waiting(case: OpenCase) -> None:
    queue = FairQueue()
    for busy_since in case.busy:
        run_since(queue.open_flow(0.0), busy_since)
    for service_s, running_since in case.waiting:
        flow = queue.open_flow(0.0)
        flow.service_s = service_s
        if running_since is not None:
            run_since(flow, running_since)
        queue.enqueue(Piece(job(flow), [0]))
    seqs = {f.seq for f in queue.flows}
    new = queue.open_flow(case.now)
    assert new.service_s == case.service_s
    assert new.seq > max(seqs, default=-1) and not new.pending and not new.running


# One worker, flow A with a backlog, flow B opened while A runs: each step is (action, argument, now) and what
# it gives. Hand-computed: B opens at A's effective service then (0 + 0.5 - 0 = 0.5); when a1 is charged A has
# 1 s, so B (0.5) goes next; when b1 is charged B has 0.5 + 1 = 1.5 > 1, so A goes next; and so on.
BACKLOG = [
    ("pick", "a1", 0.0),
    ("open_b", 0.5, 0.5),  # B's service_s
    ("charge", "a1", 1.0),
    ("pick", "b1", 1.0),
    ("charge", "b1", 2.0),
    ("pick", "a2", 2.0),  # A 1 < B 1.5
    ("charge", "a2", 3.0),  # A 2
    ("pick", "b2", 3.0),  # B 1.5 < A 2
    ("charge", "b2", 3.25),  # B 1.75
    ("pick", "b3", 3.25),  # B 1.75 < A 2: a short job does not lose its turn
    ("charge", "b3", 3.5),  # B 2 = A 2: the older flow
    ("pick", "a3", 3.5),
]


def test_a_new_flow_goes_ahead_of_a_long_backlog_step_by_step() -> None:
    queue = FairQueue()
    a = queue.open_flow(0.0)
    pieces: dict[str, Piece] = {}
    for tag in ("a1", "a2", "a3"):
        pieces[tag] = Piece(job(a), [0])
        queue.enqueue(pieces[tag])
    b: Flow | None = None
    for action, arg, now in BACKLOG:
        if action == "open_b":
            b = queue.open_flow(now)
            assert b.service_s == arg
            for tag in ("b1", "b2", "b3"):
                pieces[tag] = Piece(job(b), [0])
                queue.enqueue(pieces[tag])
        elif action == "pick":
            assert queue.pick(now) is pieces[str(arg)], (action, arg, now)
        else:
            queue.charge(pieces[str(arg)], now)
            assert pieces[str(arg)] not in pieces[str(arg)].job.flow.running
    assert b is not None
    assert (a.service_s, effective_service(a, 4.0)) == (2.0, 2.5)  # a3 runs since 3.5
    assert (b.service_s, effective_service(b, 4.0)) == (2.0, 2.0)


SETTLES = [
    ("one of two items: not resolved yet", 2, [[(0, OK)]], [False], 1),
    ("both at once: resolved", 2, [[(0, OK), (1, OK)]], [True], -1),
    ("in two parts: resolved by the second", 2, [[(1, OK)], [(0, OK)]], [False, True], -1),
    ("an item's first outcome counts; a repeat changes nothing", 2, [[(0, OK)], [(0, GONE)]], [False, False], 1),
    ("no results: nothing changes", 1, [[]], [False], 1),
]


@pytest.mark.parametrize(("reason", "n", "batches", "resolved", "remaining"), SETTLES, ids=[s[0] for s in SETTLES])
def test_settle(reason: str, n: int, batches: list, resolved: list[bool], remaining: int) -> None:
    queue = FairQueue()
    flow = queue.open_flow(0.0)
    j = job(flow, n)
    piece = Piece(j, list(range(n)))
    assert [queue.settle(piece, batch) for batch in batches] == resolved
    assert j.remaining == remaining
    first = {pos: o for batch in reversed(batches) for pos, o in batch}
    assert j.outcomes == [first.get(i) for i in range(n)]
    assert (j in flow.jobs) == (remaining != -1)


def test_settle_maps_positions_in_a_piece_to_the_jobs_indices() -> None:
    queue = FairQueue()
    j = job(queue.open_flow(0.0), 4)
    rest = Piece(j, [1, 3])  # a piece handed back holds the job's unfinished indices
    assert not queue.settle(rest, [(1, OK)])
    assert j.outcomes == [None, None, None, OK]


def test_charge_adds_the_time_the_piece_held_a_worker() -> None:
    queue = FairQueue()
    flow = queue.open_flow(0.0)
    flow.service_s = 1.0
    queue.enqueue(Piece(job(flow), [0]))
    piece = queue.pick(2.0)
    assert piece is not None and effective_service(flow, 2.5) == 1.5
    queue.charge(piece, 2.75)
    assert flow.service_s == 1.75 and not flow.running and effective_service(flow, 9.0) == 1.75


def test_cancelling_a_flow_drops_its_pieces_and_returns_those_on_workers() -> None:
    queue = FairQueue()
    a, b = queue.open_flow(0.0), queue.open_flow(0.0)
    ja1, ja2, jb = job(a, 3), job(a, 2), job(b, 1)
    queue.enqueue(Piece(ja1, [0, 1, 2]))
    queue.enqueue(Piece(ja2, [0, 1]))
    queue.enqueue(Piece(jb, [0]))
    on_worker = queue.pick(0.0)  # A first (tie, older): ja1's piece
    assert on_worker is not None and on_worker.job is ja1 and queue.queued == 3
    assert queue.settle(on_worker, [(0, OK)]) is False

    ended = queue.cancel_flow(a, GONE)

    assert [(j, running) for j, running in ended] in ([(ja1, [on_worker]), (ja2, [])], [(ja2, []), (ja1, [on_worker])])
    assert ja1.outcomes == [OK, GONE, GONE] and ja2.outcomes == [GONE, GONE]
    assert ja1.remaining == ja2.remaining == -1 and not a.jobs and not a.pending
    assert queue.queued == 1 and queue.flows == [b]  # B untouched
    assert queue.pick(0.0) is not None and queue.cancel_flow(a, GONE) == []  # nothing left to end


def test_cancelling_one_job_keeps_the_flows_other_pieces() -> None:
    queue = FairQueue()
    a = queue.open_flow(0.0)
    j1, j2 = job(a, 2), job(a, 1)
    queue.enqueue(Piece(j1, [0, 1]))
    queue.enqueue(Piece(j2, [0]))
    queue.enqueue(Piece(j1, [1]), front=True)
    assert queue.cancel_job(j1, GONE) == []
    assert [p.job for p in a.pending] == [j2] and queue.queued == 1 and queue.flows == [a]
    assert queue.cancel_job(j1, GONE) is None  # resolved already
    assert queue.cancel_job(j2, GONE) == [] and queue.queued == 0 and not queue
