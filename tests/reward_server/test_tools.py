"""``POST /v1/tools/python`` and ``DELETE /v1/tools/sessions/{id}``: calls, batches, sessions that keep state and
share none (hostile code), session limits, statuses, and 4xx for bad input, on both sandbox backends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from reward_server.app import create_app
from reward_server.engine.tools import ToolCall, ToolConfig, ToolSessions
from sandbox import ExecResult, Limits
from tests.reward_server.test_code_api import BACKENDS, require_sandbox, settings

URL = "/v1/tools/python"
KEY = "tools-test-key-0123456789"


@pytest.fixture(scope="module", params=BACKENDS)
def client(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    app = create_app(settings(request.param, tool_max_output_chars=100, tool_output_bytes=100_000))
    with TestClient(app) as c:
        require_sandbox(app)
        yield c


def call(client: TestClient, code: str, session_id: str | None = None, **fields: Any) -> dict[str, Any]:
    r = client.post(URL, json={"code": code, "session_id": session_id, **fields})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_single_call(client: TestClient) -> None:
    body = call(client, "print(123456789 * 987654321)", id="c1")
    assert body["status"] == "ok" and body["stdout"] == "121932631112635269\n" and body["stderr"] == ""
    assert (body["id"], body["session_id"], body["truncated"], body["replayed"]) == ("c1", None, False, 0)
    assert 0 < body["time_s"] < 10


def test_error_is_the_programs_with_its_traceback(client: TestClient) -> None:
    body = call(client, "print('before')\nx = {}\nx['missing']")
    assert body["status"] == "error" and body["stdout"] == "before\n"
    assert body["stderr"].endswith("KeyError: 'missing'\n") and "line 3" in body["stderr"]
    assert call(client, "import sys\nsys.exit(3)")["status"] == "error"
    assert call(client, "import sys\nsys.exit(0)")["status"] == "ok"
    assert call(client, "def f(:\n  pass")["stderr"].rstrip().endswith("SyntaxError: invalid syntax")


def test_batch_answers_in_order(client: TestClient) -> None:
    # Calls of one session keep their order inside a batch; the one-off calls run beside them.
    calls = [
        {"code": "import time; time.sleep(0.3); print('slow')", "id": "a"},
        {"code": "x = 1", "session_id": "batch", "id": "b"},
        {"code": "x += 1\nprint(x)", "session_id": "batch", "id": "c"},
        {"code": "print('fast')", "id": "d"},
        {"code": "x *= 10\nprint(x)", "session_id": "batch", "id": "e"},
        {"code": "raise ValueError('no')", "id": "f"},
    ]
    r = client.post(URL, json={"calls": calls})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["id"] for x in results] == ["a", "b", "c", "d", "e", "f"]
    assert [x["stdout"] for x in results] == ["slow\n", "", "2\n", "fast\n", "20\n", ""]
    assert [x["status"] for x in results] == ["ok", "ok", "ok", "ok", "ok", "error"]
    full = results[1]["session_id"]
    assert full.startswith("batch@") and results[2]["session_id"] == results[4]["session_id"] == full
    assert [results[i]["replayed"] for i in (1, 2, 4)] == [0, 1, 2]
    assert client.delete(f"/v1/tools/sessions/{full}").status_code == 204


def test_session_keeps_state_between_turns(client: TestClient) -> None:
    first = call(client, "import math\nn = 12\nprint('turn 1')", "persist")
    sid = first["session_id"]
    assert first["status"] == "ok" and sid.startswith("persist@") and len(sid) > len("persist@")
    second = call(client, "def f(k):\n    return math.factorial(k) + n\nprint('turn 2')", sid)
    assert (second["status"], second["stdout"], second["session_id"]) == ("ok", "turn 2\n", sid)
    # An error keeps the state up to it, as a REPL does; a limit hit leaves the session as it was.
    assert call(client, "m = 5\nraise RuntimeError('boom')", sid)["status"] == "error"
    assert call(client, "while True: pass", sid, timeout_s=0.3)["status"] == "timeout"
    # So does a cell that ends the interpreter itself (it would end every later replay).
    assert call(client, "import os\nm = 0\nos._exit(0)", sid)["status"] == "ok"
    third = call(client, "print(f(5), m)", sid)
    # The earlier turns' output is not repeated; their state is there (120 + 12, and m from the failed turn).
    assert (third["status"], third["stdout"], third["stderr"], third["replayed"]) == ("ok", "132 5\n", "", 3)
    assert client.delete(f"/v1/tools/sessions/{sid}").status_code == 204


PLACES = "PLACES = ['planted.txt', '../planted.txt', '/tmp/planted.txt', '/dev/shm/planted.txt', '/var/tmp/x.txt']"
HOSTILE = (
    PLACES
    + r"""
import os, subprocess, sys
# Every place that might outlive the call or be shared: the work directory, its parent, the temp dirs.
for path in PLACES:
    try:
        open(path, 'w').write('secret')
    except OSError:
        pass
os.environ['PLANTED'] = 'secret'
import builtins
builtins.planted = 'secret'
sys.modules['planted'] = sys
secret = 'secret'
# A process that outlives the call and keeps writing where a neighbour might look.
subprocess.Popen([sys.executable, '-c',
    "import time\nfor _ in range(50):\n    for p in ('late.txt', '../late.txt', '/tmp/late.txt'):\n"
    "        try: open(p, 'w').write('secret')\n        except OSError: pass\n    time.sleep(0.05)"],
    start_new_session=True)
print('planted')
"""
)

PROBE = (
    PLACES
    + r"""
import builtins, glob, os, sys
seen = []
for path in PLACES + ['late.txt', '../late.txt', '/tmp/late.txt']:
    if os.path.exists(path):
        seen.append(path)
if 'PLANTED' in os.environ: seen.append('env')
if hasattr(builtins, 'planted'): seen.append('builtins')
if 'planted' in sys.modules: seen.append('modules')
if 'secret' in globals(): seen.append('globals')
for cmd in glob.glob('/proc/[0-9]*/cmdline'):
    try:
        if b'late.txt' in open(cmd, 'rb').read(): seen.append('process')
    except OSError:
        pass
print(seen)
"""
)


def test_no_state_is_shared_between_sessions(client: TestClient) -> None:
    planted = call(client, HOSTILE, "attacker")
    assert planted["status"] == "ok" and planted["stdout"] == "planted\n", planted
    # The attacker's own session sees its state again (replayed); nobody else sees any of it.
    own = call(client, "print(secret, os.environ['PLANTED'], open('planted.txt').read())", planted["session_id"])
    assert own["stdout"] == "secret secret secret\n", own
    # The probe sees what the attacker planted when it runs in the attacker's session (so it can fail).
    seen = call(client, PROBE, planted["session_id"])["stdout"]
    assert all(repr(x) in seen for x in ("planted.txt", "env", "builtins", "modules", "globals")), seen
    r = client.post(URL, json={"calls": [{"code": PROBE, "session_id": "victim"}, {"code": PROBE}]})
    for result in r.json()["results"]:
        assert (result["status"], result["stdout"]) == ("ok", "[]\n"), result
    time.sleep(0.5)  # the attacker's straggler would have written by now
    assert call(client, PROBE, "victim@" + planted["session_id"].split("@")[1])["stdout"] == "[]\n"
    for sid in (planted["session_id"], r.json()["results"][0]["session_id"]):
        assert client.delete(f"/v1/tools/sessions/{sid}").status_code == 204


def test_limits_have_their_statuses(client: TestClient) -> None:
    assert call(client, "while True: pass", timeout_s=0.5)["status"] == "timeout"
    assert call(client, "x = bytearray(8 * 1024**3)")["status"] == "memory_limit"
    assert call(client, "import sys\nsys.stdout.write('x' * 200_000)")["status"] == "output_limit"
    # Under the output limit, the result keeps the first 100 characters of stdout and the last 100 of stderr.
    body = call(client, "import sys\nprint('a' * 50 + 'b' * 1000)\nsys.stderr.write('c' * 1000 + 'd' * 50)")
    assert body["status"] == "ok" and body["truncated"] is True
    assert body["stdout"] == "a" * 50 + "b" * 50 and body["stderr"] == "c" * 50 + "d" * 50


def test_close_and_lost_sessions(client: TestClient) -> None:
    sid = call(client, "x = 1", "closing")["session_id"]
    instance = sid.split("@")[1]
    assert client.delete(f"/v1/tools/sessions/{sid}").status_code == 204
    assert client.delete(f"/v1/tools/sessions/{sid}").status_code == 404
    for lost in (sid, f"never-opened@{instance}", "rollout-1@0123456789abcdef"):
        body = call(client, "print(x)", lost)
        assert (body["status"], body["session_id"], body["stdout"]) == ("session_lost", lost, ""), body
        assert body["detail"]
    # A name alone opens a new, empty session under the same full id.
    again = call(client, "print('x' in globals())", "closing")
    assert (again["status"], again["session_id"], again["stdout"]) == ("ok", sid, "False\n")
    assert client.delete("/v1/tools/sessions/closing").status_code == 204


@pytest.mark.parametrize(
    ("body", "code", "loc"),
    [
        ({}, 422, ["body", "code"]),
        ({"code": 5}, 422, ["body", "code"]),
        ({"code": "1", "sesion_id": "a"}, 422, ["body", "sesion_id"]),
        ({"code": "1", "timeout_s": 0}, 422, ["body", "timeout_s"]),
        ({"code": "1", "session_id": "a@b@c"}, 422, ["body", "session_id"]),
        ({"code": "1", "session_id": ""}, 422, ["body", "session_id"]),
        ({"calls": [{"code": "1"}], "session_id": "a"}, 422, ["body", "session_id"]),
        ({"calls": [{"code": "1"}, {"cod": "1"}]}, 422, ["body", "calls", 1, "code"]),
        ({"calls": [{"code": "1", "timeout_s": "soon"}]}, 422, ["body", "calls", 0, "timeout_s"]),
        ({"calls": [{"code": "x" * 2_000_000}]}, 422, ["body", "calls", 0, "code"]),
        ({"calls": {"code": "1"}}, 422, ["body", "calls"]),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(client: TestClient, body: Any, code: int, loc: list[Any]) -> None:
    r = client.post(URL, json=body)
    assert r.status_code == code, r.text
    assert loc in [e["loc"] for e in r.json()["detail"]], r.text


def test_limits_of_sessions_and_batches_and_auth() -> None:
    values = {"tool_session_ttl_s": 1.0, "tool_max_sessions": 2, "tool_max_session_calls": 3, "max_batch_items": 4}
    values["tool_max_session_bytes"] = 64
    values["http_workers"] = 2  # each worker names its sessions apart
    app = create_app(settings("local", api_keys=KEY, **values))
    with TestClient(app, headers={"Authorization": f"Bearer {KEY}"}) as c:
        require_sandbox(app)
        assert TestClient(app).post(URL, json={"code": "print(1)"}).status_code == 401
        assert TestClient(app).delete("/v1/tools/sessions/a").status_code == 401
        assert c.post(URL, json={"calls": [{"code": "1"}] * 5}).status_code == 413
        a, b = call(c, "x = 1", "a"), call(c, "x = 2", "b")
        assert a["session_id"] == f"a@{app.state.instance_id}-{os.getpid()}"
        capped = call(c, "x = 3", "c")
        assert (capped["status"], capped["stdout"]) == ("session_limit", "")
        assert "RLVR_TOOL_MAX_SESSIONS" in capped["detail"]
        assert c.delete(f"/v1/tools/sessions/{a['session_id']}").status_code == 204
        assert call(c, "x = 3", "c")["status"] == "ok"
        # Three calls per session at most, and 64 bytes of source.
        assert [call(c, "x += 1", b["session_id"])["status"] for _ in range(3)] == ["ok", "ok", "session_limit"]
        big = call(c, "y = 1" + " " * 60, "c")
        assert big["status"] == "session_limit" and "RLVR_TOOL_MAX_SESSION_BYTES" in big["detail"]
        # A session unused for its TTL is gone.
        time.sleep(1.3)
        assert call(c, "print(x)", b["session_id"])["status"] == "session_lost"
        assert call(c, "x = 1", "d")["status"] == "ok"  # the expired ones no longer count against the cap
        assert call(c, "x = 1", "e")["status"] == "ok"
        metrics = c.get("/metrics").text
        assert 'rlvr_verdicts_total{component="tool_python",status="session_limit"} 3.0' in metrics
        assert "rlvr_tool_sessions 2.0" in metrics  # d and e (b and c expired)


class FailingSandbox:
    """A sandbox whose every run fails on our side (a container that died mid-run)."""

    name = "failing"
    alive = 1
    runs = 0

    @contextlib.asynccontextmanager
    async def job(self, files: Any) -> AsyncIterator[FailingSandbox]:
        yield self

    async def exec(self, argv: Any, *, stdin: bytes = b"", limits: Limits, channel: bool = False) -> ExecResult:
        self.runs += 1
        return ExecResult.sandbox_error("the container died")


def test_a_sandbox_fault_is_its_own_status_and_keeps_nothing() -> None:
    config = ToolConfig(Limits(), 10.0, 100, 60.0, 4, 8, 1000)
    sessions, sandbox = ToolSessions("inst", config), FailingSandbox()
    [lost] = asyncio.run(sessions.run(sandbox, [ToolCall("x = 1", "s")]))  # type: ignore[arg-type]
    assert (lost.status, lost.session_id, lost.detail) == ("sandbox_error", "s@inst", "the container died")
    [again] = asyncio.run(sessions.run(sandbox, [ToolCall("print(1)", "s@inst")]))  # type: ignore[arg-type]
    assert (again.status, again.replayed, sandbox.runs) == ("sandbox_error", 0, 2)  # the failed cell is not replayed
