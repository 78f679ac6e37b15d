"""ASGI middleware of the server: a request-body limit and Prometheus request metrics.

Plain ASGI rather than ``@app.middleware("http")``: Starlette's ``BaseHTTPMiddleware`` wraps the receive
channel, which hides a client's disconnect from the endpoint (so abandoned work could not be cancelled),
and copies the scope (so the matched route was lost for the metrics).
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reward_server.metrics import Metrics


class BodyLimit:
    """Answer 413 to a request whose ``Content-Length`` exceeds ``max_bytes``, before reading its body.

    Every client we know of (httpx, requests, aiohttp) sends the length; a chunked body without one is not
    limited here (put the server behind a proxy with a body limit if that matters).
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            length = dict(scope["headers"]).get(b"content-length", b"")
            if length.isdigit() and int(length) > self.max_bytes:
                body = json.dumps(
                    {"detail": f"body of {int(length)} bytes exceeds {self.max_bytes} (RLVR_MAX_BODY_MB)"}
                ).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 413, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class RequestMetrics:
    """Count requests by route and status code, and time them (``rlvr_requests_total``, latency histogram)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status: dict[str, Any] = {"code": 500}

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            # The router stores the matched route in the (shared) scope; unmatched paths share one label.
            route = scope.get("route")
            if route is not None:
                path = route.path
            else:
                # Starlette's plain routes (/docs, /openapi.json) set the endpoint but not the route.
                path = scope["path"] if scope.get("endpoint") is not None else "unmatched"
            self.metrics.requests.labels(path, str(status["code"])).inc()
            self.metrics.request_latency.labels(path).observe(time.perf_counter() - start)
