"""The worker pool: deadlines, replacement of stuck and dead workers, affinity, and no lost tasks."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from reward_server.workers import TaskStatus, WorkerPool

HANDLER = "tests.reward_server.pool_handlers:handle"


@pytest.fixture
async def pool():
    restarts: list[str] = []
    p = WorkerPool(HANDLER, 2, name="test", on_restart=restarts.append)
    await p.start(timeout_s=60)
    p.restart_reasons = restarts  # type: ignore[attr-defined]
    yield p
    await p.close()


async def test_results_come_back_in_order(pool: WorkerPool) -> None:
    outcomes = await asyncio.gather(*(pool.submit({"op": "echo", "value": i}, timeout_s=5) for i in range(50)))
    assert [o.value["value"] for o in outcomes] == list(range(50))
    assert all(o.status is TaskStatus.OK for o in outcomes)
    # Both workers took part.
    assert len({o.value["pid"] for o in outcomes}) == 2


async def test_hang_times_out_and_worker_is_replaced(pool: WorkerPool) -> None:
    start = time.monotonic()
    outcome = await pool.submit({"op": "spin", "seconds": 30}, timeout_s=0.5)
    elapsed = time.monotonic() - start
    assert outcome.status is TaskStatus.TIMEOUT
    assert elapsed < 2.0
    assert pool.restart_reasons == ["timeout"]  # type: ignore[attr-defined]
    # The pool still serves, on both slots.
    outcomes = await asyncio.gather(*(pool.submit({"op": "echo", "value": i}, timeout_s=5) for i in range(10)))
    assert [o.value["value"] for o in outcomes] == list(range(10))


async def test_deadline_counts_run_time_not_queueing(pool: WorkerPool) -> None:
    # Four 0.4 s tasks on two workers: the last two wait ~0.4 s in the queue but must not time out.
    outcomes = await asyncio.gather(*(pool.submit({"op": "sleep", "seconds": 0.4}, timeout_s=0.7) for _ in range(4)))
    assert [o.status for o in outcomes] == [TaskStatus.OK] * 4


async def test_crash_costs_one_task_only(pool: WorkerPool) -> None:
    tasks = [pool.submit({"op": "echo", "value": i}, timeout_s=5) for i in range(5)]
    tasks.insert(2, pool.submit({"op": "die"}, timeout_s=5))
    outcomes = await asyncio.gather(*tasks)
    statuses = [o.status for o in outcomes]
    assert statuses[2] is TaskStatus.CRASHED
    assert "exit code 3" in (outcomes[2].detail or "")
    assert statuses.count(TaskStatus.OK) == 5
    assert pool.restart_reasons == ["crash"]  # type: ignore[attr-defined]


async def test_handler_exception_keeps_worker(pool: WorkerPool) -> None:
    outcome = await pool.submit({"op": "raise"}, timeout_s=5)
    assert outcome.status is TaskStatus.CRASHED and "ValueError: handler bug" in (outcome.detail or "")
    assert pool.restart_reasons == []  # type: ignore[attr-defined]


async def test_affinity_keeps_a_key_on_one_worker(pool: WorkerPool) -> None:
    # Two keys, 20 tasks each, submitted interleaved: each key should stay (almost) on one worker.
    keys = ["gold-a", "gold-b"] * 20
    outcomes = await asyncio.gather(
        *(pool.submit({"op": "sleep", "seconds": 0.005}, timeout_s=5, affinity_key=k) for k in keys)
    )
    for key in ("gold-a", "gold-b"):
        pids = Counter(o.value["pid"] for k, o in zip(keys, outcomes, strict=True) if k == key)
        # Work stealing at the tail may move a task or two, but each key has a home worker.
        assert pids.most_common(1)[0][1] >= 16, pids


async def test_close_cancels_queued_tasks() -> None:
    p = WorkerPool(HANDLER, 1, name="test")
    await p.start(timeout_s=60)
    running = asyncio.ensure_future(p.submit({"op": "sleep", "seconds": 5}, timeout_s=10))
    queued = asyncio.ensure_future(p.submit({"op": "echo", "value": 1}, timeout_s=10))
    await asyncio.sleep(0.2)
    await p.close()
    assert (await running).status is TaskStatus.CANCELLED
    assert (await queued).status is TaskStatus.CANCELLED
    with pytest.raises(RuntimeError):
        await p.submit({"op": "echo", "value": 1}, timeout_s=1)


async def test_workers_that_cannot_start_fail_the_pool_instead_of_respawning() -> None:
    p = WorkerPool("tests.reward_server.pool_broken:handle", 2, name="broken")
    with pytest.raises(RuntimeError, match="exited with code 7 before it was ready"):
        await p.start(timeout_s=60)
    assert p.restarts == 0


@pytest.mark.parametrize("loop_factory", ["asyncio", "uvloop"])
def test_payloads_and_results_larger_than_a_pipe_buffer(loop_factory: str) -> None:
    """uvicorn runs on uvloop, which makes watched fds non-blocking: large messages must still go through."""
    import uvloop

    async def main() -> list:
        p = WorkerPool(HANDLER, 2, name="big")
        await p.start(timeout_s=60)
        try:
            blob = "y" * 3_000_000
            return await asyncio.gather(
                *(p.submit({"op": "big", "size": 2_000_000, "blob": blob}, timeout_s=10) for _ in range(6))
            )
        finally:
            await p.close()

    factory = uvloop.new_event_loop if loop_factory == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        outcomes = runner.run(main())
    assert [o.status for o in outcomes] == [TaskStatus.OK] * 6
    assert all(o.value["echo_len"] == 3_000_000 and len(o.value["blob"]) == 2_000_000 for o in outcomes)
