"""End to end: ``docker compose up`` with the repo's docker-compose.yml, then math and code batches over HTTP
on 127.0.0.1, the sandboxes probed from inside the server's container, and ``docker compose down``.

The stack is the file users run, plus one override that hands the server a canary variable (a secret a
sandboxed program must never see). Real data: labelled model outputs (math) and HumanEval (code).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import cases_or_placeholder, data_dir, require_file
from tests.deploy.conftest import (
    COLD_START_LIMIT_S,
    COMPOSE_FILE,
    SERVER_IMAGE,
    Stack,
    compose_stack,
    free_ports,
    require_engine,
)
from tests.sandbox.conftest import FORK_COUNTER
from tests.sandbox.test_cases import CASES, LIMIT_NAMES, expected_statuses

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CANARY_NAME = "RLVR_TEST_CANARY_API_KEY"
CANARY = "sk-canary-" + secrets.token_hex(8)
TIMEOUT = httpx.Timeout(120.0, connect=5.0)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_engine(SERVER_IMAGE)
    override = tmp_path_factory.mktemp("compose") / "canary.yml"
    override.write_text(json.dumps({"services": {"server": {"environment": {CANARY_NAME: CANARY}}}}))
    [port] = free_ports(1)
    # Small pools: this machine is shared; the figures in the README come from the defaults.
    env = {"RLVR_HOST": "127.0.0.1", "RLVR_PORT": str(port), "RLVR_MATH_WORKERS": "1", "RLVR_SANDBOX_POOL_SIZE": "2"}
    with compose_stack([COMPOSE_FILE, override], ["server"], env, f"http://127.0.0.1:{port}") as s:
        yield s


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url, timeout=TIMEOUT) as c:
        yield c


def run(client: httpx.Client, code: str, language: str = "python", **limits: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"language": language, "code": code}
    if limits:
        body["limits"] = limits
    r = client.post("/v1/code/run", json=body)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def test_healthy_within_a_minute(stack: Stack) -> None:
    print(f"\ndocker compose up -> healthy: {stack.healthy_after_s:.1f} s")
    assert stack.healthy_after_s < COLD_START_LIMIT_S
    assert stack.health("server") == "healthy"
    assert httpx.get(f"{stack.url}/readyz").json()["ready"] is True


def test_container_runs_confined(stack: Stack) -> None:
    info = stack.inspect("server")
    host = info["HostConfig"]
    assert info["Config"]["User"] == "10001:10001"
    assert host["NetworkMode"] == "host"
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["Privileged"] is False and host["ReadonlyRootfs"] is True
    assert "no-new-privileges:true" in host["SecurityOpt"]
    [seccomp] = [o for o in host["SecurityOpt"] if o.startswith("seccomp=")]
    profile = json.loads(seccomp.removeprefix("seccomp="))
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"  # our profile, not unconfined
    assert not any("docker.sock" in m.get("Source", "") for m in info["Mounts"])
    # The kernel's view of every process agrees: PID 1 (Docker's init), the server, its workers, the sandboxes.
    script = 'for f in /proc/[0-9]*/status; do grep -E "^(Name|CapEff|NoNewPrivs|Seccomp):" "$f" 2>/dev/null; done'
    done = stack.compose("exec", "-T", "server", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    processes: list[dict[str, str]] = []
    for line in done.stdout.splitlines():
        key, value = line.split(":\t", 1)
        if key == "Name":
            processes.append({})
        processes[-1][key] = value
    names = {p.pop("Name") for p in processes}
    assert {"docker-init", "reward-server", "bwrap"} <= names, names
    for status in processes:
        assert status == {"CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}, status


def test_math_batch_agrees_with_published_labels(client: httpx.Client) -> None:
    # The first 64 labelled model outputs (GSM8K and MATH responses of real models, with their grades).
    path = require_file(data_dir() / "math_model_outputs.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:64]]
    items = [
        {"id": f"row-{i}", "task": "math", "response": r["response"], "ground_truth": r["gold"]}
        for i, r in enumerate(rows)
    ]
    r = client.post("/v1/rewards", json={"items": items})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [res["id"] for res in results] == [it["id"] for it in items]
    assert [res["reward"] for res in results] == [1.0 if row["label"] else 0.0 for row in rows]
    assert {res["status"] for res in results} == {"ok"}
    assert 0 < sum(row["label"] for row in rows) < len(rows)  # both verdicts are exercised


def test_math_batch_composes_and_keeps_null_apart(client: httpx.Client) -> None:
    items = [
        # accuracy 1 + format 1 (r1_zero sums them)
        {"id": "a", "response": "<think>6*7=42</think>\nThe answer is $\\boxed{42}$.", "ground_truth": "42"},
        # accuracy 0 + format 1
        {"id": "b", "response": "<think>6+7=13</think>\nThe answer is $\\boxed{13}$.", "ground_truth": "42"},
        # a reference with no value: not scoreable, never 0
        {"id": "c", "response": "<think>hm</think>\n$\\boxed{1}$", "ground_truth": "The answer depends on the figure."},
    ]
    r = client.post("/v1/rewards", json={"items": items, "preset": "r1_zero"})
    assert r.status_code == 200, r.text
    got = {res["id"]: (res["reward"], res["status"]) for res in r.json()["results"]}
    assert got == {"a": (2.0, "ok"), "b": (1.0, "ok"), "c": (None, "invalid_ground_truth")}


def test_code_batch_on_humaneval(client: httpx.Client) -> None:
    path = require_file(data_dir() / "humaneval.jsonl")
    problems = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:8]]
    items = []
    for p in problems:
        tests = {"type": "assert", "test": p["test"], "entry_point": p["entry_point"]}
        right = f"<think>solve it</think>\n```python\n{p['prompt']}{p['canonical_solution']}\n```"
        wrong = f"<think>give up</think>\n```python\n{p['prompt']}    return None\n```"
        items.append({"id": f"{p['task_id']}/right", "task": "code", "response": right, "tests": tests})
        items.append({"id": f"{p['task_id']}/wrong", "task": "code", "response": wrong, "tests": tests})
    r = client.post("/v1/rewards", json={"items": items})
    assert r.status_code == 200, r.text
    rewards = {res["id"]: res["reward"] for res in r.json()["results"]}
    assert rewards == {it["id"]: (1.0 if it["id"].endswith("/right") else 0.0) for it in items}


def test_code_batch_mixes_languages_and_partial_credit(client: httpx.Client) -> None:
    cpp = '```cpp\n#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}\n```'
    stdio = {"type": "stdio", "cases": [{"input": "40 2", "output": "42"}, {"input": "-1 1", "output": "0"}]}
    square = {"type": "call", "fn_name": "sq", "cases": [{"input": [3], "output": 9}, {"input": [4], "output": 16}]}
    items = [
        {"id": "cpp", "task": "code", "response": cpp, "tests": stdio,
         "components": {"accuracy": {"weight": 1.0, "code": {"language": "cpp"}}}},
        {"id": "half", "task": "code", "response": "```python\ndef sq(x):\n    return 9\n```", "tests": square},
        {"id": "none", "task": "code", "response": "no code here", "tests": square},
        {"id": "math", "task": "math", "response": "$\\boxed{7}$", "ground_truth": "7"},
    ]  # fmt: skip
    r = client.post("/v1/rewards", json={"items": items})
    assert r.status_code == 200, r.text
    got = {res["id"]: (res["reward"], res["components"]["accuracy"]["status"]) for res in r.json()["results"]}
    assert got == {"cpp": (1.0, "ok"), "half": (0.5, "ok"), "none": (0.0, "no_answer"), "math": (1.0, "ok")}


def test_sandboxed_programs_see_nothing_of_the_server(client: httpx.Client, stack: Stack) -> None:
    port = stack.url.rsplit(":", 1)[1]
    probe = f"""
import os, socket
print(any("{CANARY}" in v for v in os.environ.values()), "{CANARY_NAME}" in os.environ)
s = socket.socket()
s.settimeout(2)
print(s.connect_ex(("127.0.0.1", {port})) != 0)
cmdlines = [open(f"/proc/{{p}}/cmdline", "rb").read() for p in os.listdir("/proc") if p.isdigit()]
print(any(b"reward-server" in c or b"uvicorn" in c for c in cmdlines), len(cmdlines) <= 4)
for path in ("/etc/passwd", "/usr/bin/evil", "/opt/rlvr/bin/evil"):
    try:
        open(path, "w")
        print("wrote", path)
    except OSError:
        print("denied")
"""
    result = run(client, probe)
    assert result["status"] == "ok", result
    # no canary, no route to the server's port, no server process in view, no write outside the work dir
    assert result["stdout"] == "False False\nTrue\nFalse True\ndenied\ndenied\ndenied\n"


def test_limits_hold_without_a_cgroup_per_sandbox(client: httpx.Client) -> None:
    # In the container the server is not root, so each sandbox has rlimits but no cgroup of its own: the
    # process limit must still be exact, for two sandboxes at once (both under the server's uid), and a memory
    # hog still a memory_limit.
    async def count_forks() -> list[str]:
        body = {"language": "python", "code": FORK_COUNTER, "limits": {"max_processes": 10}}
        async with httpx.AsyncClient(base_url=str(client.base_url), timeout=TIMEOUT) as c:
            answers = await asyncio.gather(*(c.post("/v1/code/run", json=body) for _ in range(2)))
        return [a.json()["stdout"] for a in answers]

    assert asyncio.run(count_forks()) == ["9\n", "9\n"]
    hog = run(client, "x = bytearray(8 * 1024 ** 3)", memory_mb=1024)
    assert hog["status"] == "memory_limit", hog
    privileges = run(
        client,
        'status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\\t" in l)\n'
        'print(status["CapEff"].strip(), status["NoNewPrivs"].strip(), status["Seccomp"].strip())',
    )
    # no capabilities; the container's seccomp filter applies inside the sandbox too
    assert privileges["stdout"] == "0000000000000000 1 2\n", privileges
    assert run(client, "print(2)")["stdout"] == "2\n"


def test_replaced_sandboxes_leave_no_zombies(client: httpx.Client, stack: Stack) -> None:
    # A timeout replaces its sandbox, and the old sandbox's runner is orphaned to PID 1. The server does not
    # wait() for processes it did not start, so without an init as PID 1 (compose's `init: true`) each one
    # stays a zombie until the container's pids_limit stops every fork and all code scores sandbox_error.
    for _ in range(5):
        assert run(client, "while True: pass", time_s=0.1)["status"] == "timeout"
    count = 'grep -l "^State:.Z" /proc/[0-9]*/status 2>/dev/null | wc -l'
    deadline = time.monotonic() + 5.0
    while True:
        done = stack.compose("exec", "-T", "server", "sh", "-c", count)
        assert done.returncode == 0, done.stderr
        zombies = int(done.stdout)
        if zombies == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert zombies == 0
    assert run(client, "print(3)")["stdout"] == "3\n"


def _case_request(case: dict[str, Any]) -> dict[str, Any]:
    inp = case["input"]
    if inp["mode"] == "stdio":
        stdin = inp.get("stdin")
        if stdin is None:
            stdin = inp["stdin_spec"]["repeat"] * inp["stdin_spec"]["times"]
        tests: dict[str, Any] = {"type": "stdio", "cases": [{"input": stdin, "output": inp["expected_stdout"]}]}
    elif inp["mode"] == "assert":
        tests = {"type": "assert", "test": inp["tests"]}
    else:
        tests = {"type": "call", "fn_name": inp["fn_name"], "cases": inp["tests"]}
    raw = inp.get("limits", {})
    limits = {LIMIT_NAMES[k]: v for k, v in raw.items() if k in LIMIT_NAMES}
    if "stdout_cap_bytes" in raw:
        limits["output_bytes"] = raw["stdout_cap_bytes"]
    return {"language": inp["language"], "code": inp["program"], "tests": tests, "limits": limits}


@pytest.mark.parametrize("case", cases_or_placeholder(CASES, "code.jsonl"), ids=lambda c: c["id"])
def test_peer_failure_cases_through_the_container(stack: Stack, case: dict[str, Any]) -> None:
    # ../shared/cases/code.jsonl, the same verdicts as tests/sandbox/test_cases.py, here through HTTP with the
    # sandboxes inside the server's container.
    want = {s.value for s in expected_statuses(case["expected"])}
    body = _case_request(case)

    async def post_all(copies: int) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=stack.url, timeout=TIMEOUT) as c:
            return await asyncio.gather(*(c.post("/v1/code/test", json=body) for _ in range(copies)))

    responses = asyncio.run(post_all(case["input"].get("concurrency", 1)))
    for r in responses:
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["status"] in want, f"{case['id']} ({case['kind']}): {report}"
    if "reward" in case["expected"]:
        assert responses[0].json()["reward"] == case["expected"]["reward"], case["id"]
    if "follow_up_run" in case["input"]:
        follow = case["input"]["follow_up_run"]
        with httpx.Client(base_url=stack.url, timeout=TIMEOUT) as c:
            assert run(c, follow["program"])["stdout"] == follow["expected_stdout"], case["id"]


def test_compose_down_leaves_nothing() -> None:
    # A stack of its own, so the module's stack keeps serving the other tests.
    require_engine(SERVER_IMAGE)
    [port] = free_ports(1)
    env = {"RLVR_PORT": str(port), "RLVR_MATH_WORKERS": "1", "RLVR_SANDBOX_POOL_SIZE": "1"}
    with compose_stack([COMPOSE_FILE], ["server"], env, f"http://127.0.0.1:{port}") as s:
        project = s.project
        assert httpx.get(f"{s.url}/healthz").status_code == 200
    left = s.compose("ps", "-a", "-q")
    assert left.returncode == 0 and left.stdout.strip() == "", f"{project} left containers: {left.stdout}"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0)
