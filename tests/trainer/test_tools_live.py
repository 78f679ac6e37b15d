"""The trainer's tool client (``trainer.tools.client.HttpToolClient``) against the real app's
``POST /v1/tools/python`` on the local sandbox, not a stub of the contract: a session's state carries across a
rollout's turns through the full ``<name>@<instance>`` id the server returns, rollouts do not see each other's
state, and the statuses the rollout loop acts on come back as the loop expects."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from reward_server.app import create_app
from tests.reward_server.test_code_api import require_sandbox, settings
from trainer.tools.client import HttpToolClient, ToolRequest

pytestmark = pytest.mark.bwrap


@pytest.fixture(scope="module")
def tools() -> Iterator[HttpToolClient]:
    app = create_app(settings("local"))
    with TestClient(app) as server:
        require_sandbox(app)

        def forward(request: httpx.Request) -> httpx.Response:
            answer = server.request(request.method, request.url.path, content=request.content, headers=request.headers)
            return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)

        client = HttpToolClient("http://server", client=httpx.Client(transport=httpx.MockTransport(forward)))
        yield client
        client.close()


def test_two_rollouts_keep_their_own_state_across_turns(tools: HttpToolClient) -> None:
    # turn 1 of two rollouts in one batch, as the rollout loop sends a chunk's calls
    first = tools.run(
        [ToolRequest("a1", "x = 6 * 7", session_id="rollout-a"), ToolRequest("b1", "x = 'b'", session_id="rollout-b")]
    )
    assert [(r.id, r.status) for r in first] == [("a1", "ok"), ("b1", "ok")]
    ids = [r.session_id for r in first]
    assert all(
        i is not None and i.startswith(name + "@") for i, name in zip(ids, ("rollout-a", "rollout-b"), strict=True)
    )
    # turn 2 sends back the full ids the server returned
    second = tools.run([ToolRequest("b2", "print(x)", session_id=ids[1]), ToolRequest("a2", "print(x)", ids[0])])
    assert [(r.id, r.status, r.stdout) for r in second] == [("b2", "ok", "b\n"), ("a2", "ok", "42\n")]
    assert [r.session_id for r in second] == [ids[1], ids[0]]


def test_a_closed_session_is_gone_and_closing_it_again_is_harmless(tools: HttpToolClient) -> None:
    (opened,) = tools.run([ToolRequest("c1", "y = 3", session_id="rollout-c")])
    assert opened.status == "ok" and opened.session_id is not None
    assert tools.close_sessions([opened.session_id]) == 1
    (after,) = tools.run([ToolRequest("c2", "print(y)", session_id=opened.session_id)])
    assert after.status == "session_lost"  # the interpreter was freed, not kept until the TTL
    assert tools.close_sessions([opened.session_id, "never-opened@elsewhere"]) == 0  # 404s: logged, not raised


def test_the_statuses_the_loop_acts_on(tools: HttpToolClient) -> None:
    results = tools.run(
        [
            ToolRequest("err", "raise ValueError('no')"),
            ToolRequest("slow", "while True: pass", timeout_s=0.5),
            ToolRequest("lost", "print(1)", session_id="gone@another-instance"),
        ]
    )
    assert [(r.id, r.status) for r in results] == [("err", "error"), ("slow", "timeout"), ("lost", "session_lost")]
    assert "ValueError: no" in results[0].stderr
    assert [r.infrastructure_failure for r in results] == [False, False, True]  # a lost session is not the model's
