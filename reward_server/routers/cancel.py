"""Stop scoring for a client that has gone away, so its queued work does not delay everyone else."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import Request

T = TypeVar("T")

# How often to look for a disconnect while a request is being scored.
_POLL_S = 0.25


class ClientGone(Exception):
    """The client disconnected before its result was ready; the work was cancelled."""


class ServerStopping(Exception):
    """The server's drain ran out of time before this request's result was ready; the work was cancelled."""


async def unless_disconnected(request: Request, work: Coroutine[Any, Any, T], stop: asyncio.Event | None = None) -> T:
    """Run ``work``; if the client disconnects first, cancel it (queued math items leave the queue) and
    raise :class:`ClientGone`. A trainer that times out and retries would otherwise double the queue.
    If ``stop`` is set first (the drain at shutdown ran out of time), cancel it and raise :class:`ServerStopping`.

    Raises:
        ClientGone: the client went away.
        ServerStopping: ``stop`` was set.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=_POLL_S)
            if done:
                return task.result()
            if stop is not None and stop.is_set():
                task.cancel()
                raise ServerStopping
            if await request.is_disconnected():
                task.cancel()
                raise ClientGone
    finally:
        if not task.done():
            task.cancel()
