"""Admission by work (issue 24): the cost model, the work bound, the scaled budget, and refusal at the door."""

from __future__ import annotations

import asyncio

import pytest
from fastapi.testclient import TestClient
from starlette.types import Receive, Scope, Send

from reward_server.admission import Drain, ItemBudget, QueueFull
from reward_server.app import create_app
from reward_server.engine import work
from reward_server.engine.work import SlowReferences, batch_work, body_work, item_work
from reward_server.middleware import AdmissionGate, note_work
from reward_server.settings import Settings
from tests.reward_server.test_admission import Clock
from tests.reward_server.test_admission_gate import Exchange, _call, _small_app


def test_an_item_costs_its_characters_its_sandbox_and_its_known_slow_reference() -> None:
    assert item_work(40) == 1.0  # a plain item: one unit
    assert item_work(200_000) == 20.0  # 200k characters: 20 units (scenario 2's completions)
    assert item_work(200_000, sandbox=True) == 200.0
    assert item_work(40, slow_reference=True) == 1.0 + work.SLOW_REFERENCE_WORK


def test_slow_references_are_a_bounded_lru() -> None:
    slow = SlowReferences(capacity=2)
    slow.add("a")
    slow.add("b")
    assert "a" in slow  # seen: now the most recent
    slow.add("c")  # evicts b, the least recently seen
    assert "a" in slow and "c" in slow and "b" not in slow
    assert len(slow) == 2
    assert None not in slow and "" not in slow


def test_a_batch_costs_more_once_its_reference_timed_out() -> None:
    slow = SlowReferences()
    refs = ["2^(10^6)", "4", None]
    before = batch_work([10, 10, 10], [False, False, True], refs, slow)
    assert before == 1 + 1 + work.SANDBOX_WORK
    slow.add("2^(10^6)")
    assert batch_work([10, 10, 10], [False, False, True], refs, slow) == before + work.SLOW_REFERENCE_WORK


def test_work_is_admitted_while_it_fits_and_a_large_request_alone() -> None:
    budget = ItemBudget(4096, clock=Clock(), max_work=30_000.0)
    # Scenario 2 scaled to the bound: 1,280 completions of 200k characters are 25,600 units each.
    batch = 1280 * item_work(200_000)
    with budget.admit(1280, batch):
        assert budget.work == batch
        with pytest.raises(QueueFull, match="RLVR_MAX_QUEUED_WORK"), budget.admit(1280, batch):
            pass  # the second is refused whole, at admission, not expired later
        assert budget.work == batch and budget.queued == 1280
    assert budget.work == 0 and budget.queued == 0
    with budget.admit(10, 50_000.0):  # more than the bound, but nothing else is queued: admitted alone
        assert not budget.work_fits(1.0)


def test_retry_after_for_work_comes_from_the_work_answer_rate() -> None:
    clock = Clock()
    budget = ItemBudget(4096, clock=clock, max_work=1000.0)
    with budget.admit(10, 500.0):  # answered now: 500 units in the 10 s window, 50 units/s
        pass
    with budget.admit(10, 900.0), pytest.raises(QueueFull) as refused, budget.admit(10, 600.0):
        pass
    # 900 + 600 - 1000 = 500 units must drain at 50 units/s: 10 s (the item rate alone would say 1 s).
    assert refused.value.retry_after_s == 10


def test_the_budget_scales_with_the_work_queued_ahead_and_its_own() -> None:
    budget = ItemBudget(4096, clock=Clock(), max_work=100_000.0, budget_s=60.0, budget_max_s=300.0, reference_work=4096)
    with budget.admit(256, 256.0) as alone:
        assert alone == 60.0  # within one full batch of plain items: the configured budget
    with budget.admit(1280, 25_600.0) as first:
        assert first == 300.0  # 25,600 / 4,096 x 60 s = 375 s, capped at the maximum
    with budget.admit(1000, 6144.0) as big:
        assert big == pytest.approx(90.0)  # 6,144 / 4,096 x 60 s
        with budget.admit(100, 2048.0) as behind:
            assert behind == pytest.approx(120.0)  # behind 6,144 units: 8,192 / 4,096 x 60 s


def test_a_body_whose_length_is_more_work_than_is_free_is_429_unread() -> None:
    app = _small_app(8.0)
    budget = app.state.budget
    budget.max_work = 100.0
    with budget.admit(1, 90.0):  # 10 units free; a 1 MB body is at least 50 units
        exchange = Exchange([b"{}"])
        _call(app, exchange, {}, length=1_000_000)
        assert exchange.received == 0
        assert exchange.status == 429
        assert "RLVR_MAX_QUEUED_WORK" in exchange.detail
    assert body_work(1_000_000) == 50.0


def test_the_work_settings_are_documented_and_bounded() -> None:
    s = Settings(max_queued_work=5.0, request_budget_max_s=200.0)
    assert s.max_queued_work == 5.0 and s.request_budget_max_s == 200.0
    with pytest.raises(ValueError, match="max_queued_work"):
        Settings(max_queued_work=0)


STUCK = "\\boxed{10^{10^{10}} - 10^{10^{10}} + 1}"  # cancels to 1: only exact arithmetic could tell


def test_a_reference_that_timed_out_is_known_slow_flagged_and_counted() -> None:
    settings = Settings(math_workers=1, math_timeout_s=0.5, preload_language_models=False, sandbox_pool_size=1)
    first = [{"id": "s", "response": STUCK, "ground_truth": "1"}, {"id": "n", "response": "7", "ground_truth": "7"}]
    again = [
        {"id": "t", "response": "\\boxed{1}", "ground_truth": "1"},
        {"id": "m", "response": "7", "ground_truth": "7"},
    ]
    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/rewards", json={"items": first})
        assert r.status_code == 200
        assert r.headers["X-RLVR-Budget-S"] == "60"  # two plain items: the configured budget
        by_id = {x["id"]: x for x in r.json()["results"]}
        assert by_id["s"]["status"] == "timeout"
        assert "slow_reference" not in by_id["s"]["components"]["accuracy"]["info"]  # not known before
        r = client.post("/v1/rewards", json={"items": again})
        by_id = {x["id"]: x for x in r.json()["results"]}
        assert by_id["t"]["reward"] == 1.0
        assert by_id["t"]["components"]["accuracy"]["info"]["slow_reference"] is True
        assert "slow_reference" not in by_id["m"]["components"]["accuracy"]["info"]
        metrics = client.get("/metrics").text
        assert "rlvr_slow_reference_items_total 1.0" in metrics


def test_a_request_the_drain_ends_whole_is_answered_503_unscored() -> None:
    drain = Drain(work_rate=lambda: 10.0)  # 10 units/s: a 1 s drain keeps 10 units
    gate_budget = ItemBudget(100)
    scored: list[str] = []

    async def scoring(scope: Scope, receive: Receive, send: Send) -> None:
        note_work(scope, float(scope["work"]))  # what the router does once it admits the batch
        await asyncio.sleep(0.3)
        scored.append(scope["name"])

    gate = AdmissionGate(scoring, gate_budget, drain, body_timeout_s=10)

    async def run() -> list[Exchange]:
        exchanges = [Exchange([b"{}"]) for _ in range(3)]
        calls = []
        for name, (work_units, exchange) in zip("abc", zip((6, 4, 1), exchanges, strict=True), strict=True):
            scope: Scope = {"type": "http", "method": "POST", "path": "/v1/rewards", "headers": []}
            scope.update(work=work_units, name=name)
            calls.append(asyncio.ensure_future(gate(scope, exchange.receive, exchange.send)))
            await asyncio.sleep(0.01)  # in arrival order a, b, c
        assert drain.cut_later_requests(1.0) == 1  # 6 + 4 fit; c (1 unit) came later and is ended whole
        await asyncio.gather(*calls)
        return exchanges

    a, b, c = asyncio.run(run())
    assert scored == ["a", "b"]
    assert c.status == 503 and c.headers["retry-after"] == "2"
    assert a.sent == [] and b.sent == []  # the stand-in app answers nothing itself
