"""The client's tool calls (``run_tools``, ``close_tool_session``) against two real servers: each session's calls
reach the server that holds it, batches keep their order, and the balancer's header names the session."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from reward_server.app import create_app
from rlvr_client import AsyncRewardClient, RewardClient, RewardServerError
from rlvr_client.tools import SESSION_HEADER, ToolCall
from tests.reward_server.test_code_api import require_sandbox, settings

pytestmark = pytest.mark.bwrap


class TwoServers:
    """Two app instances behind ``http://a`` and ``http://b``; the headers of every tool request are kept."""

    def __init__(self, a: TestClient, b: TestClient) -> None:
        self.servers = {"a": a, "b": b}
        self.seen: list[tuple[str, str | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        server = self.servers[request.url.host]
        if request.url.path.startswith("/v1/tools/python"):
            self.seen.append((request.url.host, request.headers.get(SESSION_HEADER)))
        answer = server.request(request.method, request.url.path, content=request.content, headers=request.headers)
        return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)


@pytest.fixture(scope="module")
def servers() -> Iterator[TwoServers]:
    app_a, app_b = create_app(settings("local")), create_app(settings("local"))
    with TestClient(app_a) as a, TestClient(app_b) as b:
        require_sandbox(app_a)
        yield TwoServers(a, b)


def test_sessions_stay_on_their_server(servers: TwoServers) -> None:
    client = RewardClient(["http://a", "http://b"], client=httpx.Client(transport=httpx.MockTransport(servers)))
    # Two first calls, one request each (the balancer spreads them), so the sessions land on different servers.
    [first] = client.run_tools([ToolCall("x = 'one'", "r1")])
    [second] = client.run_tools([{"code": "x = 'two'", "session_id": "r2"}])
    assert {servers.seen[0][0], servers.seen[1][0]} == {"a", "b"}
    assert servers.seen[:2] == [(servers.seen[0][0], "r1"), (servers.seen[1][0], "r2")]
    # One batch with both sessions and a one-off call: split by server, answered in the calls' order.
    results = client.run_tools(
        [
            ToolCall("print(x)", second.session_id, id="s2"),
            "print(6 * 7)",
            ToolCall("print(x)", first.session_id, id="s1"),
        ]
    )
    assert [(r.id, r.status, r.stdout) for r in results] == [
        ("s2", "ok", "two\n"),
        (None, "ok", "42\n"),
        ("s1", "ok", "one\n"),
    ]
    assert results[0].session_id == second.session_id and results[2].session_id == first.session_id
    assert client.close_tool_session(first.session_id) is True
    assert client.close_tool_session(first.session_id) is False
    [lost] = client.run_tools([ToolCall("print(x)", first.session_id)])
    assert lost.status == "session_lost" and lost.stdout == ""
    with pytest.raises(RewardServerError, match="422"):
        client.run_tools([ToolCall("1", "a@b@c")])
    with pytest.raises(ValueError, match="code"):
        client.run_tools([{"session_id": "r1"}])
    assert client.close_tool_session(second.session_id) is True


def test_async_client_keeps_a_sessions_order(servers: TwoServers) -> None:
    async def main() -> list[Any]:
        transport = httpx.MockTransport(servers)
        async with AsyncRewardClient(["http://a", "http://b"], client=httpx.AsyncClient(transport=transport)) as c:
            c.max_batch_items = 2  # three requests for one session: still run one after the other
            calls = [ToolCall("n = 1", "ordered")] + [ToolCall("n *= 2\nprint(n)", "ordered")] * 4
            results = await c.run_tools(calls)
            sid = results[0].session_id
            assert sid is not None and await c.close_tool_session(sid)
            return [r.stdout for r in results]

    assert asyncio.run(main()) == ["", "2\n", "4\n", "8\n", "16\n"]
