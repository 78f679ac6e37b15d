"""The trainer's client of ``POST /v1/tools/python``: one batched request per generation turn of a chunk.

The contract: the request is ``{"calls": [{"code", "session_id", "timeout_s", "id"}, ...]}``, the answer
``{"results": [...]}`` in the same order, each with ``id``, ``status``, ``stdout``, ``stderr``, ``truncated``,
``time_s``, ``session_id``, ``replayed`` and ``detail``. A session's first call sends the id the trainer chose;
the server answers with the full id ``"<given>@<instance>"``, and every later call of that rollout sends the full
id back (it names the server instance that holds the interpreter).

Statuses: ``ok`` and ``error`` are the program's; ``timeout``, ``memory_limit`` and ``output_limit`` are limits the
program hit (the model reads about them and goes on); ``sandbox_error``, ``session_lost`` and ``session_limit`` are
the infrastructure's (:data:`INFRASTRUCTURE_STATUSES`): the rollout cannot go on as the model would expect, so the
loop ends it and keeps it out of the loss (:mod:`trainer.tools.rollout`).

The trainer reaches the server only over HTTP (httpx), never through its internals.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from rlvr_client.client import RetryPolicy

logger = logging.getLogger("trainer")

TOOLS_PATH = "/v1/tools/python"
SESSIONS_PATH = "/v1/tools/sessions"
#: The header that lets a load balancer route a request to the instance holding its session.
SESSION_HEADER = "X-RLVR-Session"
STATUSES = ("ok", "error", "timeout", "memory_limit", "output_limit", "sandbox_error", "session_lost", "session_limit")
#: Statuses that are the infrastructure's fault, never the program's.
INFRASTRUCTURE_STATUSES = frozenset({"sandbox_error", "session_lost", "session_limit"})
_RETRYABLE = frozenset({429, 502, 503, 504})


class ToolServerError(RuntimeError):
    """The tool server refused a batch (4xx), answered out of contract, or stayed unreachable past the deadline."""


@dataclass(frozen=True)
class ToolRequest:
    """One call to run.

    Attributes:
        id: echoed back in the result.
        code: the Python source.
        session_id: the rollout's session: the id chosen by the trainer on its first call, the server's full
            ``"<given>@<instance>"`` id afterwards; ``None`` runs without a session.
        timeout_s: the call's time limit in seconds; ``None``: the server's default.
    """

    id: str
    code: str
    session_id: str | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class ToolResult:
    """One call's result (see the module docstring for the statuses).

    Attributes:
        id: the request's id.
        status: one of :data:`STATUSES`.
        stdout, stderr: the program's output, as the server truncated it.
        truncated: the server cut the output.
        time_s: seconds the call ran.
        session_id: the full session id to send with the rollout's next call, or ``None``.
        replayed: the session's earlier cells the server ran again before this one (its replay log).
        detail: the server's reason, in words, when ``status`` is not ``ok``.
    """

    id: str
    status: str
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    time_s: float = 0.0
    session_id: str | None = None
    replayed: int = 0
    detail: str | None = None

    @property
    def infrastructure_failure(self) -> bool:
        """The sandbox or the session failed, not the program."""
        return self.status in INFRASTRUCTURE_STATUSES


class ToolClient(Protocol):
    """Runs a batch of calls; one result per request, in order."""

    def run(self, requests: Sequence[ToolRequest]) -> list[ToolResult]: ...

    def close_sessions(self, session_ids: Sequence[str]) -> int: ...

    def close(self) -> None: ...


class HttpToolClient:
    """Batched ``POST /v1/tools/python`` over httpx, retried on connection errors, 429, 502, 503 and 504 (each wait
    at least the server's ``Retry-After``) until ``retry_deadline_s`` has passed.

    With several URLs, a session stays on the URL its id hashes to (the instance that holds its interpreter); the
    calls of one :meth:`run` go out as one request per URL.

    Args:
        base_urls: the servers (the reward servers by default: they serve both routes).
        api_key: sent as ``Authorization: Bearer <key>``, as the reward client sends it.
        retry_deadline_s: how long a batch is retried, from its first attempt, in seconds.
        client: an ``httpx.Client`` to use (tests pass a ``MockTransport``); by default one is built and closed by
            :meth:`close`.

    Raises:
        ValueError: no URL, or an API key with whitespace.
    """

    def __init__(
        self,
        base_urls: str | Sequence[str],
        *,
        api_key: str | None = None,
        retry_deadline_s: float = 300.0,
        client: httpx.Client | None = None,
    ) -> None:
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("tool_server_urls: give at least one URL")
        self.base_urls = [u.rstrip("/") for u in urls]
        if api_key is not None and (not api_key or any(c.isspace() for c in api_key)):
            raise ValueError("the API key must be a non-empty string without whitespace (check RLVR_API_KEY)")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.retry = RetryPolicy(deadline_s=retry_deadline_s)
        self._client = client or httpx.Client(timeout=httpx.Timeout(retry_deadline_s + 30.0, connect=10.0))
        self._owns_client = client is None

    def url_for(self, session_id: str | None) -> str:
        """The URL a session's calls go to (the part before ``@`` decides, so the given and the full id agree)."""
        if session_id is None or len(self.base_urls) == 1:
            return self.base_urls[0]
        key = session_id.split("@", 1)[0].encode()
        return self.base_urls[int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") % len(self.base_urls)]

    def run(self, requests: Sequence[ToolRequest]) -> list[ToolResult]:
        """Run ``requests``: one POST per URL; results in request order.

        Raises:
            ToolServerError: a refused batch (4xx other than 429), an answer out of contract, or a server that stayed
                unreachable or busy past the deadline.
        """
        by_url: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            by_url.setdefault(self.url_for(r.session_id), []).append(i)
        out: list[ToolResult | None] = [None] * len(requests)
        for url, indices in by_url.items():
            for i, result in zip(indices, self._post(url, [requests[i] for i in indices]), strict=True):
                out[i] = result
        return [r for r in out if r is not None]

    def _post(self, url: str, requests: Sequence[ToolRequest]) -> list[ToolResult]:
        body = {
            "calls": [
                {"code": r.code, "session_id": r.session_id, "timeout_s": r.timeout_s, "id": r.id} for r in requests
            ]
        }
        headers = dict(self._headers)
        sessions = {r.session_id for r in requests}
        if len(sessions) == 1 and None not in sessions:
            headers[SESSION_HEADER] = str(next(iter(sessions)))
        started, attempt = time.monotonic(), 0
        while True:
            response: httpx.Response | None = None
            try:
                response = self._client.post(url + TOOLS_PATH, json=body, headers=headers)
                why = f"answered {response.status_code}"
            except httpx.TransportError as exc:
                why = f"unreachable ({type(exc).__name__}: {exc})"
            if response is not None and response.status_code == 200:
                return _parse(response, requests, url)
            if response is not None and response.status_code not in _RETRYABLE:
                raise ToolServerError(f"{url}{TOOLS_PATH} {why}: {response.text[:500]}")
            left = self.retry.deadline_s - (time.monotonic() - started)
            wait = self.retry.delay_s(attempt, response)
            if wait > left:
                raise ToolServerError(
                    f"{url}{TOOLS_PATH} {why}; gave up after {attempt + 1} attempts in "
                    f"{time.monotonic() - started:.1f} s (tool_retry_deadline_s={self.retry.deadline_s:g})"
                )
            logger.info("tool server %s %s; retrying in %.2f s", url, why, wait)
            time.sleep(wait)
            attempt += 1

    def close_sessions(self, session_ids: Sequence[str]) -> int:
        """Close finished rollouts' sessions (``DELETE /v1/tools/sessions/{id}`` at each one's server), so that they
        free the server's session cap now rather than at its TTL. Best effort: a session already gone (404) or a
        server that does not answer is logged, never raised, since the rollout is over either way.

        Args:
            session_ids: full ``<given>@<instance>`` ids, as the server returned them.

        Returns:
            How many the servers closed (answered 204).
        """
        closed = 0
        for session_id in session_ids:
            url = f"{self.url_for(session_id)}{SESSIONS_PATH}/{quote(session_id, safe='')}"
            try:
                response = self._client.delete(url, headers={**self._headers, SESSION_HEADER: session_id})
            except httpx.TransportError as exc:
                logger.warning(
                    "closing tool session %s: %s unreachable (%s); its TTL will free it", session_id, url, exc
                )
                return closed
            if response.status_code == 204:
                closed += 1
            elif response.status_code != 404:
                logger.warning("closing tool session %s: %s answered %d", session_id, url, response.status_code)
        return closed

    def close(self) -> None:
        """Close the HTTP client (when this object built it)."""
        if self._owns_client:
            self._client.close()


def _parse(response: httpx.Response, requests: Sequence[ToolRequest], url: str) -> list[ToolResult]:
    """The results of a 200 answer, checked against the contract: one per call, in order, ids echoed."""
    try:
        raw: Any = response.json()["results"]
        results = [
            ToolResult(
                id=str(r["id"]),
                status=str(r["status"]),
                stdout=str(r.get("stdout") or ""),
                stderr=str(r.get("stderr") or ""),
                truncated=bool(r.get("truncated", False)),
                time_s=float(r.get("time_s") or 0.0),
                session_id=r.get("session_id"),
                replayed=int(r.get("replayed") or 0),
                detail=r.get("detail"),
            )
            for r in raw
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise ToolServerError(f"{url}{TOOLS_PATH} answered out of contract ({exc!r}): {response.text[:300]}") from exc
    if [r.id for r in results] != [q.id for q in requests]:
        raise ToolServerError(
            f"{url}{TOOLS_PATH} answered {len(results)} results for {len(requests)} calls, or in another order"
        )
    return results
