"""``POST /v1/code/run`` and ``POST /v1/code/test``: shapes, limits, errors, and a live server that keeps
serving while hostile programs run (on both sandbox backends)."""

from __future__ import annotations

import json
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from reward_server.app import create_app
from reward_server.settings import Settings
from tests.conftest import IN_CI

BACKENDS = [pytest.param("local", marks=pytest.mark.bwrap), pytest.param("docker", marks=pytest.mark.docker)]


def settings(backend: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"math_workers": 1, "sandbox_pool_size": 2, "sandbox_backend": backend}
    values.update(overrides)
    return Settings(**values)


def require_sandbox(app: Any) -> None:
    scoring = app.state.scoring
    if scoring.sandbox is None:
        reason = f"sandbox unavailable: {scoring.sandbox_unavailable}"
        if IN_CI:
            pytest.fail(reason + " (CI=true: no sandbox test may skip for a missing engine)")
        pytest.skip(reason)


@pytest.fixture(scope="module", params=BACKENDS)
def client(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    app = create_app(settings(request.param, sandbox_max_time_s=10, sandbox_tail_bytes=64))
    with TestClient(app) as c:
        require_sandbox(app)
        sandbox = app.state.scoring.sandbox
        yield c
    assert sandbox.alive == 0  # the lifespan closed every sandbox


def test_run_python(client: TestClient) -> None:
    r = client.post("/v1/code/run", json={"language": "python", "code": "print(input()[::-1])", "stdin": "abc\n"})
    assert r.status_code == 200
    body = r.json()
    assert (body["status"], body["stdout"], body["stderr"], body["exit_code"]) == ("ok", "cba\n", "", 0)
    assert 0 < body["time_s"] < 5 and body["memory_mb"] > 1


def test_run_cpp_and_its_compile_error(client: TestClient) -> None:
    code = "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}"
    r = client.post("/v1/code/run", json={"language": "c++", "code": code, "stdin": "40 2"})
    assert r.json()["stdout"] == "42\n"
    r = client.post("/v1/code/run", json={"language": "cpp", "code": "int main() { retrun 0; }"})
    body = r.json()
    assert body["status"] == "compile_error" and "retrun" in body["stderr"]


def test_run_statuses(client: TestClient) -> None:
    cases = {
        "import sys\nsys.exit(3)": ("runtime_error", 3),
        "while True: pass": ("timeout", None),
        "x = bytearray(8 * 1024**3)": ("memory_limit", 1),
        "import sys\nsys.stdout.write('x' * 2_000_000)": ("output_limit", 0),
    }
    limits = {"time_s": 1, "memory_mb": 512, "output_bytes": 1_000_000}
    for code, (status, exit_code) in cases.items():
        body = client.post("/v1/code/run", json={"language": "python", "code": code, "limits": limits}).json()
        assert (body["status"], body["exit_code"]) == (status, exit_code), code


def test_run_says_when_stderr_is_cut(client: TestClient) -> None:
    # The client's tail is 64 bytes (the fixture's RLVR_SANDBOX_TAIL_BYTES): stderr past it loses its start.
    cases = {
        "import sys\nsys.stderr.write('a' * 64)": ("a" * 64, False),
        "import sys\nsys.stderr.write('b' * 10 + 'c' * 64)": ("c" * 64, True),
        # Over output_bytes: the runner keeps the end, and the answer is cut too.
        "import sys\nsys.stderr.write('d' * 5000 + 'e' * 64)": ("e" * 64, True),
    }
    for code, (stderr, cut) in cases.items():
        payload = {"language": "python", "code": code, "limits": {"output_bytes": 2048}}
        body = client.post("/v1/code/run", json=payload).json()
        assert (body["stderr"], body["stderr_truncated"], body["stdout_truncated"]) == (stderr, cut, False), code
    # The compiler's messages are kept to at least 1024 bytes; a long error list is cut at its start.
    many = "int main() {" + " x;" * 400 + " }"
    body = client.post("/v1/code/run", json={"language": "cpp", "code": many}).json()
    assert body["status"] == "compile_error" and body["stderr_truncated"] is True and len(body["stderr"]) <= 1024
    body = client.post("/v1/code/run", json={"language": "cpp", "code": "int main() { retrun 0; }"}).json()
    assert body["status"] == "compile_error" and body["stderr_truncated"] is False


def test_limits_are_capped_by_the_server(client: TestClient) -> None:
    # The server's maximum is 10 s (sandbox_max_time_s): a request for 100 s gets 10 (over 600 s is a 422).
    body = client.post(
        "/v1/code/run",
        json={"language": "python", "code": "import time\ntime.sleep(20)", "limits": {"time_s": 100}},
    ).json()
    assert body["status"] == "timeout" and 10 <= body["time_s"] < 11


def test_test_endpoint_formats(client: TestClient) -> None:
    stdio = {"type": "stdio", "cases": [{"input": "1 2", "output": "3"}, {"input": "2 2", "output": "5"}]}
    body = client.post(
        "/v1/code/test", json={"language": "python", "code": "print(sum(map(int, input().split())))", "tests": stdio}
    ).json()
    assert (body["status"], body["passed"], body["total"], body["reward"]) == ("wrong_answer", 1, 2, 0.5)
    assert [c["status"] for c in body["cases"]] == ["passed", "wrong_answer"]
    assert body["cases"][1]["detail"] == "line 1: expected '5', got '4'"

    body = client.post(
        "/v1/code/test",
        json={"language": "python", "code": "print(7)", "tests": stdio, "all_or_nothing": True, "early_stop": True},
    ).json()
    assert (body["reward"], [c["status"] for c in body["cases"]]) == (0.0, ["wrong_answer", "skipped"])

    humaneval = {"type": "assert", "test": "def check(f):\n    assert f(2) == 4\n", "entry_point": "sq"}
    body = client.post(
        "/v1/code/test", json={"language": "python", "code": "def sq(x):\n    return x * x", "tests": humaneval}
    ).json()
    assert (body["status"], body["reward"]) == ("passed", 1.0)

    mbpp = {"type": "assert", "test_list": ["assert sq(2) == 4", "assert sq(3) == 6"]}
    body = client.post(
        "/v1/code/test", json={"language": "python", "code": "def sq(x):\n    return x * x", "tests": mbpp}
    ).json()
    assert (body["passed"], body["total"]) == (1, 2)
    assert body["cases"][1]["detail"] == "AssertionError: assert sq(3) == 6"

    call = {"type": "call", "fn_name": "pair", "cases": [{"input": [1], "output": [1, 1]}]}
    body = client.post(
        "/v1/code/test", json={"language": "python", "code": "def pair(x):\n    return (x, x)", "tests": call}
    ).json()
    assert (body["status"], body["reward"]) == ("passed", 1.0)


def test_grader_error_has_no_reward(client: TestClient) -> None:
    body = client.post(
        "/v1/code/test",
        json={
            "language": "python",
            "code": "def f(x): return x",
            "tests": {"type": "call", "fn_name": "f", "cases": []},
        },
    ).json()
    assert (body["status"], body["reward"], body["cases"]) == ("grader_error", None, [])


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"language": "java", "code": "x"}, ["body", "language"]),
        ({"language": "python"}, ["body", "code"]),
        ({"language": "python", "code": "x", "limits": {"time_s": -1}}, ["body", "limits", "time_s"]),
        ({"language": "python", "code": "x", "limits": {"cpu": 1}}, ["body", "limits", "cpu"]),
    ],
    ids=["unknown-language", "no-code", "negative-limit", "unknown-limit"],
)
def test_run_rejects_bad_input_naming_the_field(client: TestClient, payload: dict[str, Any], field: list[str]) -> None:
    r = client.post("/v1/code/run", json=payload)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == field


def test_test_rejects_bad_tests_naming_the_field(client: TestClient) -> None:
    r = client.post("/v1/code/test", json={"language": "python", "code": "x", "tests": {"type": "fuzz"}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "tests"]
    r = client.post("/v1/code/test", json={"language": "python", "code": "x", "tests": {"type": "stdio"}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "tests", "stdio", "cases"]


def test_size_limits_give_422() -> None:
    app = create_app(settings("local", sandbox_max_source_bytes=100, sandbox_max_cases=2, sandbox_pool_size=1))
    with TestClient(app) as c:
        r = c.post("/v1/code/run", json={"language": "python", "code": "#" * 101})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "code"]
        assert "RLVR_SANDBOX_MAX_SOURCE_BYTES" in r.json()["detail"][0]["msg"]
        cases = [{"input": "", "output": ""}] * 3
        r = c.post("/v1/code/test", json={"language": "python", "code": "", "tests": {"type": "stdio", "cases": cases}})
        # The list itself is named (it was only `tests` before the batch endpoint got the same check).
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "tests", "cases"]
        assert r.json()["detail"][0]["msg"] == "3 test cases; at most 2 are accepted (RLVR_SANDBOX_MAX_CASES)"


def test_rewards_code_items_get_the_same_maxima_as_code_test() -> None:
    # The batch endpoint ran an item with 1,500 cases while /v1/code/test refused it: one check serves both.
    app = create_app(settings("local", sandbox_max_source_bytes=100, sandbox_max_cases=2, sandbox_pool_size=1))
    ok_tests = {"type": "stdio", "cases": [{"input": "", "output": "1"}]}
    ok = {"id": "ok", "task": "code", "response": "```python\nprint(1)\n```", "tests": ok_tests}
    over: list[tuple[dict[str, Any], list[Any], str]] = [
        (
            {"type": "stdio", "cases": [{"input": "", "output": "1"}] * 3},
            ["tests", "cases"],
            "3 test cases; at most 2 are accepted (RLVR_SANDBOX_MAX_CASES)",
        ),
        (
            {"type": "call", "fn_name": "f", "cases": [{"input": [1], "output": 1}] * 5},
            ["tests", "cases"],
            "5 test cases; at most 2 are accepted (RLVR_SANDBOX_MAX_CASES)",
        ),
        (
            {"type": "assert", "test_list": ["assert f(1) == 1"] * 3},
            ["tests", "test_list"],
            "3 test cases; at most 2 are accepted (RLVR_SANDBOX_MAX_CASES)",
        ),
    ]
    with TestClient(app) as c:
        for tests, field, msg in over:
            item = {"id": "big", "task": "code", "response": "```python\ndef f(x): return x\n```", "tests": tests}
            r = c.post("/v1/rewards", json={"items": [ok, item]})
            assert r.status_code == 422, r.text
            assert r.json()["detail"] == [{"loc": ["body", "items", 1, *field], "msg": msg, "type": "too_long"}]
        # The program taken from the completion is held to the source limit, wherever it sits in the text.
        program = "print(1)\n" + "#" * 100 + "\n"
        long_program = {**ok, "id": "long", "response": "<think>x</think>\n```python\n" + program + "```"}
        r = c.post("/v1/rewards", json={"items": [ok, long_program]})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "items", 1, "response"]
        assert r.json()["detail"][0]["msg"] == (
            "the program is 110 bytes; at most 100 are accepted (RLVR_SANDBOX_MAX_SOURCE_BYTES)"
        )
        # A long completion around a short program is fine: the reasoning is not the program.
        chatty = {**ok, "id": "chatty", "response": "<think>" + "hmm " * 200 + "</think>\n```python\nprint(1)\n```"}
        r = c.post("/v1/rewards", json={"items": [ok, chatty]})
        assert r.status_code == 200, r.text
        assert [x["reward"] for x in r.json()["results"]] == [1.0, 1.0]


def test_missing_bubblewrap_gives_503_with_the_fix_and_the_rest_keeps_working() -> None:
    app = create_app(settings("local", sandbox_bwrap="/nonexistent/bwrap", sandbox_pool_size=1))
    with TestClient(app) as c:
        for path in ("/v1/code/run", "/v1/code/test"):
            r = c.post(
                path,
                json={"language": "python", "code": "print(1)", "tests": {"type": "call", "fn_name": "f", "cases": []}},
            )
            assert r.status_code == 503
            assert "apt-get install bubblewrap" in r.json()["detail"]
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 200


def test_rewards_code_items(client: TestClient) -> None:
    right = "<think>x squared</think>\n```python\ndef sq(x):\n    return x * x\n```"
    half = "```python\ndef sq(x):\n    return 4\n```"
    tests = {"type": "assert", "test_list": ["assert sq(2) == 4", "assert sq(3) == 9"]}
    strict = {"accuracy": {"weight": 1.0, "code": {"all_or_nothing": True}}}
    items = [
        {"id": "c0", "task": "code", "response": right, "tests": tests},
        {"id": "c1", "task": "code", "response": half, "tests": tests},
        {"id": "c2", "task": "code", "response": "I would loop.", "tests": tests},
        {"id": "c3", "task": "code", "response": right, "tests": {"type": "call", "fn_name": "sq", "cases": []}},
        {"id": "c4", "task": "code", "response": half, "tests": tests, "components": strict},
    ]
    r = client.post("/v1/rewards", json={"items": items})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["id"] for x in results] == ["c0", "c1", "c2", "c3", "c4"]
    assert [x["reward"] for x in results] == [1.0, 0.5, 0.0, None, 0.0]
    # An empty test list is data the grader cannot use: null, never 1.0.
    assert [x["status"] for x in results] == ["ok", "ok", "ok", "grader_error", "ok"]
    accuracy = results[1]["components"]["accuracy"]
    assert accuracy["info"]["cases"] == ["passed", "wrong_answer"]
    assert results[2]["components"]["accuracy"]["status"] == "no_answer"


SQ = "def sq(x):\n    return x * x\n"
# (id, completion): every way a model writes its answer's code block (QA c5); each one is the program.
FENCES = [
    ("tilde", f"~~~python\n{SQ}~~~"),
    ("four-backticks", f"````python\n{SQ}````"),
    ("list-item", "1. Square it:\n\n   ```python\n   " + SQ.replace("\n", "\n   ").rstrip() + "\n   ```\n"),
    ("info-string", f"```python title=sol.py\n{SQ}```"),
    ("crlf", "```python\r\n" + SQ.replace("\n", "\r\n") + "```"),
    ("usage-example-last", f"```python\n{SQ}```\nExample:\n```python\nprint(sq(3))\n```"),
    ("empty-last", f"```python\n{SQ}```\n```python\n```"),
    ("comment-only-last", f"```python\n{SQ}```\nRun it:\n```python\n# python sol.py < input.txt\n```"),
]


def test_rewards_take_the_program_from_every_common_fence(client: TestClient) -> None:
    tests = {"type": "call", "fn_name": "sq", "cases": [{"input": [3], "output": 9}, {"input": [4], "output": 16}]}
    items = [{"id": name, "task": "code", "response": text, "tests": tests} for name, text in FENCES]
    r = client.post("/v1/rewards", json={"items": items})
    assert r.status_code == 200, r.text
    got = {x["id"]: (x["reward"], x["components"]["accuracy"]["info"].get("verdict")) for x in r.json()["results"]}
    assert got == {name: (1.0, "passed") for name, _ in FENCES}


def test_lone_surrogates_run_as_their_bytes_and_never_fail_the_server(client: TestClient) -> None:
    # JSON may carry a lone surrogate ("\ud800"), which strict UTF-8 cannot encode: it was a 500 that
    # took a whole batch of rewards down with it.
    def post(path: str, payload: dict[str, Any]) -> httpx.Response:
        return client.post(path, content=json.dumps(payload), headers={"content-type": "application/json"})

    echo = "import sys\nsys.stdout.buffer.write(sys.stdin.buffer.read().hex().encode())"
    r = post("/v1/code/run", {"language": "python", "code": echo, "stdin": "a\ud800"})
    assert (r.status_code, r.json()["stdout"]) == (200, "61eda080")
    r = post("/v1/code/run", {"language": "python", "code": "print('\ud800')"})
    assert (r.status_code, r.json()["status"]) == (200, "compile_error")  # as the same file would be
    copy = "import sys\nsys.stdout.buffer.write(sys.stdin.buffer.read())"
    tests = {"type": "stdio", "cases": [{"input": "x\ud800", "output": "x\ud800"}]}
    r = post("/v1/code/test", {"language": "python", "code": copy, "tests": tests})
    assert (r.status_code, r.json()["status"]) == (200, "passed")
    stdio = {"type": "stdio", "cases": [{"input": "", "output": "1"}]}
    items = [
        {"id": "s", "task": "code", "response": "```python\nprint('\ud800')\n```", "tests": stdio},
        {"id": "ok", "task": "code", "response": "```python\nprint(1)\n```", "tests": stdio},
    ]
    r = post("/v1/rewards", {"items": items})
    assert r.status_code == 200, r.text
    got = [(x["reward"], x["components"]["accuracy"]["info"]["verdict"]) for x in r.json()["results"]]
    assert got == [(0.0, "compile_error"), (1.0, "passed")]


def test_malformed_tests_are_422_naming_the_field(client: TestClient) -> None:
    items = [
        {"id": "ok", "task": "code", "response": "x", "tests": {"type": "assert", "test_list": ["assert 1"]}},
        {"id": "bad", "task": "code", "response": "x", "tests": {"type": "stdio", "cases": 3}},
    ]
    r = client.post("/v1/rewards", json={"items": items})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][:4] == ["body", "items", 1, "tests"]
    items[1]["tests"] = {"type": "regex", "cases": []}
    r = client.post("/v1/rewards", json={"items": items})
    assert r.status_code == 422 and "stdio" in r.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    ("tests", "field"),
    [
        ({"type": "assert", "tset": "def check(c): pass", "entry_point": "f"}, "tset"),  # a misspelt `test`
        ({"type": "stdio", "cases": [{"input": "", "ouput": "1"}]}, "ouput"),
        ({"type": "call", "fn_name": "f", "cases": [], "rel_tolerance": 0.1}, "rel_tolerance"),
    ],
    ids=["assert", "stdio case", "call"],
)
def test_unknown_keys_in_tests_are_422_naming_the_field(tests: dict[str, Any], field: str) -> None:
    """Issue 15: an unknown key in `tests` was ignored, so a misspelt `test` became a grader_error later."""
    app = create_app(settings("local", sandbox_pool_size=1))
    with TestClient(app) as c:
        item = {"id": "a", "task": "code", "response": "```python\ndef f():\n    return 1\n```", "tests": tests}
        r = c.post("/v1/rewards", json={"items": [item]})
        assert r.status_code == 422, r.text
        named = [d for d in r.json()["detail"] if d["loc"][-1] == field]
        assert named and named[0]["loc"][:4] == ["body", "items", 0, "tests"], r.json()
        assert named[0]["type"] == "extra_forbidden"
        r = c.post("/v1/code/test", json={"language": "python", "code": "x = 1", "tests": tests})
        assert r.status_code == 422 and any(d["loc"][-1] == field for d in r.json()["detail"])


def test_rewards_code_items_without_a_sandbox_are_not_scored() -> None:
    app = create_app(settings("local", sandbox_bwrap="/nonexistent/bwrap", sandbox_pool_size=1))
    with TestClient(app) as c:
        item = {
            "id": "c",
            "task": "code",
            "response": "```python\nx = 1\n```",
            "tests": {"type": "assert", "test": "x"},
        }
        ready = c.get("/readyz").json()
        assert ready["ready"] is True and ready["checks"]["sandbox"].startswith("unavailable: ")
        result = c.post("/v1/rewards", json={"items": [item]}).json()["results"][0]
        assert (result["reward"], result["status"]) == (None, "sandbox_error")
        assert "apt-get install bubblewrap" in result["components"]["accuracy"]["detail"]


def test_readyz_says_when_no_sandbox_is_up(monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(settings("local", sandbox_pool_size=1))
    with TestClient(app) as c:
        assert c.get("/readyz").json()["checks"]["sandbox"] == "ok"
        pool = app.state.scoring.sandbox
        monkeypatch.setattr(type(pool), "alive", property(lambda self: 0))
        ready = c.get("/readyz")
        # Math still scores, so the server stays ready; the sandbox's state is reported, not gated on.
        assert ready.status_code == 200 and ready.json()["checks"]["sandbox"].startswith("down: no sandbox is up")


def test_verdicts_are_counted(client: TestClient) -> None:
    client.post("/v1/code/run", json={"language": "python", "code": "print(1)"})
    metrics = client.get("/metrics").text
    assert 'rlvr_verdicts_total{component="code_run",status="ok"}' in metrics
    # 1 or 2: a sandbox replaced after an earlier test's timeout may still be starting.
    assert re.search(r'^rlvr_workers_alive\{pool="sandbox"\} [12]\.0$', metrics, re.M), metrics


# ---------------------------------------------------------------------------------------- live server


@pytest.fixture(scope="module", params=BACKENDS)
def live_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """The app served by uvicorn on 127.0.0.1 with a secret in its environment: (base URL, secret)."""
    canary = "sk-live-" + secrets.token_hex(8)
    mp = pytest.MonkeyPatch()
    mp.setenv("RLVR_CANARY_API_KEY", canary)
    app = create_app(settings(request.param, sandbox_max_time_s=10))
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert server.started, "the server did not start"
        require_sandbox(app)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", canary
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        mp.undo()


HOSTILE = {
    "fork-bomb": ("import os\nwhile True:\n    os.fork()", {"runtime_error", "timeout"}),
    "memory-8GB": ("x = bytearray(8 * 1024 ** 3)", {"memory_limit"}),
    "loop-ignoring-signals": (
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT):\n    signal.signal(s, signal.SIG_IGN)\n"
        "while True: pass",
        {"timeout"},
    ),
    "output-100MB": ("import sys\nsys.stdout.write('x' * 100_000_000)", {"output_limit"}),
    "kill-parent": (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(1, signal.SIGKILL)\nprint(4)",
        {"runtime_error"},
    ),
    "write-outside": ("open('/usr/lib/evil.py', 'w').write('x')", {"runtime_error"}),
    "background-process": (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(99)'], start_new_session=True)",
        {"ok"},
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_live_server_keeps_serving_after_hostile_programs(live_server: tuple[str, str], name: str) -> None:
    base, _ = live_server
    code, statuses = HOSTILE[name]
    with httpx.Client(base_url=base, timeout=60) as http:
        body = http.post("/v1/code/run", json={"language": "python", "code": code, "limits": {"time_s": 2}}).json()
        assert body["status"] in statuses, body
        assert http.get("/healthz").json()["status"] == "ok"
        after = http.post("/v1/code/run", json={"language": "python", "code": "print(2)"}).json()
        assert (after["status"], after["stdout"]) == ("ok", "2\n")


def test_live_server_is_unreachable_from_the_sandbox(live_server: tuple[str, str]) -> None:
    base, canary = live_server
    port = int(base.rsplit(":", 1)[1])
    code = f"""
import os, socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("reached the reward server")
except OSError as exc:
    print("refused", type(exc).__name__)
print(sorted(os.environ))
"""
    with httpx.Client(base_url=base, timeout=60) as http:
        body = http.post("/v1/code/run", json={"language": "python", "code": code}).json()
    assert body["stdout"].splitlines()[0].startswith("refused"), body
    assert "CANARY" not in body["stdout"] and canary not in body["stdout"]


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/v1/code/run", {"language": "python", "code": "print(input())", "stdinn": "hello\n"}, "stdinn"),
        (
            "/v1/code/test",
            {"language": "python", "code": "x = 1", "tests": {"type": "stdio", "cases": []}, "earlystop": True},
            "earlystop",
        ),
    ],
    ids=["run", "test"],
)
def test_unknown_request_fields_of_the_code_routes_are_422(route: str, body: dict[str, Any], field: str) -> None:
    """A misspelt `stdin` ran the program on empty stdin (runtime_error, 200); every other route refused it."""
    app = create_app(settings("local", sandbox_pool_size=1))
    with TestClient(app) as c:
        r = c.post(route, json=body)
        assert r.status_code == 422, r.text
        [named] = [d for d in r.json()["detail"] if d["loc"][-1] == field]
        assert named["loc"] == ["body", field] and named["type"] == "extra_forbidden"


def test_sandbox_cleanups_are_counted(client: TestClient) -> None:
    def cleaned() -> float:
        metrics = client.get("/metrics").text
        match = re.search(r'^rlvr_sandbox_cleanups_total\{outcome="cleaned"\} (\S+)$', metrics, re.M)
        assert match and re.search(r'^rlvr_sandbox_cleanups_total\{outcome="replaced"\} ', metrics, re.M), metrics
        return float(match.group(1))

    before = cleaned()
    limits = {"time_s": 0.3}
    run = client.post("/v1/code/run", json={"language": "python", "code": "while True: pass", "limits": limits})
    assert run.json()["status"] == "timeout"
    assert cleaned() == before + 1
