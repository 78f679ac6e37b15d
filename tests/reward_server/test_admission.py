"""Admission control and the drain, without a server: the item budget, Retry-After, and score_batch's stop."""

from __future__ import annotations

import asyncio
import time

import pytest

from reward_server import admission
from reward_server.admission import Drain, InFlight, ItemBudget, QueueFull
from reward_server.engine.batch import score_batch
from reward_server.engine.resolve import validate_batch
from reward_server.engine.runtime import scoring_runtime
from reward_server.schemas.rewards import RewardItem
from reward_server.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_batch_is_admitted_whole_or_refused_whole() -> None:
    budget = ItemBudget(100, clock=Clock())
    with budget.admit(60):
        assert budget.queued == 60
        with pytest.raises(QueueFull), budget.admit(41):  # 60 + 41 > 100: none of the 41 is taken
            pass
        assert budget.queued == 60
        with budget.admit(40):  # exactly to the bound
            assert budget.queued == 100 and budget.full
    assert budget.queued == 0


@pytest.mark.parametrize(
    ("answered", "queued", "asked", "expected_s", "reason"),
    [
        # 50 items answered in the 10 s window: 5 items/s; 80 queued + 40 asked - 100 = 20 too many: 4 s.
        (50, 80, 40, 4, "excess / rate, rounded up"),
        # 30 items/10 s = 3/s; 20 too many: 6.67 s -> 7.
        (30, 80, 40, 7, "rounded up to whole seconds"),
        # 1000 items/10 s = 100/s; 1 too many: 0.01 s -> the floor of 1 s.
        (1000, 100, 1, 1, "at least 1 s"),
        # 10 items/10 s = 1/s; 500 too many: capped at 60 s.
        (10, 100, 500, 60, "at most 60 s"),
        (0, 100, 1, admission.UNKNOWN_RATE_RETRY_AFTER_S, "nothing answered yet: a fixed guess"),
    ],
)
def test_retry_after_comes_from_the_answer_rate(
    answered: int, queued: int, asked: int, expected_s: int, reason: str
) -> None:
    clock = Clock()
    budget = ItemBudget(100, clock=clock)
    while answered:  # requests answered just now
        n = min(answered, budget.max_items)
        with budget.admit(n):
            pass
        answered -= n
    budget.queued = queued
    assert budget.retry_after_s(asked) == expected_s, reason
    refusal = budget.refusal(asked)
    assert refusal.retry_after_s == expected_s and "RLVR_MAX_QUEUED_ITEMS" in str(refusal)


class FakePool:
    """What admission reads of a worker pool, set by hand."""

    def __init__(self, queued_items: int, items_per_s: float) -> None:
        self.queued_items = queued_items
        self.items_per_s = items_per_s


@pytest.mark.parametrize(
    ("backlog", "pool_rate", "expected_s", "reason"),
    [
        # Room: 50 answered / 10 s = 5 items/s, 100 queued + 20 asked - 100 = 20 too many: 4 s. Backlog: 12 / 3 = 4 s.
        (12, 3.0, 4, "both 4 s"),
        (30, 3.0, 10, "30 items waiting at 3/s: 10 s, longer than the room's 4 s"),
        (90, 3.0, 30, "three times the backlog, three times the wait"),
        (151, 3.0, 51, "151 / 3 = 50.3 s, rounded up"),
        (900, 3.0, 60, "300 s, capped at 60 s"),
        (0, 3.0, 4, "no backlog: the room's 4 s"),
        (500, 0.0, 4, "the pool has finished nothing yet: its rate is unknown, the room's 4 s stands"),
    ],
)
def test_a_bigger_backlog_gives_a_longer_retry_after(
    backlog: int, pool_rate: float, expected_s: int, reason: str
) -> None:
    pool = FakePool(backlog, pool_rate)
    budget = ItemBudget(100, clock=Clock(), pool=lambda: pool)
    with budget.admit(50):  # 50 items answered just now: 5 items/s over the 10 s window
        pass
    with budget.admit(100):
        assert budget.retry_after_s(20) == expected_s, reason
        with pytest.raises(QueueFull) as refused, budget.admit(20):
            pass
        assert refused.value.retry_after_s == expected_s


def test_retry_after_with_only_the_pool_rate_known() -> None:
    # Nothing answered in the window (long requests), but the pool drains 8 items/s with 200 waiting: 25 s.
    budget = ItemBudget(100, clock=Clock(), pool=lambda: FakePool(200, 8.0))
    budget.queued = 100
    assert budget.retry_after_s(1) == 25
    assert ItemBudget(100, clock=Clock(), pool=lambda: None).retry_after_s(1) == admission.UNKNOWN_RATE_RETRY_AFTER_S


def test_answers_older_than_the_window_do_not_count() -> None:
    clock = Clock()
    budget = ItemBudget(100, clock=clock)
    with budget.admit(50):
        pass
    clock.now += 11.0  # past the 10 s window
    assert budget.answer_rate() == 0.0
    with budget.admit(20):
        pass
    assert budget.answer_rate() == pytest.approx(2.0)  # 20 items / 10 s


async def test_drain_waits_for_requests_in_flight() -> None:
    drain = Drain()

    async def request(seconds: float) -> None:
        with drain.request():
            await asyncio.sleep(seconds)

    task = asyncio.ensure_future(request(0.2))
    await asyncio.sleep(0)
    await drain.run(5.0)
    assert task.done() and drain.draining
    assert not drain.stop.is_set() and not drain.force.is_set()


async def test_drain_stops_then_forces_what_outlives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission, "CANCEL_GRACE_S", 0.1)
    drain = Drain()
    saw: list[str] = []

    async def stubborn() -> None:
        with drain.request():
            await drain.stop.wait()
            saw.append("stop")
            await drain.force.wait()
            saw.append("force")

    task = asyncio.ensure_future(stubborn())
    await asyncio.sleep(0)
    await drain.run(0.05)
    assert saw == ["stop", "force"]
    task.cancel()


async def test_drain_keeps_the_earliest_requests_whole_and_ends_the_later_ones() -> None:
    # 100 work units answered per second; a drain of 2 s: 200 units fit.
    drain = Drain(work_rate=lambda: 100.0)
    entered: list[InFlight] = []
    release = asyncio.Event()

    async def request(work: float | None) -> str:
        with drain.request() as entry:
            entry.work = work
            entered.append(entry)
            cut = asyncio.ensure_future(entry.cut.wait())
            done = asyncio.ensure_future(release.wait())
            await asyncio.wait({cut, done}, return_when=asyncio.FIRST_COMPLETED)
            cut.cancel()
            done.cancel()
            return "cut" if entry.cut.is_set() else "finished"

    # In arrival order: 120 + 60 units fit; 40 more do not, and neither does anything after (20 would on its
    # own: the drain keeps arrival order, never a later request in place of an earlier one); one not admitted yet.
    tasks = [asyncio.ensure_future(request(w)) for w in (120.0, 60.0, 40.0, 20.0, None)]
    await asyncio.sleep(0)
    assert drain.cut_later_requests(2.0) == 3
    release.set()
    assert await asyncio.gather(*tasks) == ["finished", "finished", "cut", "cut", "cut"]
    assert [e.seq for e in entered] == [1, 2, 3, 4, 5]


def test_with_no_measured_rate_the_drain_keeps_every_request() -> None:
    drain = Drain()
    with drain.request() as entry:
        entry.work = 1e9
        assert drain.cut_later_requests(30.0) == 0 and not entry.cut.is_set()


# Cancels to 4, which only ten-billion-digit arithmetic could show: it runs until its deadline (20 s here).
HANG = "\\boxed{10^{10^{10}} - 10^{10^{10}} + 4}"


async def test_score_batch_returns_unfinished_items_as_cancelled() -> None:
    settings = Settings(math_workers=2, math_timeout_s=20, preload_language_models=False, sandbox_pool_size=1)
    items = [
        RewardItem(id="a", response="\\boxed{4}", ground_truth="4"),
        RewardItem(id="c", response="\\boxed{5}", ground_truth="4"),
        RewardItem(id="b", response=HANG, ground_truth="4"),
        RewardItem(id="d", response=HANG, ground_truth="4"),
    ]
    async with scoring_runtime(settings) as ctx:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(3.0, stop.set)
        start = time.monotonic()
        results = await score_batch(items, validate_batch(items, None, None), ctx, drain_stop=stop)
        took_s = time.monotonic() - start
    assert [r.id for r in results] == ["a", "c", "b", "d"]
    assert [(r.reward, r.status) for r in results] == [
        (1.0, "ok"),
        (0.0, "ok"),
        (None, "cancelled"),
        (None, "cancelled"),
    ]
    accuracy = results[2].components["accuracy"]
    assert accuracy.status == "cancelled" and accuracy.score is None and "RLVR_DRAIN_S" in (accuracy.detail or "")
    assert took_s < 15  # answered at the stop, not after the hangs' 20 s deadline
