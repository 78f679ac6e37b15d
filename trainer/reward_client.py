"""Scoring in the background: groups go to the reward server while the next ones generate.

Generation is synchronous torch code, so the asynchronous :class:`~rlvr_client.client.AsyncRewardClient`
runs on an event loop in a daemon thread. :meth:`RewardScorer.submit` hands it a finished chunk of groups and
returns at once with a future; the loop calls :meth:`RewardScorer.wait` only when it needs the rewards, and the
time spent blocked there is what ``timing/reward_wait`` reports.

The trainer reaches the server only through this module and ``rlvr_client.client`` (HTTP), never through the
server's internals.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import httpx

from rlvr_client.client import AsyncRewardClient, RetryPolicy, RewardClient, api_key_from_env
from rlvr_client.protocol import RewardItem, RewardResult

logger = logging.getLogger("trainer")


class RewardScorer:
    """Scores batches of :class:`RewardItem` on a background event loop.

    Args:
        base_urls: reward server URL(s); requests are balanced over them.
        components: request-level components sent with every batch.
        preset: request-level preset.
        timeout_s: per-request timeout in seconds.
        retry_deadline_s: how long a request is retried (connection errors, 429/503, each wait at least its
            ``Retry-After``, with jitter, logged at INFO) before the future fails, in seconds from its first attempt.
        max_retries: at most this many retries as well; ``None``: only the deadline counts.
        client: an ``httpx.AsyncClient`` to use instead of a new one (tests pass a ``MockTransport``).
        api_key: the servers' API key (default: the ``RLVR_API_KEY`` environment variable).

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        base_urls: str | Sequence[str],
        *,
        components: Mapping[str, Any] | None = None,
        preset: str | None = None,
        timeout_s: float = 120.0,
        retry_deadline_s: float = 300.0,
        max_retries: int | None = None,
        client: httpx.AsyncClient | None = None,
        api_key: str | None = None,
    ) -> None:
        self.components = components
        self.preset = preset
        self._urls = base_urls
        self._timeout_s = timeout_s
        self._api_key = api_key if api_key is not None else api_key_from_env()
        self._client = AsyncRewardClient(
            base_urls,
            client=client,
            timeout_s=timeout_s,
            retry=RetryPolicy(deadline_s=retry_deadline_s, max_retries=max_retries),
            api_key=self._api_key,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rlvr-reward-scorer", daemon=True)
        self._thread.start()
        self._closed = False

    @classmethod
    def from_config(cls, config: Any) -> RewardScorer:
        """A scorer built from a config's ``reward_*`` fields (``GRPOConfig``, ``SampleConfig``), once at least one
        server is ready (it waits up to ``reward_wait_ready_s``, see :meth:`wait_ready`).

        Raises:
            TimeoutError: no server was ready in time.
        """
        scorer = cls(
            config.reward_server_urls,
            components=config.reward_components,
            preset=config.reward_preset,
            timeout_s=config.reward_timeout_s,
            retry_deadline_s=config.reward_retry_deadline_s,
            max_retries=config.reward_max_retries,
            api_key=getattr(config, "reward_api_key", None),
        )
        try:
            scorer.wait_ready(config.reward_wait_ready_s)
        except BaseException:
            scorer.close()
            raise
        return scorer

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_ready(self, timeout_s: float) -> list[str]:
        """Wait up to ``timeout_s`` for every server's ``/readyz``; go on with those that are ready then.

        A server that is down at the start does not stop a run that others can score (the balancer uses it once it
        answers), but it is logged as a warning.

        Returns:
            The ready servers.

        Raises:
            TimeoutError: no server was ready in time (the message names them).
        """
        with RewardClient(self._urls, timeout_s=self._timeout_s, api_key=self._api_key) as probe:
            ready = probe.wait_ready(timeout_s=timeout_s, require_all=False)
            missing = [url for url in probe.base_urls if url not in ready]
        if missing:
            logger.warning(
                "reward server(s) %s not ready after %g s; scoring on %s until they answer",
                ", ".join(missing),
                timeout_s,
                ", ".join(ready),
            )
        return ready

    def submit(self, items: Sequence[RewardItem]) -> Future[list[RewardResult]]:
        """Start scoring ``items``; returns at once. The future's result has one result per item, in order."""
        if self._closed:
            raise RuntimeError("RewardScorer is closed")
        coro = self._client.score(list(items), components=self.components, preset=self.preset)
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def wait(self, futures: Sequence[Future[list[RewardResult]]]) -> tuple[list[RewardResult], float]:
        """Block until all ``futures`` are done: ``(results in submission order, seconds spent blocked)``.

        Raises:
            rlvr_client.client.RewardServerError: a batch failed for good (the server refused it or stayed
                unreachable through the retries). The run stops rather than train on made-up rewards.
        """
        start = time.perf_counter()
        results = [r for f in futures for r in f.result()]
        return results, time.perf_counter() - start

    def score(self, items: Sequence[RewardItem]) -> list[RewardResult]:
        """Score and wait (no overlap): used for evaluation and for the no-overlap baseline of the benchmark."""
        return self.wait([self.submit(items)])[0]

    def close(self) -> None:
        """Close the HTTP client and stop the loop thread."""
        if self._closed:
            return
        self._closed = True
        asyncio.run_coroutine_threadsafe(self._client.aclose(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
