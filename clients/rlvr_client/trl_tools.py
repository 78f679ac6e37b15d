"""A sandboxed Python tool for TRL's ``GRPOTrainer`` (tested with TRL 1.16.0): ``tools=[python_tool()]``, or,
to keep the interpreter's state across the calls of one rollout, ``environment_factory=PythonSession``.

TRL builds each tool's JSON schema from the function's type hints and Google-style docstring
(``transformers.utils.get_json_schema``) and puts what it returns, as text, in a ``tool`` message. Both forms run
the code through the reward server's ``POST /v1/tools/python`` (``RLVR_SERVER_URL``, ``RLVR_API_KEY``), in its
sandbox; a limit hit or a server-side fault comes back as a line the model reads (``[timeout: ...]``), never as
an exception that would end the step.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from rlvr_client.client import RewardClient, client_from_env
from rlvr_client.tools import ToolCall, tool_text

__all__ = ["PythonSession", "python_tool"]


def python_tool(client: RewardClient | None = None, *, timeout_s: float | None = None) -> Callable[[str], str]:
    """A ``python(code)`` tool for ``GRPOTrainer(tools=[...])``: each call runs in a fresh interpreter.

    Args:
        client: the reward server's client (default: :func:`rlvr_client.client.client_from_env`).
        timeout_s: CPU-time limit of one call, in seconds (default: the server's ``RLVR_TOOL_TIME_S``).
    """
    owned = client or client_from_env()

    def python(code: str) -> str:
        """Run Python code in a sandbox and return what it printed (stdout, then any error).

        Args:
            code: A complete Python program; use print() to show results.
        """
        [result] = owned.run_tools([ToolCall(code, timeout_s=timeout_s)])
        return tool_text(result)

    return python


class PythonSession:
    """An ``environment_factory`` for ``GRPOTrainer``: one interpreter per rollout, whose variables persist
    between the rollout's tool calls (a server-side session, closed at the next ``reset``).

    ``GRPOTrainer(environment_factory=PythonSession)`` exposes :meth:`python` as the tool (TRL takes every public
    method but ``reset`` as one).
    """

    client: RewardClient | None = None
    """Shared by every instance (default: :func:`rlvr_client.client.client_from_env` on first use)."""
    timeout_s: float | None = None

    def __init__(self) -> None:
        self._session: str | None = None

    def reset(self, **kwargs: Any) -> None:
        """Start a new rollout: close the last one's session, if any (TRL passes the dataset row)."""
        self._close()
        self._session = f"trl-{uuid.uuid4().hex}"

    def _close(self) -> None:
        if self._session is not None and "@" in self._session:
            self._client().close_tool_session(self._session)
        self._session = None

    @classmethod
    def _client(cls) -> RewardClient:
        if cls.client is None:
            cls.client = client_from_env()
        return cls.client

    def python(self, code: str) -> str:
        """Run Python code in a sandboxed interpreter that keeps its variables between calls; returns what it
        printed (stdout, then any error).

        Args:
            code: Python code to run; use print() to show results.
        """
        if self._session is None:
            self.reset()
        [result] = self._client().run_tools([ToolCall(code, self._session, self.timeout_s)])
        if result.status == "session_lost":  # the server restarted: the next call opens a new, empty session
            self._session = result.session_id.partition("@")[0] if result.session_id else None
        elif result.session_id is not None:
            self._session = result.session_id
        return tool_text(result)
