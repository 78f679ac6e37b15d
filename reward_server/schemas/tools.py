"""Request/result models of ``POST /v1/tools/python``: Python cells run for a rollout, alone or in sessions."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from reward_server.engine.tools import ToolCall, ToolResult

ToolStatus = Literal[
    "ok", "error", "timeout", "memory_limit", "output_limit", "sandbox_error", "session_lost", "session_limit"
]

_STATUS_DOC = (
    "`ok`; `error` (the code raised or exited non-zero: the traceback is in `stderr`); `timeout`, "
    "`memory_limit`, `output_limit` (a limit was hit); `sandbox_error` (our fault: retry, never the program's); "
    "`session_lost` (the session is not open on this server: it was lost to a restart or a drain, expired, was "
    "closed, or belongs to another instance; open a new one); `session_limit` (too many open sessions, or too "
    "many calls in this one)."
)


class _CallOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelled field (`sesion_id`) is a 422, never a silent default

    session_id: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        pattern=r"^[^@]+(@[^@]+)?$",
        description="Keep interpreter state across calls: a name of your choice on the first call, then the "
        "full id the first result returned (`<name>@<server instance>`). Null: a one-off interpreter.",
        examples=["rollout-17"],
    )
    timeout_s: float | None = Field(
        None,
        gt=0,
        le=600,
        allow_inf_nan=False,
        description="CPU-time limit of the cell, in seconds (default `RLVR_TOOL_TIME_S`), capped by "
        "`RLVR_TOOL_MAX_TIME_S`. A session's replayed cells get their own time on top.",
    )
    id: str | None = Field(None, max_length=256, description="Echoed in the result, to match results to calls.")


class ToolCallIn(_CallOptions):
    """One Python cell to run."""

    code: str = Field(description="Python source of the cell.", examples=["print(12345 * 6789)"])

    def to_call(self) -> ToolCall:
        return ToolCall(self.code, self.session_id, self.timeout_s, self.id)


class ToolRequest(_CallOptions):
    """One call (`code` and its options, answered by one result) or a batch (`calls` alone, answered by
    `{"results": [...]}` in order; calls of one session run one after the other, the others at once)."""

    code: str | None = Field(None, description="Python source of a single call.", examples=["print(12345 * 6789)"])
    calls: list[ToolCallIn] | None = Field(None, description="A batch of calls, answered in the same order.")

    def to_calls(self) -> list[ToolCall]:
        """The calls of the request (one for a single call)."""
        if self.calls is not None:
            return [c.to_call() for c in self.calls]
        return [ToolCall(self.code or "", self.session_id, self.timeout_s, self.id)]


class ToolResultOut(BaseModel):
    id: str | None = Field(description="The call's `id`.")
    status: ToolStatus = Field(description=_STATUS_DOC, examples=["ok"])
    stdout: str = Field(description="The start of standard output (`RLVR_TOOL_MAX_OUTPUT_CHARS` characters).")
    stderr: str = Field(description="The end of standard error (`RLVR_TOOL_MAX_OUTPUT_CHARS` characters).")
    truncated: bool = Field(description="`stdout` or `stderr` was cut.")
    time_s: float = Field(description="Wall-clock time of the call (a session's replay included), in seconds.")
    session_id: str | None = Field(description="The full session id to send back on the next call; null: none.")
    replayed: int = Field(0, description="The session's earlier cells run again before this one.")
    detail: str | None = Field(None, description="Why, in words, when `status` is not `ok`.")

    @classmethod
    def from_result(cls, result: ToolResult) -> ToolResultOut:
        return cls.model_validate(result, from_attributes=True)


class ToolBatchOut(BaseModel):
    results: list[ToolResultOut] = Field(description="One result per call, in order.")
