"""What the server refuses before reading a body, and that the bodies of abandoned and refused requests are freed
at once (no reference cycle keeps them until a full garbage collection). Plain ASGI calls into the app, without
its lifespan: nothing here needs a worker."""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI

from reward_server.app import create_app
from reward_server.engine.reward_models import ModelCatalog
from reward_server.engine.work import SlowReferences
from reward_server.middleware import ITEMS_HEADER
from reward_server.settings import Settings

MB = 1 << 20


def _small_app(max_body_mb: float) -> FastAPI:
    """A server whose queue holds 8 items."""
    settings = Settings(
        math_workers=1,
        sandbox_pool_size=1,
        preload_language_models=False,
        max_queued_items=8,
        max_batch_items=8,
        max_body_mb=max_body_mb,
    )
    return create_app(settings)


@pytest.fixture
def app() -> FastAPI:
    """A server whose queue holds 8 items and whose bodies may be 1 MB."""
    return _small_app(1.0)


class Exchange:
    """One request through the app: the body's messages are handed out by ``receive`` (and counted), then the
    client leaves (``http.disconnect``) or waits; what the app sends is kept.

    A part of the body given as a function is made when it is received, so that nothing of the test's holds it
    (and ``tracemalloc`` sees it allocated)."""

    def __init__(self, body: list[bytes | Callable[[], bytes]], *, leave: bool = False) -> None:
        self.body = body
        self.leave = leave
        self.received = 0
        self.sent: list[dict[str, Any]] = []

    @property
    def length(self) -> int:
        return sum(len(part) for part in self.body if isinstance(part, bytes))

    async def receive(self) -> dict[str, Any]:
        if self.received < len(self.body):
            part = self.body[self.received]
            self.received += 1
            chunk = part if isinstance(part, bytes) else part()
            more = self.leave or self.received < len(self.body)
            return {"type": "http.request", "body": chunk, "more_body": more}
        if self.leave:
            return {"type": "http.disconnect"}
        await asyncio.Event().wait()  # the client waits for its answer
        raise AssertionError("unreachable")

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(next(m["status"] for m in self.sent if m["type"] == "http.response.start"))

    @property
    def headers(self) -> dict[str, str]:
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return {k.decode(): v.decode() for k, v in start["headers"]}

    @property
    def detail(self) -> str:
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return str(json.loads(body)["detail"])


def _call(app: FastAPI, exchange: Exchange, headers: dict[str, str], length: int | None = None) -> None:
    if length is None:
        length = exchange.length
    raw = [(b"content-type", b"application/json"), (b"content-length", str(length).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/rewards",
        "raw_path": b"/v1/rewards",
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    asyncio.run(asyncio.wait_for(app(scope, exchange.receive, exchange.send), 10))


def _body(items: int) -> bytes:
    return json.dumps({"items": [{"id": str(i), "response": "4", "ground_truth": "4"} for i in range(items)]}).encode()


# ------------------------------------------------------------------------------------ refused before the body


def test_declared_items_that_do_not_fit_are_429_with_the_body_unread(app: FastAPI) -> None:
    budget = app.state.budget
    with budget.admit(5):  # 5 of 8 held by another request; 4 more do not fit
        exchange = Exchange([_body(4)])
        _call(app, exchange, {ITEMS_HEADER: "4"})
        assert exchange.received == 0
        assert exchange.status == 429
        # Nothing answered yet, no pool: the fixed guess.
        assert exchange.headers["retry-after"] == "5"
        assert "RLVR_MAX_QUEUED_ITEMS" in exchange.detail


def test_more_items_declared_than_the_server_ever_holds_is_413_with_the_body_unread(app: FastAPI) -> None:
    exchange = Exchange([_body(9)])
    _call(app, exchange, {ITEMS_HEADER: "9"})
    assert exchange.received == 0
    assert exchange.status == 413
    assert "declares 9 items" in exchange.detail and "(8, RLVR_MAX_QUEUED_ITEMS)" in exchange.detail


def test_a_full_budget_is_429_with_the_body_unread(app: FastAPI) -> None:
    with app.state.budget.admit(8):
        exchange = Exchange([_body(1)])
        _call(app, exchange, {})  # no declared count: nothing fits, whatever it holds
        assert (exchange.received, exchange.status) == (0, 429)


def test_a_declared_body_over_the_limit_is_413_with_the_body_unread(app: FastAPI) -> None:
    exchange = Exchange([b"{}"])
    _call(app, exchange, {}, length=2 * MB)
    assert (exchange.received, exchange.status) == (0, 413)
    assert f"{2 * MB} bytes" in exchange.detail and "RLVR_MAX_BODY_MB" in exchange.detail


@pytest.mark.parametrize("declared", ["3", "not a number", ""])
def test_a_batch_that_fits_or_declares_nothing_usable_is_read(app: FastAPI, declared: str) -> None:
    with app.state.budget.admit(5):
        exchange = Exchange([_body(3)])
        _call(app, exchange, {ITEMS_HEADER: declared})
        assert exchange.received == 1
        # Read and parsed; the lifespan did not start the workers here, so the router answers 503.
        assert exchange.status == 503


# ------------------------------------------------------------------------------------ bodies are freed at once


@pytest.fixture
def no_gc() -> Iterator[None]:
    """Only reference counting frees memory in the test: what a cycle holds stays."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _traced_growth(app: FastAPI, requests: list[Exchange], length: int | None = None) -> int:
    """Bytes still allocated after the requests than before them."""
    _call(app, Exchange([_body(4)]), {})  # a first request (refused) warms the caches up
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for exchange in requests:
            _call(app, exchange, {}, length)
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.fixture
def roomy() -> FastAPI:
    """The ``app`` fixture's server with room for 8 MB bodies."""
    return _small_app(8.0)


def test_abandoned_uploads_are_freed_without_a_garbage_collection(roomy: FastAPI, no_gc: None) -> None:
    # Five clients each send 0.75 MB of a 4 MB body, then leave. Before the fix each one's chunks stayed in a
    # reference cycle: 3.75 MB in all.
    def chunk() -> bytes:
        return b"x" * (3 * MB // 4)

    uploads = [Exchange([b'{"items": [{"id": "a", "response": "', chunk], leave=True) for _ in range(5)]
    growth = _traced_growth(roomy, uploads, length=4 * MB)
    assert [e.received for e in uploads] == [2] * 5
    assert growth < MB // 2, f"{growth / MB:.2f} MB kept after 5 abandoned uploads"


def _ready_without_workers(app: FastAPI) -> None:
    """What the router reads of a started engine before it admits a batch: ready, and the (empty) model catalog.
    A refused batch goes no further."""
    catalog = ModelCatalog.from_settings(app.state.settings)
    app.state.scoring = SimpleNamespace(
        math_pool=SimpleNamespace(ready=True), models=catalog, judge=None, slow_references=SlowReferences()
    )


@pytest.mark.parametrize("status", [429, 503])
def test_refused_bodies_are_freed_without_a_garbage_collection(roomy: FastAPI, no_gc: None, status: int) -> None:
    # Five whole bodies of 4 items (0.75 MB), read and parsed, then refused: 429, since 5 of the 8 items the
    # queue holds are taken and they declared no count; or 503, the workers not started.
    def body() -> bytes:
        text = "y" * (3 * MB // 16)
        return json.dumps({"items": [{"id": str(i), "response": text, "ground_truth": "4"} for i in range(4)]}).encode()

    if status == 429:
        _ready_without_workers(roomy)
    refused = [Exchange([body]) for _ in range(5)]
    with roomy.state.budget.admit(5):
        growth = _traced_growth(roomy, refused, length=len(body()))
    assert [e.status for e in refused] == [status] * 5
    assert growth < MB // 2, f"{growth / MB:.2f} MB kept after 5 refused bodies"
