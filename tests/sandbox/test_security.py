"""Hostile programs (issue 3, item 7), on both backends. After each one the sandbox must keep serving.

Each program reports what it managed to do on stdout, so a test checks both the verdict and that the
attack failed for the right reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import secrets
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import Limits, Sandbox, Status, _runner, run_program
from sandbox.local import _Cgroup
from tests.sandbox.conftest import started
from tests.sandbox.test_conformance import FORK_COUNTER


async def assert_still_serving(sandbox: Sandbox) -> None:
    result = await run_program(sandbox, "python", "print(2)")
    assert result.status is Status.OK and result.run is not None and result.run.stdout == b"2\n"


def host_processes_with(marker: str) -> list[int]:
    """PIDs of host processes whose command line holds ``marker`` (root sees every namespace's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on the host's 127.0.0.1 (like the reward server) that records every connection."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            seen.append(conn.recv(100))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join()
    server.close()


async def test_network_is_refused_even_to_localhost(sandbox: Sandbox, listener: tuple[int, list[bytes]]) -> None:
    port, seen = listener
    code = f"""
import socket
for host, port in [("127.0.0.1", {port}), ("198.51.100.7", 80), ("::1", {port})]:
    try:
        socket.create_connection((host, port), timeout=3).sendall(b"leak")
        print("connected", host)
    except OSError as exc:
        print("refused", host, type(exc).__name__)
try:
    socket.getaddrinfo("deb.debian.org", 80)
    print("resolved")
except OSError as exc:
    print("no dns")
"""
    start = time.monotonic()
    result = await run_program(sandbox, "python", code, limits=Limits(time_s=10))
    assert result.run is not None
    lines = result.run.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines] == ["refused", "refused", "refused", "no"], lines
    assert seen == []  # nothing reached the host's listener
    assert time.monotonic() - start < 5  # no route: it fails at once instead of waiting for a timeout
    await assert_still_serving(sandbox)


async def test_secret_host_file_is_unreadable(sandbox: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "api_key.txt"
    secret.write_text("sk-" + secrets.token_hex(8))
    secret.chmod(0o644)  # readable by anyone on the host: only the mount namespace protects it
    paths = [str(secret), "/etc/shadow", "/root/.bashrc", "/proc/1/environ", "/proc/1/mem", str(Path.home())]
    code = f"""
import os
for path in {paths!r}:
    try:
        with open(path, "rb") as f:
            f.read(1)
        print("read", path)
    except OSError as exc:
        print("denied", type(exc).__name__)
"""
    result = await run_program(sandbox, "python", code)
    assert result.run is not None
    out = result.run.stdout.decode()
    assert "read" not in out.split(), out
    assert secret.read_text() not in out
    await assert_still_serving(sandbox)


@pytest.mark.parametrize("kind", ["local", "docker"])
async def test_server_environment_is_invisible(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = "sk-canary-" + secrets.token_hex(8)
    monkeypatch.setenv("RLVR_TEST_API_KEY", canary)
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    sandbox = await started(kind, pool_size=1)  # started with the secret in the server's environment
    try:
        code = """
import os
print(sorted(os.environ))
for path in ("/proc/self/environ", "/proc/1/environ", "/proc/1/cmdline"):
    try:
        print(open(path, "rb").read())
    except OSError as exc:
        print(type(exc).__name__)
"""
        result = await run_program(sandbox, "python", code)
        assert result.status is Status.OK
        assert result.run is not None
        assert canary.encode() not in result.run.stdout
        assert b"RLVR_TEST_API_KEY" not in result.run.stdout and b"OPENAI_API_KEY" not in result.run.stdout
        await assert_still_serving(sandbox)
    finally:
        await sandbox.close()


async def test_fork_bomb_is_contained(sandbox: Sandbox) -> None:
    marker = "forkbomb-" + secrets.token_hex(6)
    code = f"""
import os, sys
if len(sys.argv) < 2:
    os.execv(sys.executable, [sys.executable, "main.py", "{marker}"])
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
    result = await run_program(sandbox, "python", code, limits=Limits(time_s=2, max_processes=64))
    assert result.status in (Status.RUNTIME_ERROR, Status.TIMEOUT)
    assert host_processes_with(marker) == []  # every child is gone once the verdict is in
    await assert_still_serving(sandbox)


@pytest.mark.parametrize(
    ("code", "outcomes"),
    [
        ("x = bytearray(8 * 1024 ** 3)\nprint(len(x))", {Status.MEMORY_LIMIT}),
        ("x = []\nwhile True:\n    x.append(bytearray(50 * 1024 * 1024))", {Status.MEMORY_LIMIT}),
        # Four processes of 900 MB each stay under the per-process limit but not under the sandbox's
        # cgroup ceiling (2.4 GB here): the OOM killer ends one, or a fork fails. Each holds its 900 MB for 4 s
        # and waits for its children, so that the four overlap however the CPU quota spaces them out (with a
        # 1 s hold and no wait, a throttled run once let each hog end before the next one allocated).
        (
            "import os, time\nfor _ in range(2):\n    os.fork()\nx = bytearray(900 * 1024 * 1024)\ntime.sleep(4)\n"
            "try:\n    while True:\n        os.wait()\nexcept ChildProcessError:\n    pass",
            {Status.MEMORY_LIMIT, Status.RUNTIME_ERROR},
        ),
    ],
    ids=["8GB-at-once", "growing", "forked-hogs"],
)
async def test_memory_hog_ends_as_memory_limit(sandbox: Sandbox, code: str, outcomes: set[Status]) -> None:
    start = time.monotonic()
    result = await run_program(sandbox, "python", code, limits=Limits(time_s=10, memory_mb=1024))
    assert result.status in outcomes, result.run
    assert time.monotonic() - start < 10 + 2
    await assert_still_serving(sandbox)


@pytest.mark.parametrize(
    "code",
    [
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM, signal.SIGXCPU):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass",
        "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
        "import time\nwhile True:\n    time.sleep(0.01)",
    ],
    ids=["ignores-signals", "swallows-exceptions", "sleeps"],
)
async def test_infinite_loop_ends_as_timeout_within_limit_plus_one_second(sandbox: Sandbox, code: str) -> None:
    # time_s is CPU time, so a busy loop on a loaded host also gets the time it waited for a CPU.
    start = time.monotonic()
    result = await run_program(sandbox, "python", code, limits=Limits(time_s=1.5))
    elapsed = time.monotonic() - start
    assert result.status is Status.TIMEOUT
    assert result.run is not None
    assert elapsed - result.run.cpu_wait_s < 1.5 + 1.0, (elapsed, result.run)
    await assert_still_serving(sandbox)


async def test_huge_output_ends_as_output_limit_with_memory_bounded(sandbox: Sandbox) -> None:
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = "import sys\nsys.stdout.write('x' * 100_000_000)\nsys.stdout.flush()"
    result = await run_program(sandbox, "python", code, limits=Limits(output_bytes=1024 * 1024, memory_mb=1024))
    assert result.status is Status.OUTPUT_LIMIT
    assert result.run is not None and len(result.run.stdout) == 1024 * 1024 and result.run.stdout_truncated
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb) / 1024
    assert grown_mb < 64, f"the server's peak memory grew by {grown_mb:.0f} MB"
    await assert_still_serving(sandbox)


async def test_endless_output_ends_as_timeout_with_output_cut(sandbox: Sandbox) -> None:
    # code-001: the program never stops printing; it is cut at the cap and ends at its time limit.
    code = "while True:\n    print('y' * 4096)"
    result = await run_program(sandbox, "python", code, limits=Limits(time_s=2, output_bytes=1024 * 1024))
    assert result.status is Status.TIMEOUT
    assert result.run is not None and len(result.run.stdout) == 1024 * 1024 and result.run.stdout_truncated
    await assert_still_serving(sandbox)


async def test_writes_outside_the_work_dir_fail(sandbox: Sandbox) -> None:
    code = """
import os, sysconfig
targets = [os.path.join(sysconfig.get_paths()["purelib"], "sitecustomize.py"), "/usr/bin/evil", "/evil",
           "/tmp/evil", "/etc/evil", "/dev/evil", "/proc/sys/kernel/evil", "/sys/evil", "../evil"]
for path in targets:
    try:
        with open(path, "w") as f:
            f.write("print('poisoned')")
        print("wrote", path)
    except OSError as exc:
        print("failed", type(exc).__name__)
"""
    result = await run_program(sandbox, "python", code)
    assert result.run is not None
    assert b"wrote" not in result.run.stdout, result.run.stdout
    follow_up = await run_program(sandbox, "python", "print(2)")
    assert follow_up.run is not None and follow_up.run.stdout == b"2\n"  # nothing was poisoned (code-011)


async def test_shared_memory_does_not_outlive_its_job(sandbox: Sandbox) -> None:
    # /dev/shm is writable (multiprocessing needs it) but private to the sandbox and emptied after each job.
    token = secrets.token_hex(8)
    write = f"open('/dev/shm/note', 'w').write('{token}')\nprint('written')"
    look = "import os\nprint(os.listdir('/dev/shm'), os.listdir('/work'))"
    for _ in range(3):  # more jobs than sandboxes: some land where the note was written
        first = await run_program(sandbox, "python", write)
        assert first.run is not None and first.run.stdout == b"written\n"
        second = await run_program(sandbox, "python", look)
        assert second.run is not None and second.run.stdout == b"[] ['main.py']\n"


async def test_background_process_is_gone_before_the_next_job(sandbox: Sandbox) -> None:
    marker = "daemon-" + secrets.token_hex(6)
    code = f"""
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{marker}"], start_new_session=True)
if os.fork() == 0:  # and a classic double-fork daemon
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "{marker}"])
    os._exit(0)
print("started")
"""
    result = await run_program(sandbox, "python", code)
    assert result.run is not None and result.run.stdout == b"started\n"
    assert host_processes_with(marker) == []
    listing = (
        "import os, json\n"
        "print(json.dumps([sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.getpid(), os.getppid()]))"
    )
    after = await run_program(sandbox, "python", listing)
    assert after.run is not None
    pids, me, launcher = json.loads(after.run.stdout)
    assert pids == sorted({1, launcher, me}), pids  # the runner, the launcher and the job: nothing else


async def test_one_job_cannot_read_another_jobs_files(sandbox: Sandbox) -> None:
    token = secrets.token_hex(8)
    writer = f"import time\nopen('secret.txt', 'w').write('{token}')\ntime.sleep(3)\nprint('done')"
    reader = f"""
import os, glob, time
time.sleep(0.5)
found = []
for root in ("/work", "/tmp", "/dev", "/var", "/run"):
    for path in glob.glob(root + "/**/secret.txt", recursive=True):
        found.append(path)
for pid in os.listdir("/proc"):
    try:
        found.extend(os.listdir(f"/proc/{{pid}}/cwd"))
    except OSError:
        pass
print([f for f in found if f != "main.py"])
print("{token}" in repr(found))
"""
    slow, snoop = await asyncio.gather(
        run_program(sandbox, "python", writer, limits=Limits(time_s=10)),
        run_program(sandbox, "python", reader, limits=Limits(time_s=10)),
    )
    assert slow.run is not None and slow.run.stdout == b"done\n"
    assert snoop.run is not None and snoop.run.stdout == b"[]\nFalse\n", snoop.run.stdout
    later = await run_program(sandbox, "python", "import glob\nprint(glob.glob('/work/**/secret.txt', recursive=True))")
    assert later.run is not None and later.run.stdout == b"[]\n"


async def test_killing_the_parent_hits_nothing(sandbox: Sandbox) -> None:
    # code-008: the runner is PID 1 of the sandbox's namespace: signals from inside do not reach it. The
    # parent is the launcher, which a job can kill: the job then fails and its sandbox is replaced.
    code = """
import os, signal
for pid in (os.getppid(), 1):
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSTOP):
        try:
            os.kill(pid, sig)
        except OSError:
            pass
print(4)
"""
    result = await run_program(sandbox, "python", code)
    assert result.status is Status.RUNTIME_ERROR
    assert result.run is not None and result.run.stdout == b"4\n"
    assert result.detail == "killed or stopped the sandbox's process launcher (its parent)"
    await assert_still_serving(sandbox)


@pytest.mark.parametrize(
    "then",
    ["print(4)", "while True: pass", "import time; time.sleep(60)"],
    ids=["exits", "spins", "sleeps"],
)
async def test_stopping_the_parent_is_the_programs_fault(sandbox: Sandbox, then: str) -> None:
    # A stopped launcher reports nothing. Unnoticed, the run hung until the host gave up and called it a
    # sandbox_error: a null reward (not trained on) in place of the 0 a wrong program earns.
    code = f"import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n{then}\n"
    limits = Limits(time_s=1)
    started = time.monotonic()
    result = await run_program(sandbox, "python", code, limits=limits)
    elapsed = time.monotonic() - started
    assert result.status in {Status.RUNTIME_ERROR, Status.TIMEOUT}, (result.status, result.detail)
    # Ended by the runner within the run's own wall ceiling, not by the host giving up on a silent sandbox (30 s
    # and more). time_s + 1 s is what an idle machine gives; a loaded one stretches it, up to the ceiling.
    assert elapsed < limits.wall_ceiling_s + 1.0, elapsed
    await assert_still_serving(sandbox)


@pytest.mark.parametrize("pause_s", [0.0, 0.001, 0.002])
async def test_stopping_the_parent_on_its_way_out_is_the_programs_fault(sandbox: Sandbox, pause_s: float) -> None:
    # SIGINT makes the launcher (Python) exit, closing its socket first; a SIGSTOP a moment later froze it
    # half-gone. The runner then waited for good on a job that only a dead launcher hands over, and the host
    # gave up after 31 s: a sandbox_error (a null) where the program earns its 0. 1 ms hit it 4 times of 4.
    code = f"""
import os, signal, time
os.kill(os.getppid(), signal.SIGINT)
until = time.monotonic() + {pause_s}
while time.monotonic() < until:
    pass
os.kill(os.getppid(), signal.SIGSTOP)
print(4)
"""
    started = time.monotonic()
    result = await run_program(sandbox, "python", code)
    assert result.status is Status.RUNTIME_ERROR, (result.status, result.detail)
    assert result.run is not None and result.run.stdout == b"4\n"
    assert result.detail == "killed or stopped the sandbox's process launcher (its parent)"
    assert time.monotonic() - started < 15.0  # about 1 s here; the host's own limit is 31 s
    await assert_still_serving(sandbox)


def test_a_launcher_that_does_not_die_is_killed_and_reaped() -> None:
    # The runner's half of the fault above, without a sandbox: _death_signal must leave no child behind.
    pid = os.fork()
    if pid == 0:  # a launcher stopped on its way out
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(0)
    assert _runner._death_signal(pid, timeout_s=0.05) is None  # this runner's own kill: not from outside
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: its children are the runner's now
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGTERM)
        os._exit(0)
    assert _runner._death_signal(pid) == signal.SIGTERM


async def test_runner_cannot_be_traced(sandbox: Sandbox) -> None:
    code = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
print(libc.ptrace(PTRACE_ATTACH, 1, 0, 0), ctypes.get_errno() != 0)
for name in ("fd", "mem", "root"):
    try:
        os.listdir(f"/proc/1/{name}") if name != "mem" else open("/proc/1/mem", "rb").read(1)
        print("open", name)
    except OSError:
        print("denied", name)
"""
    result = await run_program(sandbox, "python", code)
    assert result.run is not None
    assert result.run.stdout == b"-1 True\ndenied fd\ndenied mem\ndenied root\n", result.run.stdout
    await assert_still_serving(sandbox)


async def test_jobs_are_the_oom_killers_first_choice(sandbox: Sandbox) -> None:
    # Where sandboxes share one memory ceiling (the compose container has no cgroup per sandbox), the OOM
    # killer must pick a job's processes, never the server beside them. The score was once written in each
    # forked job while it was still non-dumpable, which /proc refuses: every job had 0, and a job of 30
    # processes of 400 MB got the whole server killed.
    python = await run_program(sandbox, "python", "print(open('/proc/self/oom_score_adj').read().strip())")
    assert python.run is not None and python.run.stdout == b"1000\n", python
    cpp = (
        '#include <cstdio>\nint main() { int v = 0; FILE* f = fopen("/proc/self/oom_score_adj", "r");'
        ' if (f && fscanf(f, "%d", &v) == 1) printf("%d\\n", v); }'
    )
    compiled = await run_program(sandbox, "cpp", cpp)
    assert compiled.run is not None and compiled.run.stdout == b"1000\n", compiled


async def test_no_new_privileges_and_no_capabilities(sandbox: Sandbox) -> None:
    code = """
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
print(status["CapEff"].strip(), status["CapPrm"].strip(), status["NoNewPrivs"].strip())
import os
print(os.getuid() != 0, os.geteuid() != 0)
"""
    result = await run_program(sandbox, "python", code)
    assert result.run is not None
    assert result.run.stdout == b"0000000000000000 0000000000000000 1\nTrue True\n", result.run.stdout


@pytest.mark.bwrap
async def test_local_without_a_cgroup_still_contains_hostile_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hosts without a writable cgroup v1 hierarchy (cgroup v2, not root) rely on rlimits alone.
    monkeypatch.setattr(_Cgroup, "parents", classmethod(lambda cls, tag: None))
    sandbox = await started("local", pool_size=1)
    try:
        assert sandbox.isolation == "rlimits"  # type: ignore[attr-defined]
        counted = await run_program(sandbox, "python", FORK_COUNTER, limits=Limits(max_processes=10))
        assert counted.run is not None and counted.run.stdout == b"9\n"
        await test_fork_bomb_is_contained(sandbox)
        hog = await run_program(sandbox, "python", "x = bytearray(8 * 1024 ** 3)", limits=Limits(memory_mb=1024))
        assert hog.status is Status.MEMORY_LIMIT
        await assert_still_serving(sandbox)
    finally:
        await sandbox.close()
