"""ASGI middleware of the server, outermost first:

* :class:`RequestLog`: a request id (taken from ``X-Request-ID`` or made, and echoed back), one structured log
  line per request (status, duration, items and their statuses) and the Prometheus request metrics;
* :class:`ApiKeyAuth`: ``401`` with ``WWW-Authenticate`` for a ``/v1/*`` request without a valid key;
* :class:`AdmissionGate`: what the server refuses before reading a body (``503`` while it drains, ``429`` while
  its item budget is full or the items the headers declare do not fit), requests in flight for the drain, and the
  body's deadline (``408``);
* :class:`BodyLimit`: ``413`` for a body over ``RLVR_MAX_BODY_MB``, whatever its transfer encoding.

The body limit is ours rather than FastAPI's ``max_body_size``, which answers a declared over-size body in plain
text, whatever the app sends: our clients get JSON that names the setting.

Plain ASGI rather than ``@app.middleware("http")``: Starlette's ``BaseHTTPMiddleware`` wraps the receive
channel, which hides a client's disconnect from the endpoint (so abandoned work could not be cancelled),
and copies the scope (so the matched route was lost for the metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reward_server.admission import Drain, InFlight, ItemBudget, QueueFull
from reward_server.auth import ApiKeys, bearer_token
from reward_server.engine.work import body_work
from reward_server.metrics import Metrics

access_logger = logging.getLogger("reward_server.access")

#: The request id of the request being served, for every log record made while serving it (see ``logs.py``).
request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("rlvr_request_id", default=None)

#: Where a request's :class:`RequestInfo` lives in its ASGI scope.
REQUEST_INFO = "rlvr.request"
#: Where a ``/v1/*`` request's :class:`~reward_server.admission.InFlight` (for the drain) lives in its ASGI scope.
IN_FLIGHT = "rlvr.in_flight"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
#: Probes and scrapes are logged at DEBUG: a Kubernetes readiness probe alone is a line every 5 s.
_QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
#: Retry-After of the 503s while draining: the server is going away, so another one (or its restart) is next.
DRAIN_RETRY_AFTER_S = 2


@dataclass
class RequestInfo:
    """What one request's log line says beyond its method, path and status; routers fill ``items`` and
    ``statuses`` through :func:`note_items`."""

    request_id: str
    items: int | None = None
    statuses: Counter[str] = field(default_factory=Counter)
    key: int | None = None
    body_bytes: int = 0
    refused: str | None = None


def request_info(scope: Scope) -> RequestInfo | None:
    """The :class:`RequestInfo` of the request whose scope this is (``None`` outside :class:`RequestLog`)."""
    info: RequestInfo | None = scope.get(REQUEST_INFO)
    return info


def note_refused(scope: Scope, reason: str) -> None:
    """Record why the request was refused (``queue_full``, ``draining``, ...), for its log line and metrics."""
    info = request_info(scope)
    if info is not None:
        info.refused = reason


def note_work(scope: Scope, work: float) -> None:
    """Record the work units a request was admitted with, for the drain's order (see :class:`Drain`)."""
    entry: InFlight | None = scope.get(IN_FLIGHT)
    if entry is not None:
        entry.work = work


def note_items(scope: Scope, statuses: Iterable[str]) -> None:
    """Record the statuses of the items a request scored, for its log line."""
    info = request_info(scope)
    if info is not None:
        counted = Counter(statuses)
        info.items = sum(counted.values())
        info.statuses = counted


def _json_response(status: int, content: dict[str, Any], headers: Iterable[tuple[bytes, bytes]] = ()) -> list[Message]:
    body = json.dumps(content).encode()
    all_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    return [
        {"type": "http.response.start", "status": status, "headers": all_headers},
        {"type": "http.response.body", "body": body},
    ]


async def _answer(
    send: Send, status: int, content: dict[str, Any], headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    for message in _json_response(status, content, headers):
        await send(message)


class RequestLog:
    """Request ids, a structured log line per request, and the request metrics (``rlvr_requests_total``, latency).

    The id comes from the request's ``X-Request-ID`` when it is a plain token of at most 128 characters (a load
    balancer's or a trainer's), else it is made here; the answer carries it back in ``X-Request-ID``. The log line
    (logger ``reward_server.access``) has the id, method, path, status, duration, body bytes, client, the items and
    their statuses (``/v1/rewards``), the index of the API key used, and why a request was refused.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        info = RequestInfo(given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex)
        scope[REQUEST_INFO] = info
        token = request_id_var.set(info.request_id)
        status = {"code": 500}

        async def receive_counting() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                info.body_bytes += len(message.get("body", b""))
            return message

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                headers = [*message.get("headers", []), (b"x-request-id", info.request_id.encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive_counting, send_with_id)
        finally:
            duration_s = time.perf_counter() - start
            # The router stores the matched route in the (shared) scope; unmatched paths share one label.
            route = scope.get("route")
            if route is not None:
                path = route.path
            else:
                # Starlette's plain routes (/docs, /openapi.json) set the endpoint but not the route.
                path = scope["path"] if scope.get("endpoint") is not None else "unmatched"
            self.metrics.requests.labels(path, str(status["code"])).inc()
            self.metrics.request_latency.labels(path).observe(duration_s)
            if info.refused:
                self.metrics.refused.labels(info.refused).inc()
            self._log(scope, info, status["code"], duration_s)
            request_id_var.reset(token)

    @staticmethod
    def _log(scope: Scope, info: RequestInfo, code: int, duration_s: float) -> None:
        fields: dict[str, Any] = {
            "request_id": info.request_id,
            "method": scope["method"],
            "path": scope["path"],
            "status": code,
            "duration_ms": round(duration_s * 1000, 1),
            "body_bytes": info.body_bytes,
        }
        client = scope.get("client")
        if client:
            fields["client"] = f"{client[0]}:{client[1]}"
        if info.items is not None:
            fields["items"] = info.items
            fields["statuses"] = dict(sorted(info.statuses.items()))
        if info.key is not None:
            fields["key"] = f"#{info.key + 1}"
        if info.refused:
            fields["refused"] = info.refused
        level = logging.DEBUG if scope["path"] in _QUIET_PATHS and code < 500 else logging.INFO
        if code >= 500 and code != 503:
            level = logging.ERROR
        if access_logger.isEnabledFor(level):
            access_logger.log(level, "request", extra={"fields": fields})


class ApiKeyAuth:
    """Every ``/v1/*`` request (and ``/metrics`` with ``protect_metrics``) needs ``Authorization: Bearer <key>``.

    Without a valid key: ``401`` with ``WWW-Authenticate: Bearer realm="rlvr"`` (plus ``error="invalid_token"`` when
    a wrong key was sent, RFC 6750 section 3), before any of the body is read. ``/healthz``, ``/readyz``, ``/docs``
    and ``/openapi.json`` stay open.
    """

    def __init__(self, app: ASGIApp, keys: ApiKeys, protect_metrics: bool = False) -> None:
        self.app = app
        self.keys = keys
        self.protect_metrics = protect_metrics

    def _protected(self, path: str) -> bool:
        return path.startswith("/v1/") or (self.protect_metrics and path == "/metrics")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._protected(scope["path"]):
            await self.app(scope, receive, send)
            return
        token = bearer_token(dict(scope["headers"]).get(b"authorization"))
        index = None if token is None else self.keys.match(token)
        if index is None:
            note_refused(scope, "no_api_key" if token is None else "wrong_api_key")
            challenge = 'Bearer realm="rlvr"' if token is None else 'Bearer realm="rlvr", error="invalid_token"'
            detail = (
                "this server needs an API key: send 'Authorization: Bearer <key>' (the client reads RLVR_API_KEY)"
                if token is None
                else "the API key is not valid on this server"
            )
            await _answer(send, 401, {"detail": detail}, [(b"www-authenticate", challenge.encode())])
            return
        info = request_info(scope)
        if info is not None:
            info.key = index
        await self.app(scope, receive, send)


#: The header in which a client declares how many items its body holds, so that a batch that cannot fit is refused
#: before its body is read (the project's client sends it; the router counts the items it parsed all the same).
ITEMS_HEADER = "X-RLVR-Items"
_ITEMS_HEADER_KEY = ITEMS_HEADER.lower().encode()


def _declared_items(scope: Scope) -> int | None:
    """The item count a request declares in :data:`ITEMS_HEADER`; ``None`` when absent or not a plain number."""
    value = dict(scope["headers"]).get(_ITEMS_HEADER_KEY, b"")
    return int(value) if value.isdigit() and len(value) <= 9 else None


async def _refuse_full(scope: Scope, send: Send, refusal: QueueFull) -> None:
    note_refused(scope, "queue_full")
    await _answer(send, 429, {"detail": str(refusal)}, [(b"retry-after", str(refusal.retry_after_s).encode())])


class AdmissionGate:
    """What the server refuses before reading a body, and the drain's view of requests in flight.

    * While draining: ``/readyz`` answers 503, and a ``/v1/*`` request 503 with ``Retry-After``.
    * While the item budget is full (nothing fits), or when the items a ``POST /v1/*`` declares in
      :data:`ITEMS_HEADER` do not fit: 429 with ``Retry-After`` at once, its body unread; more items declared than
      the budget ever holds: 413. A body whose ``Content-Length`` is more work than is free under
      ``RLVR_MAX_QUEUED_WORK`` (:func:`~reward_server.engine.work.body_work`, a lower bound): 429, its body unread.
      (A request that passes here may still get a 429 from its router, once its
      items are counted.)
    * A ``/v1/*`` request is in flight for the drain until it is answered; when the drain gives up on it
      (``Drain.force``), or ends it whole as a later arrival (its ``InFlight.cut``), it is cancelled and, if
      nothing was sent yet, answered 503.
    * The whole body must arrive within ``body_timeout_s`` of the headers, else 408 and the connection closes.
    """

    def __init__(self, app: ASGIApp, budget: ItemBudget, drain: Drain, body_timeout_s: float) -> None:
        self.app = app
        self.budget = budget
        self.drain = drain
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if self.drain.draining and path == "/readyz":
            await _answer(send, 503, {"ready": False, "draining": True, "checks": {"draining": True}})
            return
        if not path.startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        if self.drain.draining:
            note_refused(scope, "draining")
            await _answer(
                send,
                503,
                {"detail": "the server is shutting down; retry on another server"},
                [(b"retry-after", str(DRAIN_RETRY_AFTER_S).encode())],
            )
            return
        if scope["method"] == "POST":
            declared = _declared_items(scope)
            if declared is not None and declared > self.budget.max_items:
                note_refused(scope, "too_many_items")
                detail = (
                    f"the request declares {declared} items ({ITEMS_HEADER}), more than this server ever holds at "
                    f"once ({self.budget.max_items}, RLVR_MAX_QUEUED_ITEMS): split the batch"
                )
                await _answer(send, 413, {"detail": detail})
                return
            if self.budget.full or (declared is not None and self.budget.queued + declared > self.budget.max_items):
                await _refuse_full(scope, send, self.budget.refusal(declared or 1))
                return
            length = dict(scope["headers"]).get(b"content-length", b"")
            work = body_work(int(length)) if length.isdigit() and len(length) <= 12 else 0.0
            if work and not self.budget.work_fits(work):
                await _refuse_full(scope, send, self.budget.work_refusal(declared or 1, work))
                return
        with self.drain.request() as entry:
            scope[IN_FLIGHT] = entry
            await self._run_cancellable(scope, self._with_body_deadline(receive), send, entry)

    def _with_body_deadline(self, receive: Receive) -> Receive:
        deadline = time.monotonic() + self.body_timeout_s
        body_done = False

        async def receive_by_deadline() -> Message:
            nonlocal body_done
            if body_done:
                return await receive()  # after the body: only a disconnect comes, whenever it comes
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise HTTPException(
                    status_code=408,
                    detail=f"the request body did not arrive within {self.body_timeout_s:g} s (RLVR_BODY_TIMEOUT_S)",
                    headers={"Connection": "close"},
                ) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        return receive_by_deadline

    async def _run_cancellable(self, scope: Scope, receive: Receive, send: Send, entry: InFlight) -> None:
        started = False

        async def send_noting(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, send_noting))
        force = asyncio.ensure_future(self.drain.force.wait())
        cut = asyncio.ensure_future(entry.cut.wait())
        try:
            await asyncio.wait({task, force, cut}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # this request's own task is cancelled (uvicorn's shutdown timeout)
            task.cancel()
            raise
        finally:
            force.cancel()
            cut.cancel()
        if task.done():
            error = task.exception()
            if error is not None:
                # Re-raise what the app raised, as if it had run here. This frame joins the error's traceback:
                # it must not keep the task (which keeps the error), or the request's body stays in that cycle.
                del task
                try:
                    raise error
                finally:
                    del error
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if not started:
            later = entry.cut.is_set() and not self.drain.force.is_set()
            note_refused(scope, "drain_cut" if later else "drain_cancelled")
            await _answer(
                send,
                503,
                {"detail": "the server shut down before this request was answered; retry on another server"},
                [(b"retry-after", str(DRAIN_RETRY_AFTER_S).encode()), (b"connection", b"close")],
            )


class BodyLimit:
    """``413`` for a request body over ``max_bytes``, in JSON naming ``RLVR_MAX_BODY_MB``.

    A declared ``Content-Length`` over the limit is answered before a byte of the body is read. A body without one
    (``Transfer-Encoding: chunked``) is counted as it arrives, and the request fails the moment the count passes
    the limit: what was read is dropped with the request, so memory stays within the limit plus one chunk. (The
    rest of such a body is read and thrown away for a few seconds at most, see ``reward_server.serving``.)
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self, size: str) -> HTTPException:
        return HTTPException(
            status_code=413,
            detail=f"the request body is {size} bytes, over the limit of {self.max_bytes} (RLVR_MAX_BODY_MB)",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            await _answer(send, 413, {"detail": self._too_large(str(int(length))).detail})
            return
        received = 0

        async def receive_within_limit() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise self._too_large(f"at least {received}")
            return message

        await self.app(scope, receive_within_limit, send)
