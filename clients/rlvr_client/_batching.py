"""Per-sample reward calls gathered into one request: frameworks that score one sample per coroutine (verl's
reward loop, slime without ``--group-rm``) start a whole step's calls at once on one event loop; this sends them
as one batch (or a few of at most ``max_items``) instead of one request per sample."""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import Mapping

from rlvr_client.client import AsyncRewardClient, api_key_from_env, server_urls_from_env
from rlvr_client.protocol import ComponentSpec, RewardItem, RewardResult

__all__ = ["Coalescer", "async_client", "coalescer"]

#: A batch is sent once no new call has come for this long, in seconds.
LINGER_S = 0.02
#: ... or once its first call has waited this long, in seconds.
MAX_WAIT_S = 0.5


class Coalescer:
    """Gathers the items of concurrent :meth:`score` calls on one event loop into one request.

    Args:
        client: the client the batches go through.
        preset, components: request-level scoring config of every batch.
        linger_s: send once no call has come for this long (s).
        max_wait_s: send once the oldest waiting call has waited this long (s).
        max_items: send at once when this many items wait.
    """

    def __init__(
        self,
        client: AsyncRewardClient,
        *,
        preset: str | None = None,
        components: Mapping[str, ComponentSpec] | None = None,
        linger_s: float = LINGER_S,
        max_wait_s: float = MAX_WAIT_S,
        max_items: int = 1024,
    ) -> None:
        self.client = client
        self.preset = preset
        self.components = components
        self.linger_s = linger_s
        self.max_wait_s = max_wait_s
        self.max_items = max_items
        self.requests_sent = 0
        self._pending: list[tuple[RewardItem, asyncio.Future[RewardResult]]] = []
        self._first_at = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def score(self, item: RewardItem) -> RewardResult:
        """Score one item as part of the next batch.

        Raises:
            rlvr_client.client.RewardServerError: the batch failed (every call of the batch gets it).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RewardResult] = loop.create_future()
        if not self._pending:
            self._first_at = time.monotonic()
        self._pending.append((item, future))
        if self._timer is not None:
            self._timer.cancel()
        waited_s = time.monotonic() - self._first_at
        if len(self._pending) >= self.max_items or waited_s >= self.max_wait_s:
            self._flush()
        else:
            self._timer = loop.call_later(min(self.linger_s, self.max_wait_s - waited_s), self._flush)
        return await future

    def _flush(self) -> None:
        self._timer = None
        batch, self._pending = self._pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._sending.add(task)  # a task only weakly referenced by the loop could be collected mid-flight
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[RewardItem, asyncio.Future[RewardResult]]]) -> None:
        self.requests_sent += 1
        try:
            results = await self.client.score(
                [item for item, _ in batch], preset=self.preset, components=self.components
            )
        except Exception as exc:  # handed to every caller of the batch, which re-raises it
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncRewardClient] = weakref.WeakKeyDictionary()
_coalescers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Coalescer]] = weakref.WeakKeyDictionary()


def async_client() -> AsyncRewardClient:
    """This event loop's client of ``RLVR_SERVER_URL`` (with ``RLVR_API_KEY``): one connection pool per loop,
    since an ``httpx.AsyncClient`` belongs to the loop it first ran on."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = AsyncRewardClient(server_urls_from_env(), api_key=api_key_from_env())
    return client


def coalescer(preset: str | None, components: Mapping[str, ComponentSpec] | None) -> Coalescer:
    """This event loop's :class:`Coalescer` for one scoring config."""
    loop = asyncio.get_running_loop()
    by_config = _coalescers.setdefault(loop, {})
    key = json.dumps([preset, components], sort_keys=True, default=str)
    found = by_config.get(key)
    if found is None:
        found = by_config[key] = Coalescer(async_client(), preset=preset, components=components)
    return found
