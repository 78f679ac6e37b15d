"""Tool calls for rollouts: Python cells run in the sandbox, alone or in sessions that keep interpreter state.

No HTTP here: the router (:mod:`reward_server.routers.tools`) validates and admits, this module runs.

A session is the replay log of its calls (see :mod:`reward_server.engine.tool_replay`): each call runs in a
fresh sandbox job that first replays the session's earlier cells with their output thrown away. Nothing lives
between calls but the log, in this process's memory, so no sandbox is held by an idle session, no state can
leak from one session to another, and a session lost to a restart is one whose id names another instance.

Session ids: the caller picks a name; the server answers ``"<name>@<instance>"`` and expects that full id
back. An id of another instance, or one this instance closed, expired or never opened, is ``session_lost``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reward_server.engine.tool_replay import FINISHED, REPLAYED, WRAPPER_FILE, replay_files
from sandbox import ExecResult, Limits, Sandbox, Status
from sandbox.languages import PYTHON

#: The statuses of a tool result (the wire's vocabulary, ``docs/tools.md``).
TOOL_STATUSES = (
    "ok",
    "error",
    "timeout",
    "memory_limit",
    "output_limit",
    "sandbox_error",
    "session_lost",
    "session_limit",
)

_FROM_SANDBOX = {
    Status.OK: "ok",
    Status.RUNTIME_ERROR: "error",
    Status.TIMEOUT: "timeout",
    Status.MEMORY_LIMIT: "memory_limit",
    Status.OUTPUT_LIMIT: "output_limit",
}
_REPLAYED = ("ok", "error")
"""Calls whose cell joins the session's log when it ran to its end or raised (as a REPL keeps their state). A call
that hit a limit, or ended the interpreter itself (``os._exit``), is left out: it would do it again at every later
call."""


@dataclass(frozen=True, slots=True)
class ToolConfig:
    """The server's tool limits (``RLVR_TOOL_*``).

    Attributes:
        limits: the sandbox limits of one call (``time_s`` is its default CPU time, s; ``memory_mb`` the
            session's memory limit, MiB; ``output_bytes`` past which a call is ``output_limit``).
        max_time_s: the largest ``timeout_s`` a call may ask for, in seconds.
        max_output_chars: stdout and stderr kept in a result, each, in characters (stdout's start, stderr's end).
        session_ttl_s: a session unused this long is closed, in seconds.
        max_sessions: sessions open at once; a new one past it is ``session_limit``.
        max_session_calls: calls in one session's log; one more is ``session_limit``.
        max_session_bytes: UTF-8 bytes of source in one session's log, the new call's included; more is
            ``session_limit`` (the logs are this process's memory: at most ``max_sessions`` times this).
    """

    limits: Limits
    max_time_s: float
    max_output_chars: int
    session_ttl_s: float
    max_sessions: int
    max_session_calls: int
    max_session_bytes: int


@dataclass(frozen=True, slots=True)
class ToolCall:
    code: str
    session_id: str | None = None
    timeout_s: float | None = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One call's outcome. ``time_s`` is the wall-clock time of the whole job (replay included), in seconds;
    ``replayed`` the number of the session's earlier cells run again before this one."""

    id: str | None
    status: str
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    time_s: float = 0.0
    session_id: str | None = None
    replayed: int = 0
    detail: str | None = None


@dataclass(slots=True)
class _Session:
    cells: list[str] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    size: int = 0
    last_used: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ToolSessions:
    """The open sessions of one server instance, and the runner of tool calls.

    ``clock`` is injectable for tests (monotonic seconds).
    """

    def __init__(self, instance: str, config: ToolConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.instance = instance
        self.config = config
        self._clock = clock
        self._sessions: dict[str, _Session] = {}

    @property
    def open(self) -> int:
        """Sessions open now (expired ones are dropped first)."""
        self._expire()
        return len(self._sessions)

    def full_id(self, session_id: str) -> str:
        """The id the server uses for ``session_id``: ``"<name>@<instance>"`` (unchanged when it has one)."""
        return session_id if "@" in session_id else f"{session_id}@{self.instance}"

    def close(self, session_id: str) -> bool:
        """Close a session; False when it is not open here."""
        self._expire()
        return self._sessions.pop(self.full_id(session_id), None) is not None

    def clear(self) -> None:
        self._sessions.clear()

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._sessions.items() if now - s.last_used > self.config.session_ttl_s]:
            if not self._sessions[key].lock.locked():
                del self._sessions[key]

    def _session(self, session_id: str) -> tuple[_Session | None, str, str, str | None]:
        """The session for a call (opened on a name's first use) and its full id; else the status and why."""
        self._expire()
        full = self.full_id(session_id)
        instance = full.rpartition("@")[2]
        session = self._sessions.get(full)
        if session is not None:
            return session, full, "ok", None
        if instance != self.instance:
            why = (
                f"session {full!r} belongs to server instance {instance!r}, not this one ({self.instance!r}): "
                "it was lost to a restart or is served elsewhere"
            )
            return None, full, "session_lost", why
        if "@" in session_id:
            why = (
                f"session {full!r} is not open here: closed, expired after {self.config.session_ttl_s:g} s "
                "unused (RLVR_TOOL_SESSION_TTL_S), or never opened"
            )
            return None, full, "session_lost", why
        if len(self._sessions) >= self.config.max_sessions:
            why = (
                f"{len(self._sessions)} sessions are open, the most this server allows (RLVR_TOOL_MAX_SESSIONS); "
                "close finished ones (DELETE /v1/tools/sessions/{session_id})"
            )
            return None, full, "session_limit", why
        session = self._sessions[full] = _Session(last_used=self._clock())
        return session, full, "ok", None

    async def run(self, sandbox: Sandbox, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Run ``calls``: the calls of one session one after the other in their order, all else at once.

        Returns one result per call, in order. Never raises for the program's or the sandbox's faults.
        """
        results: list[ToolResult | None] = [None] * len(calls)
        chains: dict[str, list[int]] = {}
        for i, call in enumerate(calls):
            key = self.full_id(call.session_id) if call.session_id is not None else f"#{i}"
            chains.setdefault(key, []).append(i)

        async def chain(indices: list[int]) -> None:
            for i in indices:
                results[i] = await self._run_one(sandbox, calls[i])

        await asyncio.gather(*(chain(indices) for indices in chains.values()))
        return [r for r in results if r is not None]

    async def _run_one(self, sandbox: Sandbox, call: ToolCall) -> ToolResult:
        if call.session_id is None:
            result, _, _ = await self._execute(sandbox, call, [], 0.0)
            return result
        session, full, status, why = self._session(call.session_id)
        if session is None:
            return ToolResult(call.id, status, session_id=full, detail=why)
        async with session.lock:
            if len(session.cells) >= self.config.max_session_calls:
                why = (
                    f"the session has run {len(session.cells)} calls, the most one session may "
                    "(RLVR_TOOL_MAX_SESSION_CALLS); open a new one"
                )
                return ToolResult(call.id, "session_limit", session_id=full, detail=why)
            size = len(call.code.encode("utf-8", "surrogatepass"))
            if session.size + size > self.config.max_session_bytes:
                why = (
                    f"the session's calls would hold {session.size + size} bytes of source, over the "
                    f"{self.config.max_session_bytes} one session may (RLVR_TOOL_MAX_SESSION_BYTES); open a new one"
                )
                return ToolResult(call.id, "session_limit", session_id=full, detail=why)
            result, finished, cpu_s = await self._execute(sandbox, call, session.cells, sum(session.cpu_s))
            session.last_used = self._clock()
            if self._sessions.get(full) is not session:  # closed (or expired) while the call ran
                return dataclasses.replace(result, status="session_lost", session_id=full, detail="closed meanwhile")
            if result.status in _REPLAYED and finished:
                session.cells.append(call.code)
                session.cpu_s.append(cpu_s)
                session.size += size
        return dataclasses.replace(result, session_id=full)

    async def _execute(
        self, sandbox: Sandbox, call: ToolCall, earlier: list[str], replay_cpu_s: float
    ) -> tuple[ToolResult, bool, float]:
        """Run ``call`` after replaying ``earlier``: the result, whether the cell ran to its end or raised (rather
        than end the interpreter), and the CPU time of the call's own cell (s)."""
        own = min(call.timeout_s or self.config.limits.time_s, self.config.max_time_s)
        # The replay gets the CPU time it took the first time (and half again for noise) on top of the call's own.
        limits = dataclasses.replace(self.config.limits, time_s=own + 1.5 * replay_cpu_s)
        cells = [*earlier, call.code]
        async with sandbox.job(replay_files(cells)) as job:
            run = await job.exec((PYTHON, WRAPPER_FILE, str(len(cells))), limits=limits, channel=True)
        status = _FROM_SANDBOX.get(run.status, "sandbox_error")
        detail = run.detail if status != "ok" else None
        if status in ("ok", "error") and REPLAYED not in run.channel:
            # Only a cell that ends the interpreter stops a replay; such a cell is never logged, so the replay
            # differed from the first run (a cell that depends on time, randomness or the outside).
            status, detail = "error", "the session's earlier cells did not run again as they did the first time"
        finished = FINISHED in run.channel
        stdout, stderr, cut = self._texts(run)
        result = ToolResult(
            call.id,
            status,
            stdout=stdout,
            stderr=stderr,
            truncated=cut,
            time_s=run.time_s,
            replayed=len(earlier),
            detail=detail,
        )
        return result, finished, max(0.0, run.cpu_s - replay_cpu_s)

    def _texts(self, run: ExecResult) -> tuple[str, str, bool]:
        """stdout's start and stderr's end within ``max_output_chars`` each, and whether anything was cut."""
        limit = self.config.max_output_chars
        out = run.stdout.decode("utf-8", "replace")
        err = run.stderr.decode("utf-8", "replace")
        cut = run.stdout_truncated or run.stderr_truncated or len(out) > limit or len(err) > limit
        return out[:limit], (err[-limit:] if limit else ""), cut
