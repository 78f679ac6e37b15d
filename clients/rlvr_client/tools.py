"""The wire types of ``POST /v1/tools/python`` and the client's routing of tool sessions. Standard library only.

A session lives on the server instance that opened it: its full id is ``"<name>@<instance>"``. The client
remembers which URL answered each session and sends its later calls there (:class:`SessionPins`); with one URL
(a single server, or the nginx balancer of ``docker-compose.scale.yml``) every request carries the
``X-RLVR-Session`` header with its session name when it has one session, which the balancer hashes on.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TOOLS_PATH = "/v1/tools/python"
SESSIONS_PATH = "/v1/tools/sessions/"
#: The header a balancer routes tool calls by (``docker/lb/nginx.conf.template`` hashes on it).
SESSION_HEADER = "X-RLVR-Session"

#: A result the caller should act on rather than read as the program's output (start a new session, retry).
INFRASTRUCTURE_STATUSES = frozenset({"sandbox_error", "session_lost", "session_limit"})


@dataclass(frozen=True)
class ToolCall:
    """One Python cell: ``session_id`` (a name on first use, then the full id returned) keeps interpreter state."""

    code: str
    session_id: str | None = None
    timeout_s: float | None = None
    id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "session_id": self.session_id, "timeout_s": self.timeout_s, "id": self.id}


@dataclass(frozen=True)
class ToolResult:
    """One call's outcome (see ``docs/tools.md`` for the statuses); ``time_s`` in seconds."""

    id: str | None
    status: str
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    time_s: float = 0.0
    session_id: str | None = None
    replayed: int = 0
    detail: str | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ToolResult:
        return cls(
            id=raw.get("id"),
            status=str(raw["status"]),
            stdout=str(raw.get("stdout", "")),
            stderr=str(raw.get("stderr", "")),
            truncated=bool(raw.get("truncated", False)),
            time_s=float(raw.get("time_s", 0.0)),
            session_id=raw.get("session_id"),
            replayed=int(raw.get("replayed", 0)),
            detail=raw.get("detail"),
        )

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def as_calls(calls: Sequence[ToolCall | Mapping[str, Any] | str]) -> list[ToolCall]:
    """Calls given as :class:`ToolCall`, dicts of its fields, or bare code strings.

    Raises:
        TypeError: an element of another type; ValueError: a dict without ``code``.
    """
    out: list[ToolCall] = []
    for call in calls:
        if isinstance(call, ToolCall):
            out.append(call)
        elif isinstance(call, str):
            out.append(ToolCall(call))
        elif isinstance(call, Mapping):
            if "code" not in call:
                raise ValueError(f"a tool call needs 'code': {dict(call)!r}")
            out.append(ToolCall(**call))
        else:
            raise TypeError(f"a tool call is a ToolCall, a dict or a code string, not {type(call).__name__}")
    return out


def session_name(session_id: str) -> str:
    """The name part of a session id (``"r1@abc" -> "r1"``), what a balancer hashes on."""
    return session_id.partition("@")[0]


class SessionPins:
    """Which server URL holds each session, learnt from the answers. Thread-safe."""

    def __init__(self) -> None:
        self._url: dict[str, str] = {}
        self._lock = threading.Lock()

    def url(self, session_id: str | None) -> str | None:
        if session_id is None:
            return None
        with self._lock:
            return self._url.get(session_id)

    def learn(self, url: str, results: Sequence[ToolResult]) -> None:
        """Remember the server of each session in ``results`` (under its full id and its name, so that later calls
        with the name alone go there too); forget lost ones."""
        with self._lock:
            for r in results:
                if r.session_id is None or r.status == "session_limit":
                    continue
                for key in (r.session_id, session_name(r.session_id)):
                    if r.status == "session_lost":
                        self._url.pop(key, None)
                    else:
                        self._url[key] = url

    def forget(self, session_id: str) -> None:
        with self._lock:
            for key in (session_id, session_name(session_id)):
                self._url.pop(key, None)

    def plan(self, calls: Sequence[ToolCall], several_urls: bool) -> list[list[int]]:
        """The calls' indices grouped by the server they must reach.

        With one URL, one group holds every call. With several: one group per server that holds some of the
        calls' sessions, one per new session (its calls must reach the server its first call opens it on), and
        one for the calls without a session.
        """
        if not several_urls:
            return [list(range(len(calls)))]
        groups: dict[str, list[int]] = {}
        for i, call in enumerate(calls):
            url = self.url(call.session_id)
            key = f"url:{url}" if url is not None else f"new:{call.session_id}" if call.session_id else "none"
            groups.setdefault(key, []).append(i)
        return list(groups.values())


def request_headers(calls: Sequence[ToolCall]) -> dict[str, str]:
    """``X-RLVR-Session: <name>`` when the calls use exactly one session, else nothing."""
    names = {session_name(c.session_id) for c in calls if c.session_id is not None}
    return {SESSION_HEADER: names.pop()} if len(names) == 1 else {}


def decode_results(payload: Any, calls: Sequence[ToolCall]) -> list[ToolResult]:
    """The results of a batch answer, checked: one per call, in order, ids echoed.

    Raises:
        ValueError: the answer does not match the calls (the message says how).
    """
    raw = payload["results"] if isinstance(payload, Mapping) else None
    if not isinstance(raw, list) or len(raw) != len(calls):
        raise ValueError(f"expected {len(calls)} results in a 'results' list, got {str(payload)[:300]!r}")
    results = [ToolResult.from_json(r) for r in raw]
    for call, result in zip(calls, results, strict=True):
        if call.id is not None and result.id != call.id:
            raise ValueError(f"result id {result.id!r} where {call.id!r} was expected: the order is not the calls'")
    return results


def tool_text(result: ToolResult) -> str:
    """What the model reads back from a call: stdout, then stderr (the traceback) when there is any, then a line
    for a status other than ``ok`` or ``error`` (a limit, or the server's fault) and for cut output."""
    parts = [result.stdout]
    if result.stderr:
        parts.append(result.stderr)
    if result.status not in ("ok", "error"):
        parts.append(f"[{result.status}: {result.detail or 'no detail'}]")
    if result.truncated:
        parts.append("[output truncated]")
    return "\n".join(p.rstrip("\n") for p in parts if p)
