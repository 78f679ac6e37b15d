"""Serving the app with uvicorn, hardened against slow and hostile clients.

uvicorn's own knobs come first (``timeout_keep_alive``, ``limit_concurrency``, ``timeout_graceful_shutdown``,
``h11_max_incomplete_event_size``); :class:`GuardedHttpToolsProtocol` adds what uvicorn lacks at the connection
level:

* **a header deadline** (``RLVR_HEADER_TIMEOUT_S``): a client that has not sent a request's headers within it (a
  slowloris: a connection that dribbles a header byte now and then) gets ``408`` and is closed. uvicorn's
  keep-alive timer only covers a connection that sends nothing at all;
* **a header size limit** (:data:`MAX_HEADER_BYTES`): ``431`` past it (httptools has none, so headers that never
  end would grow without bound);
* **a lingering limit** on a body that is still coming after its request was answered (a ``413``, a ``429``):
  uvicorn reads and drops it, and nginx-style the connection is closed after :data:`LINGER_S` or
  :data:`LINGER_BYTES`, so a body that never ends cannot hold a connection for ever.

The protocol reads its settings from the lifespan state (``rlvr_settings``), which the app's lifespan yields.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import json
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from reward_server.instance import start_instance
from reward_server.logs import log_config
from reward_server.settings import Settings

#: Most bytes a request's line and headers may take (nginx allows 4 x 8 KiB, h11 16 KiB by default).
MAX_HEADER_BYTES = 64 * 1024
#: After an early answer, how long and how much of the rest of the request body is read and dropped.
LINGER_S = 30.0
LINGER_BYTES = 64 * 1024 * 1024
#: uvicorn's own graceful shutdown, after our drain: by then nothing should be in flight.
GRACEFUL_SHUTDOWN_S = 5
_M_MMAP_THRESHOLD = -3  # mallopt(3)


def _raw_response(status: int, reason: str, detail: str) -> bytes:
    body = json.dumps({"detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


class _HeadersTooLarge(Exception):
    """Raised from a parser callback to stop parsing headers over :data:`MAX_HEADER_BYTES`."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline, a header size limit and a lingering limit."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any], _loop: Any = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        settings: Settings | None = app_state.get("rlvr_settings")
        self._metrics = app_state.get("rlvr_metrics")
        self.header_timeout_s = settings.header_timeout_s if settings is not None else 10.0
        self._header_timer: asyncio.TimerHandle | None = None
        self._in_headers = True  # waiting for (the rest of) a request's line and headers
        self._header_bytes = 0
        self._parsed_header_bytes = 0  # the request line and headers the parser has handed over
        self._body_done = True
        self._linger_until: float | None = None
        self._linger_bytes = 0

    # -------------------------------------------------------------- connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._linger_until is not None:
            self._linger_bytes += len(data)
            if self._linger_bytes > LINGER_BYTES or self.loop.time() > self._linger_until:
                self._count("linger")
                self.transport.close()
                return
        super().data_received(data)
        if self._in_headers:  # (a chunk that ended the headers is not counted: they are complete)
            self._header_bytes += len(data)
        if self._in_headers and self._header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
            self._count("header_too_large")
            self._reject(431, "Request Header Fields Too Large", f"request headers over {MAX_HEADER_BYTES} bytes")

    # -------------------------------------------------------------- parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = True
        self._body_done = False
        self._linger_until = None
        self._arm_header_timer()

    def on_url(self, url: bytes) -> None:
        self._parsed_header_bytes += len(url)
        self._check_parsed_headers()
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._parsed_header_bytes += len(name) + len(value) + 4  # "name: value\r\n"
        self._check_parsed_headers()
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._parsed_header_bytes = 0
        self._header_bytes = 0
        self._cancel_header_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        answered_early = self.cycle is not None and self.cycle.response_complete
        super().on_message_complete()
        self._body_done = True
        self._linger_until = None
        if answered_early and self.timeout_keep_alive_task is None and not self.pipeline:
            # The answer went out before the body ended, so uvicorn armed (and the body's bytes then
            # cancelled) its keep-alive timer already: arm it again, or an idle connection would stay.
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._body_done and not self.transport.is_closing():
            self._linger_until = self.loop.time() + LINGER_S
            self._linger_bytes = 0

    # -------------------------------------------------------------- internals

    def _check_parsed_headers(self) -> None:
        # Headers that end within one chunk never reach the count in data_received; the parser's own count
        # catches them (the 400 uvicorn then writes for the failed parse goes nowhere: the 431 closed it).
        if self._parsed_header_bytes > MAX_HEADER_BYTES:
            if not self.transport.is_closing():
                self._count("header_too_large")
                self._reject(431, "Request Header Fields Too Large", f"request headers over {MAX_HEADER_BYTES} bytes")
            raise _HeadersTooLarge

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._in_headers and not self.transport.is_closing():
            self._count("header_timeout")
            self._reject(
                408,
                "Request Timeout",
                f"the request headers did not arrive within {self.header_timeout_s:g} s (RLVR_HEADER_TIMEOUT_S)",
            )

    def _reject(self, status: int, reason: str, detail: str) -> None:
        self._cancel_header_timer()
        self.transport.write(_raw_response(status, reason, detail))
        self.transport.close()

    def _count(self, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.connections_closed.labels(reason).inc()


def return_freed_memory_promptly() -> None:
    """Fix glibc's mmap threshold at 128 KiB, so that large buffers (a request body) are mapped on their own and
    go back to the system when freed, instead of staying in the heap after a big upload (glibc raises the
    threshold after each large free unless it is set). No effect off glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):
        pass


def serve(settings: Settings) -> None:
    """Run the server until SIGTERM/SIGINT, which drains it first (see :mod:`reward_server.admission`)."""
    return_freed_memory_promptly()
    start_instance(settings.instance_file)  # before the workers start: they all answer this id
    uvicorn.run(
        "reward_server.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.http_workers,
        http="reward_server.serving:GuardedHttpToolsProtocol",
        log_config=log_config(settings.log_level, settings.log_format),
        log_level=settings.log_level,
        access_log=False,
        timeout_keep_alive=settings.keep_alive_s,  # type: ignore[arg-type]  # a float works: it is a call_later delay
        limit_concurrency=settings.limit_concurrency,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
