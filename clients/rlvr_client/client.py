"""Typed HTTP client of the reward server, sync and async.

This module speaks the ``POST /v1/rewards`` contract over HTTP and needs only ``httpx``: it runs in a trainer's
environment, where the server's dependencies (sympy, the sandbox, FastAPI) are not installed. The server's
package re-exports it as ``reward_server.client``. The items and results it sends and reads are the wire
contract's, :mod:`rlvr_client.protocol` (re-exported here).

What it guarantees:

* **Exactly one result per item, matched by id.** A response whose ids differ from the request's raises
  :class:`RewardServerError` rather than silently shifting rewards between completions.
* **Retries within a deadline.** Connection errors, timeouts and 429/502/503/504 are retried until the
  :class:`RetryPolicy`'s ``deadline_s`` (not a fixed count of attempts), with exponential backoff and full
  jitter; a ``Retry-After`` header (seconds or an HTTP date) is honoured, and each wait is logged at INFO
  (logger ``rlvr_client``). A retried request carries the same item ids, so scoring is idempotent from the
  caller's side.
* **Several servers.** Requests go to the server with the fewest requests in flight (round-robin on ties);
  a failed attempt moves to the next server.
* **API keys.** ``api_key`` (or ``RLVR_API_KEY`` with :func:`client_from_env`) is sent as
  ``Authorization: Bearer <key>`` on every request.
* **Injected transports.** Pass your own ``httpx.Client``/``httpx.AsyncClient`` (e.g. with a
  ``MockTransport`` or a FastAPI ``TestClient``) to test without a network.

Example::

    with RewardClient("http://127.0.0.1:8000") as client:
        [result] = client.score([RewardItem(id="q1-0", task="math", response="\\\\boxed{4}", ground_truth="4")])
        result.reward  # 1.0, or None with result.status saying why
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import itertools
import logging
import math
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from rlvr_client._answers import API_KEY_ENV
from rlvr_client._answers import decode_tools as _decode_tools
from rlvr_client._answers import raise_for_status as _raise_for_status
from rlvr_client.protocol import (
    ComponentResult,
    ComponentSpec,
    RewardItem,
    RewardResult,
    RewardServerError,
    StepScore,
)
from rlvr_client.tools import (
    SESSIONS_PATH,
    TOOLS_PATH,
    SessionPins,
    ToolCall,
    ToolResult,
    as_calls,
    request_headers,
)

__all__ = [
    "AsyncRewardClient",
    "ComponentResult",
    "RetryPolicy",
    "RewardClient",
    "RewardItem",
    "RewardResult",
    "RewardServerError",
    "StepScore",
    "ToolCall",
    "ToolResult",
    "api_key_from_env",
    "client_from_env",
    "server_urls_from_env",
]

REWARDS_PATH = "/v1/rewards"
READY_PATH = "/readyz"
#: Longest wait for a TCP connection, in seconds: a live server accepts in milliseconds.
CONNECT_TIMEOUT_S = 10.0
#: Statuses worth retrying: rate limited, a proxy in front failing, or the server still starting its workers.
RETRY_STATUS_CODES = frozenset({429, 502, 503, 504})
#: The environment variable with the server URL(s), comma-separated, for adapters the framework gives no URL.
SERVER_URL_ENV = "RLVR_SERVER_URL"
#: The header that tells the server how many items a request holds, so that a batch that cannot fit is refused
#: before its body is sent on (the server's ``reward_server.middleware.ITEMS_HEADER``).
ITEMS_HEADER = "X-RLVR-Items"

logger = logging.getLogger("rlvr_client")

_Answer = tuple[httpx.Response | None, Exception | None]


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before trying a request again, and when to stop.

    A request is retried until ``deadline_s`` has passed since its first attempt (and, if set, ``max_retries``
    are spent), never for a fixed number of attempts alone: a busy server's ``Retry-After`` may be a minute, and
    a trainer would rather wait it out than lose the batch.

    Each wait is drawn with jitter, so that the clients a server refused together do not come back together:

    * without a ``Retry-After`` (a connection error, a 502): the back-off window is ``backoff_s * 2**attempt``
      (at most ``max_backoff_s``), and the wait is uniform in ``[(1 - jitter) * window, window]``: with the
      default ``jitter=1.0`` anywhere in ``[0, window]`` ("full jitter");
    * after a ``Retry-After`` of ``R`` s: never sooner than the server asked, ``R`` plus a uniform share of
      ``jitter * max(R, window)``, so the refused clients spread over ``[R, 2R]`` by default.

    No wait is longer than ``max_backoff_s``, nor than what is left of the deadline. When the server asks for
    longer than is left, or nothing is left, the request fails at once with :class:`RewardServerError` naming
    the deadline. (The deadline bounds when an attempt may start: one in flight keeps the client's
    ``timeout_s``, so a request takes at most about ``deadline_s + timeout_s``.)

    Attributes:
        deadline_s: how long a request may be retried, from its first attempt, in seconds.
        max_retries: at most this many retries as well; ``None`` (the default): only the deadline counts.
        backoff_s: the first back-off window; it doubles after each failed attempt.
        max_backoff_s: ceiling on any one wait, ``Retry-After`` included, so that a misconfigured server cannot
            stall a training step for hours. (The reward server never asks for more than 60 s.)
        jitter: the share of each wait that is random, in ``[0, 1]``; 0 waits the window or ``Retry-After``
            exactly.
        seed: seeds the jitter's random numbers (for tests); ``None`` draws from the system's entropy.
    """

    deadline_s: float = 300.0
    max_retries: int | None = None
    backoff_s: float = 0.25
    max_backoff_s: float = 60.0
    jitter: float = 1.0
    seed: int | None = None
    _rng: random.Random = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.deadline_s >= 0:
            raise ValueError(f"deadline_s must be >= 0, got {self.deadline_s}")
        if self.max_retries is not None and self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0 or None, got {self.max_retries}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("backoff_s and max_backoff_s must be >= 0")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be in [0, 1], got {self.jitter}")
        object.__setattr__(self, "_rng", random.Random(self.seed))

    def delay_s(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 0), before the deadline's cap."""
        window = min(self.backoff_s * (2**attempt), self.max_backoff_s)
        retry_after = _server_retry_after(response)
        if retry_after is None:
            return window * (1 - self.jitter * self._rng.random())
        spread = self.jitter * max(retry_after, window) * self._rng.random()
        return min(retry_after + spread, self.max_backoff_s)


def _server_retry_after(response: httpx.Response | None) -> float | None:
    """The seconds a response's ``Retry-After`` asks for, or ``None`` without one (or with one that does not parse)."""
    return _parse_retry_after(response.headers.get("Retry-After")) if response is not None else None


def _parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now: either delta-seconds or an HTTP date (RFC 9110, section 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
        return max(0.0, seconds) if math.isfinite(seconds) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Balancer:
    """Picks a server: fewest requests in flight, round-robin among equals, skipping servers that just failed.

    A server that failed is left alone for ``cooldown_s`` (or its ``Retry-After``) while another one is
    healthy, so one dead server does not cost every request a connection error. Thread-safe.
    """

    def __init__(self, base_urls: str | Sequence[str], cooldown_s: float = 5.0) -> None:
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("give at least one reward server URL, e.g. 'http://127.0.0.1:8000'")
        self.urls = [u.rstrip("/") for u in urls]
        self.cooldown_s = cooldown_s
        self._in_flight = dict.fromkeys(self.urls, 0)
        self._down_until = dict.fromkeys(self.urls, 0.0)
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def pick(self, avoid: str | None = None) -> str:
        """The next server to try; ``avoid`` (the one that just failed) only when it is the only one."""
        with self._lock:
            start = next(self._turn)
            order = [self.urls[(start + i) % len(self.urls)] for i in range(len(self.urls))]
            if avoid is not None and len(order) > 1:
                order = [u for u in order if u != avoid]
            now = time.monotonic()
            healthy = [u for u in order if self._down_until[u] <= now]
            return min(healthy or order, key=lambda u: self._in_flight[u])  # min keeps the first of equals

    def mark_failed(self, url: str, for_s: float | None = None) -> None:
        """Skip ``url`` for ``for_s`` seconds (default ``cooldown_s``) while another server is healthy."""
        with self._lock:
            self._down_until[url] = time.monotonic() + max(for_s or 0.0, self.cooldown_s)

    @contextlib.contextmanager
    def in_flight(self, url: str) -> Iterator[None]:
        """Count a request to ``url`` as in flight while the block runs."""
        with self._lock:
            self._in_flight[url] += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight[url] -= 1


def _request_body(
    items: Sequence[RewardItem], components: Mapping[str, ComponentSpec] | None, preset: str | None
) -> dict[str, Any]:
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise ValueError(f"item ids must be unique within a request; repeated: {dupes}")
    return {
        "items": [item.to_json() for item in items],
        "components": None if components is None else dict(components),
        "preset": preset,
    }


def _decode(response: httpx.Response, items: Sequence[RewardItem], url: str) -> list[RewardResult]:
    """Check the answer and return results in the order of ``items``.

    Raises:
        RewardServerError: a non-2xx answer, malformed JSON, or ids that do not match the request's.
    """
    _raise_for_status(response, url, REWARDS_PATH)
    try:
        raw = response.json()["results"]
    except (ValueError, KeyError, TypeError) as exc:
        raise RewardServerError(f"{url} answered without a 'results' list: {response.text[:300]!r}", url=url) from exc
    results = [RewardResult.from_json(r) for r in raw]
    by_id = {r.id: r for r in results}
    expected = [item.id for item in items]
    if len(results) != len(items) or set(by_id) != set(expected):
        missing = sorted(set(expected) - set(by_id))[:5]
        extra = sorted(set(by_id) - set(expected))[:5]
        raise RewardServerError(
            f"{url} returned {len(results)} results for {len(items)} items (missing ids {missing}, "
            f"unexpected ids {extra}); refusing to guess which reward belongs to which completion",
            url=url,
        )
    return [by_id[i] for i in expected]


def _chunks(items: Sequence[RewardItem], size: int) -> Iterator[Sequence[RewardItem]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _give_up(
    url: str, attempts: int, elapsed_s: float, why: str, response: httpx.Response | None, error: Exception | None
) -> RewardServerError:
    what = f"HTTP {response.status_code}" if response is not None else f"{type(error).__name__}: {error}"
    return RewardServerError(
        f"reward server {url} still failing after {attempts} attempts in {elapsed_s:.1f} s ({what}); {why}",
        status_code=None if response is None else response.status_code,
        url=url,
    )


def _auth_headers(api_key: str | None) -> dict[str, str]:
    if api_key is None:
        return {}
    if not api_key or any(c.isspace() for c in api_key):
        raise ValueError("api_key must be a non-empty string without whitespace (check RLVR_API_KEY)")
    return {"Authorization": f"Bearer {api_key}"}


def server_urls_from_env(default: str | Sequence[str] | None = None) -> list[str]:
    """The server URLs in ``RLVR_SERVER_URL`` (comma-separated), else ``default``.

    Raises:
        ValueError: the variable is unset (or blank) and there is no ``default``.
    """
    raw = os.environ.get(SERVER_URL_ENV, "")
    urls = [u.strip() for u in raw.split(",") if u.strip()]
    if urls:
        return urls
    if default is None:
        raise ValueError(
            f"set {SERVER_URL_ENV} to the reward server's URL (several comma-separated), e.g. http://127.0.0.1:8000"
        )
    return [default] if isinstance(default, str) else list(default)


def api_key_from_env() -> str | None:
    """``RLVR_API_KEY``, or ``None`` when it is unset or blank."""
    return os.environ.get(API_KEY_ENV, "").strip() or None


def client_from_env(**kwargs: Any) -> RewardClient:
    """A :class:`RewardClient` for ``RLVR_SERVER_URL`` with the key in ``RLVR_API_KEY``; ``kwargs`` go to it."""
    kwargs.setdefault("api_key", api_key_from_env())
    return RewardClient(server_urls_from_env(), **kwargs)


_HttpClient = TypeVar("_HttpClient", httpx.Client, httpx.AsyncClient)
_T = TypeVar("_T")


class _ClientBase(Generic[_HttpClient]):
    """What the sync and async clients share: arguments, balancing, and the retry loop without its I/O."""

    def __init__(
        self,
        base_urls: str | Sequence[str],
        *,
        client: _HttpClient | None = None,
        timeout_s: float = 120.0,
        retry: RetryPolicy | None = None,
        max_batch_items: int = 1024,
        api_key: str | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_batch_items < 1:
            raise ValueError(f"max_batch_items must be >= 1, got {max_batch_items}")
        self._balancer = _Balancer(base_urls)
        self.timeout_s = timeout_s
        # A server that drops packets (not one that refuses) would otherwise hold each attempt for the whole
        # timeout_s before the retry moves to another server.
        self._timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S))
        # Per request as a (connect, read, write, pool) tuple, which every httpx-compatible client takes: a client
        # passed in may be another implementation's (Starlette's TestClient is httpx2's since 1.10, and httpx2
        # 2.17 refuses an httpx.Timeout object).
        t = self._timeout
        self._request_timeout = (t.connect, t.read, t.write, t.pool)
        self.retry = retry or RetryPolicy()
        self.max_batch_items = max_batch_items
        self._headers = _auth_headers(api_key)
        self._owns_client = client is None
        self._client: _HttpClient = client if client is not None else self._new_client(self._timeout)
        self._pins = SessionPins()
        #: Monotonic seconds, for the retry deadline (tests pass a fake one, with a ``_sleep`` that advances it).
        self._clock: Callable[[], float] = time.monotonic

    def _new_client(self, timeout: httpx.Timeout) -> _HttpClient:
        raise NotImplementedError

    @property
    def base_urls(self) -> list[str]:
        """The servers this client balances over."""
        return list(self._balancer.urls)

    def _attempts(
        self, items: Sequence[RewardItem]
    ) -> Generator[tuple[str, float], tuple[httpx.Response | None, Exception | None], list[RewardResult]]:
        """The retry loop of ``POST /v1/rewards`` without the I/O, shared by the sync and async clients.

        Yields ``(url, wait_s)``: wait ``wait_s``, then POST to ``url`` and send back ``(response, None)`` or
        ``(None, transport_error)``. Returns the decoded results, or raises :class:`RewardServerError`.
        """
        return (yield from self._retrying(lambda response, url: _decode(response, items, url)))

    def _tool_requests(self, calls: Sequence[ToolCall]) -> list[list[list[int]]]:
        """The requests of a tool batch: groups of chunks (indices, at most ``max_batch_items`` each); the chunks
        of a group go to one server, one after the other, the groups at once."""
        size = self.max_batch_items
        groups = self._pins.plan(calls, len(self.base_urls) > 1)
        return [[indices[i : i + size] for i in range(0, len(indices), size)] for indices in groups]

    def _tool_attempts(
        self, calls: Sequence[ToolCall]
    ) -> Generator[tuple[str, float], tuple[httpx.Response | None, Exception | None], tuple[list[ToolResult], str]]:
        """The retry loop of one tool request, to the server that holds its sessions (learnt from earlier answers,
        those of the previous chunk included) or, for new sessions and one-off calls, any server."""
        pinned = next((url for c in calls if (url := self._pins.url(c.session_id)) is not None), None)
        return (yield from self._retrying(lambda response, url: _decode_tools(response, calls, url), pinned))

    def _tool_headers(self, calls: Sequence[ToolCall]) -> dict[str, str]:
        return {**self._headers, ITEMS_HEADER: str(len(calls)), **request_headers(calls)}

    def _close_urls(self, session_id: str) -> list[str]:
        pinned = self._pins.url(session_id)
        self._pins.forget(session_id)
        return [pinned] if pinned is not None else self.base_urls

    def _retrying(
        self, decode: Callable[[httpx.Response, str], _T], pinned: str | None = None
    ) -> Generator[tuple[str, float], tuple[httpx.Response | None, Exception | None], _T]:
        """The retry loop without the I/O: as :meth:`_attempts`, any answer decoded by ``decode(response, url)``;
        every attempt goes to ``pinned`` when given (the server that holds a tool session)."""
        url: str | None = None
        wait_s = 0.0
        policy = self.retry
        start = self._clock()
        for attempt in itertools.count():
            url = pinned or self._balancer.pick(avoid=url)
            response, error = yield url, wait_s
            if response is not None and response.status_code not in RETRY_STATUS_CODES:
                return decode(response, url)
            elapsed_s = self._clock() - start
            if policy.max_retries is not None and attempt >= policy.max_retries:
                why = f"no retries left (RetryPolicy.max_retries={policy.max_retries})"
                raise _give_up(url, attempt + 1, elapsed_s, why, response, error)
            left_s = policy.deadline_s - elapsed_s
            asked_s = _server_retry_after(response)
            if left_s <= 0 or (asked_s is not None and min(asked_s, policy.max_backoff_s) > left_s):
                why = f"the retry deadline of {policy.deadline_s:g} s (RetryPolicy.deadline_s) has passed"
                if left_s > 0:
                    why = (
                        f"the server asks to wait {asked_s:g} s (Retry-After), past the retry deadline of "
                        f"{policy.deadline_s:g} s (RetryPolicy.deadline_s), {left_s:.1f} s from now"
                    )
                raise _give_up(url, attempt + 1, elapsed_s, why, response, error)
            wait_s = min(policy.delay_s(attempt, response), left_s)
            logger.info(
                "reward server %s: attempt %d got %s; retrying in %.2f s (Retry-After: %s; %.1f s left of the "
                "%g s retry deadline)",
                url,
                attempt + 1,
                f"HTTP {response.status_code}" if response is not None else type(error).__name__,
                wait_s,
                "none" if asked_s is None else f"{asked_s:g} s",
                left_s,
                policy.deadline_s,
            )
            self._balancer.mark_failed(url, wait_s)
        raise AssertionError("unreachable")


class RewardClient(_ClientBase[httpx.Client]):
    """Blocking client of ``POST /v1/rewards``.

    Args:
        base_urls: one server URL or several to balance over, e.g. ``"http://127.0.0.1:8000"``.
        client: an ``httpx.Client`` to use (tests pass one with a ``MockTransport``); closed by :meth:`close`
            only when this object created it.
        timeout_s: per-request timeout in seconds (read, write and pool; connecting gets at most
            ``CONNECT_TIMEOUT_S`` of it).
        retry: the :class:`RetryPolicy`.
        max_batch_items: larger batches are split into requests of at most this many items; keep it at or below
            the server's ``max_batch_items``.
        api_key: sent as ``Authorization: Bearer <api_key>`` with every request (the server's ``RLVR_API_KEYS``).

    Raises:
        ValueError: a non-positive ``timeout_s`` or ``max_batch_items``, no URL, or an API key that is blank or
            holds whitespace.
    """

    _sleep: Callable[[float], None] = staticmethod(time.sleep)

    def _new_client(self, timeout: httpx.Timeout) -> httpx.Client:
        return httpx.Client(timeout=timeout)

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP client if this object created it."""
        if self._owns_client:
            self._client.close()

    def score(
        self,
        items: Sequence[RewardItem],
        *,
        components: Mapping[str, ComponentSpec] | None = None,
        preset: str | None = None,
    ) -> list[RewardResult]:
        """Score ``items`` and return one :class:`RewardResult` per item, in the same order.

        Args:
            items: the completions; ids unique.
            components: request-level components (an item's own ``components`` override them).
            preset: request-level preset name.

        Raises:
            ValueError: repeated item ids.
            RewardServerError: a 4xx (names the bad field), or still failing after the retries.
        """
        results: list[RewardResult] = []
        for chunk in _chunks(items, self.max_batch_items):
            results.extend(self._post(chunk, _request_body(chunk, components, preset)))
        return results

    def _post(self, items: Sequence[RewardItem], body: dict[str, Any]) -> list[RewardResult]:
        headers = {**self._headers, ITEMS_HEADER: str(len(items))}
        return self._send(REWARDS_PATH, body, headers, self._attempts(items))

    def run_tools(self, calls: Sequence[ToolCall | Mapping[str, Any] | str]) -> list[ToolResult]:
        """Run Python cells in the server's sandbox (``POST /v1/tools/python``): one result per call, in order.

        Args:
            calls: :class:`ToolCall`, dicts of its fields, or code strings. A call with ``session_id`` keeps
                interpreter state: a name on the first call, then the ``session_id`` its result returned.

        Raises:
            RewardServerError: a 4xx (names the bad field), or still failing after the retries. The program's
                and the sandbox's faults are statuses of the results, never raised.
        """
        todo = as_calls(calls)
        results: list[ToolResult] = [ToolResult(None, "")] * len(todo)
        for indices in (chunk for group in self._tool_requests(todo) for chunk in group):
            part = [todo[i] for i in indices]
            body = {"calls": [c.to_json() for c in part]}
            answers, url = self._send(TOOLS_PATH, body, self._tool_headers(part), self._tool_attempts(part))
            self._pins.learn(url, answers)
            for i, answer in zip(indices, answers, strict=True):
                results[i] = answer
        return results

    def close_tool_session(self, session_id: str) -> bool:
        """Close a tool session (``DELETE /v1/tools/sessions/{id}``); False when no server holds it.

        Raises:
            RewardServerError: an answer other than 204 or 404.
        """
        for url in self._close_urls(session_id):
            response = self._client.delete(url + SESSIONS_PATH + session_id, headers=self._headers)
            if response.status_code == 204:
                return True
            if response.status_code != 404:
                _raise_for_status(response, url, SESSIONS_PATH)
        return False

    def _send(
        self,
        path: str,
        body: dict[str, Any],
        headers: dict[str, str],
        attempts: Generator[tuple[str, float], _Answer, _T],
    ) -> _T:
        url, wait_s = next(attempts)
        while True:
            self._sleep(wait_s)
            with self._balancer.in_flight(url):
                try:
                    response = self._client.post(url + path, json=body, headers=headers, timeout=self._request_timeout)
                    sent: _Answer = (response, None)
                except httpx.TransportError as exc:  # connection refused or reset, timeouts
                    sent = (None, exc)
            try:
                url, wait_s = attempts.send(sent)
            except StopIteration as done:
                return done.value

    def wait_ready(self, timeout_s: float = 120.0, poll_s: float = 0.25, *, require_all: bool = True) -> list[str]:
        """Block until the servers answer ``GET /readyz`` with 200; every server is polled in each round.

        Args:
            timeout_s: how long to wait, in seconds.
            poll_s: pause between rounds, in seconds.
            require_all: wait for every server, and fail if one is not ready in time. With ``False`` the wait still
                lasts until every server is ready or ``timeout_s`` has passed, then goes on with those that are
                ready (the balancer keeps trying the others and uses them once they answer).

        Returns:
            The ready servers' URLs.

        Raises:
            TimeoutError: a server (with ``require_all``) or every server was not ready within ``timeout_s``; the
                message names them.
        """
        deadline = time.monotonic() + timeout_s
        ready: set[str] = set()
        while True:
            ready.update(url for url in self.base_urls if url not in ready and self._is_ready(url))
            if len(ready) == len(self.base_urls) or time.monotonic() > deadline:
                break
            self._sleep(poll_s)
        missing = [url for url in self.base_urls if url not in ready]
        if missing and (require_all or not ready):
            raise TimeoutError(
                f"reward server(s) {', '.join(missing)} not ready after {timeout_s:g} s (GET {READY_PATH}); start "
                "them (python -m reward_server) or correct the URL"
            )
        return [url for url in self.base_urls if url in ready]

    def _is_ready(self, url: str) -> bool:
        try:
            answer = self._client.get(url + READY_PATH, headers=self._headers, timeout=min(5.0, self.timeout_s))
            return answer.status_code == 200
        except httpx.TransportError:
            return False


class AsyncRewardClient(_ClientBase[httpx.AsyncClient]):
    """Asynchronous client of ``POST /v1/rewards``; same arguments and guarantees as :class:`RewardClient`.

    A batch larger than ``max_batch_items`` is split and its requests run concurrently, spread over the servers.
    """

    _sleep: Callable[[float], Awaitable[None]] = staticmethod(asyncio.sleep)

    def _new_client(self, timeout: httpx.Timeout) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=timeout)

    async def __aenter__(self) -> AsyncRewardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it."""
        if self._owns_client:
            await self._client.aclose()

    async def score(
        self,
        items: Sequence[RewardItem],
        *,
        components: Mapping[str, ComponentSpec] | None = None,
        preset: str | None = None,
    ) -> list[RewardResult]:
        """Score ``items``; see :meth:`RewardClient.score`."""
        chunks = list(_chunks(items, self.max_batch_items))
        parts = await asyncio.gather(*(self._post(c, _request_body(c, components, preset)) for c in chunks))
        return [r for part in parts for r in part]

    async def _post(self, items: Sequence[RewardItem], body: dict[str, Any]) -> list[RewardResult]:
        headers = {**self._headers, ITEMS_HEADER: str(len(items))}
        return await self._send(REWARDS_PATH, body, headers, self._attempts(items))

    async def run_tools(self, calls: Sequence[ToolCall | Mapping[str, Any] | str]) -> list[ToolResult]:
        """Run Python cells; see :meth:`RewardClient.run_tools`. Requests to different servers run concurrently."""
        todo = as_calls(calls)
        results: list[ToolResult] = [ToolResult(None, "")] * len(todo)

        async def send(chunks: list[list[int]]) -> None:
            for indices in chunks:  # one after the other: a session's calls keep their order
                part = [todo[i] for i in indices]
                body = {"calls": [c.to_json() for c in part]}
                answers, url = await self._send(TOOLS_PATH, body, self._tool_headers(part), self._tool_attempts(part))
                self._pins.learn(url, answers)
                for i, answer in zip(indices, answers, strict=True):
                    results[i] = answer

        await asyncio.gather(*(send(chunks) for chunks in self._tool_requests(todo)))
        return results

    async def close_tool_session(self, session_id: str) -> bool:
        """Close a tool session; see :meth:`RewardClient.close_tool_session`."""
        for url in self._close_urls(session_id):
            response = await self._client.delete(url + SESSIONS_PATH + session_id, headers=self._headers)
            if response.status_code == 204:
                return True
            if response.status_code != 404:
                _raise_for_status(response, url, SESSIONS_PATH)
        return False

    async def _send(
        self,
        path: str,
        body: dict[str, Any],
        headers: dict[str, str],
        attempts: Generator[tuple[str, float], _Answer, _T],
    ) -> _T:
        url, wait_s = next(attempts)
        while True:
            await self._sleep(wait_s)
            with self._balancer.in_flight(url):
                try:
                    response = await self._client.post(
                        url + path, json=body, headers=headers, timeout=self._request_timeout
                    )
                    sent: _Answer = (response, None)
                except httpx.TransportError as exc:
                    sent = (None, exc)
            try:
                url, wait_s = attempts.send(sent)
            except StopIteration as done:
                return done.value
