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


async def unless_disconnected(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; if the client disconnects first, cancel it (queued math items leave the queue) and
    raise :class:`ClientGone`. A trainer that times out and retries would otherwise double the queue.

    Raises:
        ClientGone: the client went away.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                raise ClientGone
    finally:
        if not task.done():
            task.cancel()
