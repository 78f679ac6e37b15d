"""A verl tool (``verl.tools.base_tool.BaseTool``, tested with verl 0.9.1) that runs Python in the reward
server's sandbox: one interpreter session per trajectory, its variables kept between the trajectory's calls.

In verl's tool config (``actor_rollout_ref.rollout.multi_turn.tool_config_path``)::

    tools:
      - class_name: rlvr_client.verl_tools.SandboxPythonTool
        config: {type: native, timeout_s: 5}

``tool_schema`` may be left out: the tool's own is ``code_interpreter(code: str)``. The server is
``RLVR_SERVER_URL`` (``RLVR_API_KEY``), or ``config.server_url``. A limit hit or a server-side fault is text the
model reads, and counted in the tool metrics (``status``), never an exception that ends the rollout.
"""

from __future__ import annotations

from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rlvr_client._batching import async_client
from rlvr_client.client import AsyncRewardClient, api_key_from_env
from rlvr_client.tools import ToolCall, tool_text

__all__ = ["SandboxPythonTool"]

DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "Run Python code in a sandboxed interpreter that keeps its variables between calls; "
        "returns what it printed (stdout, then any error).",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python code; use print() to show results."}},
            "required": ["code"],
        },
    },
}


class SandboxPythonTool(BaseTool):
    """verl's ``BaseTool`` backed by ``POST /v1/tools/python``.

    Config keys: ``timeout_s`` (CPU-time limit of one call, s), ``server_url`` (else ``RLVR_SERVER_URL``).
    """

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        self.timeout_s: float | None = config.get("timeout_s")
        self.server_url: str | None = config.get("server_url")
        self._sessions: dict[str, str] = {}
        super().__init__(config, tool_schema)

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        schema = getattr(self, "tool_schema", None)
        return schema if schema is not None else OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)

    def _client(self) -> AsyncRewardClient:
        if self.server_url is None:
            return async_client()
        return AsyncRewardClient(self.server_url, api_key=api_key_from_env())

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id, response = await super().create(instance_id, **kwargs)
        self._sessions[instance_id] = f"verl-{instance_id}"
        return instance_id, response

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        code = parameters.get("code")
        if not isinstance(code, str):
            return ToolResponse(text="Error: the tool needs a 'code' string."), 0.0, {"status": "bad_arguments"}
        session = self._sessions.setdefault(instance_id, f"verl-{instance_id}")
        client = self._client()
        try:
            [result] = await client.run_tools([ToolCall(code, session, self.timeout_s)])
        finally:
            if self.server_url is not None:
                await client.aclose()
        if result.status == "session_lost":
            self._sessions[instance_id] = f"verl-{instance_id}"  # the server restarted: a new, empty session
        elif result.session_id is not None:
            self._sessions[instance_id] = result.session_id
        metrics = {"status": result.status, "time_s": result.time_s}
        return ToolResponse(text=tool_text(result)), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        session = self._sessions.pop(instance_id, None)
        if session is not None and "@" in session:
            client = self._client()
            try:
                await client.close_tool_session(session)
            finally:
                if self.server_url is not None:
                    await client.aclose()
