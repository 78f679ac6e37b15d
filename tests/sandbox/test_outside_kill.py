"""A job killed from outside the sandbox (an OOM kill, an operator's ``kill``) is ``sandbox_error`` (a null
reward), never a wrong answer; and a program cannot pass its own death off as one (the launcher's kill guard)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from sandbox import AssertTests, Limits, Sandbox, Status, run_program, run_tests
from sandbox.base import result_from_runner

# Every way a program might have SIGKILL or SIGTERM sent to itself; each must fail (EPERM) under the guard.
SELF_KILLS = {
    "kill(getpid(), SIGKILL)": "os.kill(os.getpid(), signal.SIGKILL)",
    "kill(getpid(), SIGTERM)": "os.kill(os.getpid(), signal.SIGTERM)",
    "kill(0, SIGKILL): its group": "os.kill(0, signal.SIGKILL)",
    "killpg(own group)": "os.killpg(os.getpgrp(), signal.SIGKILL)",
    "kill(-1, SIGKILL): everyone": "os.kill(-1, signal.SIGKILL)",
    "raise_signal (tgkill)": "signal.raise_signal(signal.SIGTERM)",
    "pthread_kill": "signal.pthread_kill(threading.main_thread().ident, signal.SIGKILL)",
    "a lower CPU rlimit": "lower_cpu_limit()",
    "a POSIX timer": "timer()",
    "ptrace": "ptrace()",
    "a child kills its parent": "child_kills_parent()",
    # The launcher (the main process's parent) is guarded too: its death by SIGKILL or SIGTERM means an outside kill.
    "kill(getppid(), SIGKILL): the launcher": "os.kill(os.getppid(), signal.SIGKILL)",
    "kill(getppid(), SIGTERM): the launcher": "os.kill(os.getppid(), signal.SIGTERM)",
    "killpg(the launcher's group)": "os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
    "rt_sigqueueinfo to the launcher": "queue_to_launcher()",
}
PRELUDE = """
import ctypes, os, signal, sys, threading
libc = ctypes.CDLL(None, use_errno=True)

def timer():  # timer_create(CLOCK_MONOTONIC, &{SIGEV_SIGNAL, SIGKILL}, &id), then arm it for 1 ms
    sev = (ctypes.c_int * 16)(0, 9, 0)  # sigev_value (8 bytes), sigev_signo, sigev_notify
    sev[2], sev[3] = 9, 0
    tid = ctypes.c_void_p()
    if libc.timer_create(1, ctypes.byref(sev), ctypes.byref(tid)) != 0:
        raise OSError(ctypes.get_errno(), "timer_create")
    spec = (ctypes.c_long * 4)(0, 0, 0, 1_000_000)
    libc.timer_settime(tid, 0, ctypes.byref(spec), None)
    import time; time.sleep(1)

def lower_cpu_limit():  # setrlimit(RLIMIT_CPU, {1, 1}); Python's resource module would say ValueError
    if libc.setrlimit(0, ctypes.byref((ctypes.c_ulong * 2)(1, 1))) != 0:
        raise OSError(ctypes.get_errno(), "setrlimit")

def ptrace():
    if libc.ptrace(0, 0, 0, 0) != 0:  # PTRACE_TRACEME
        raise OSError(ctypes.get_errno(), "ptrace")

def queue_to_launcher():  # rt_sigqueueinfo(ppid, SIGKILL, &info): a queued signal to the launcher
    info = (ctypes.c_int * 32)(9, 0, -1)  # si_signo, si_errno, si_code SI_QUEUE
    if libc.syscall(129 if os.uname().machine == "x86_64" else 138, os.getppid(), 9, ctypes.byref(info)) != 0:
        raise OSError(ctypes.get_errno(), "rt_sigqueueinfo")

def child_kills_parent():
    pid = os.fork()
    if pid == 0:
        try:
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(0)
        except OSError as exc:
            os._exit(exc.errno)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise OSError(os.waitstatus_to_exitcode(status), "the child could not kill its parent")
"""


@pytest.mark.parametrize("how", list(SELF_KILLS))
async def test_a_program_cannot_kill_itself(sandbox: Sandbox, how: str) -> None:
    code = PRELUDE + f"try:\n    {SELF_KILLS[how]}\nexcept OSError as exc:\n    print('refused', exc.errno)\n"
    result = await run_program(sandbox, "python", code, limits=Limits(time_s=5))
    assert result.run is not None and result.run.guarded
    assert result.status is Status.OK, (how, result.detail, result.run.stderr[-500:])
    assert result.run.stdout == b"refused 1\n", (how, result.run.stdout)  # EPERM


async def test_signals_to_its_own_children_still_work(sandbox: Sandbox) -> None:
    code = (
        "import subprocess, sys, multiprocessing as mp, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "p.kill(); print(p.wait())\n"
        "q = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "q.terminate(); print(q.wait())\n"
    )
    result = await run_program(sandbox, "python", code, limits=Limits(time_s=10))
    assert result.status is Status.OK, result.detail
    assert result.run is not None and result.run.stdout == b"-9\n-15\n"


def _find(marker: str) -> int:
    """The host pid of the process whose command line is ``sleep <marker>`` (started in a sandbox)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == f"sleep\0{marker}\0".encode():
                    return int(entry.name)
            except OSError:
                continue
    raise LookupError(marker)


async def _kill_when_up(marker: str, sig: int, *, parent: bool = False) -> None:
    for _ in range(200):
        try:
            pid = _find(marker)
        except LookupError:
            await asyncio.sleep(0.05)
            continue
        if parent:  # the process that forked it: the harness's checker
            pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        os.kill(pid, sig)
        return
    raise LookupError(f"no process 'sleep {marker}' appeared")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
async def test_a_program_killed_from_outside_is_sandbox_error(sandbox: Sandbox, sig: int) -> None:
    marker = f"41.{sig}{os.getpid() % 1000}"
    code = f"import os\nos.execv('/bin/sleep', ['sleep', '{marker}'])\n"
    run = asyncio.ensure_future(run_program(sandbox, "python", code, limits=Limits(time_s=20)))
    await _kill_when_up(marker, sig)
    result = await run
    assert result.status is Status.SANDBOX_ERROR, result.detail
    assert "from outside the sandbox" in (result.detail or "")


async def test_the_launcher_killed_from_outside_is_sandbox_error(sandbox: Sandbox) -> None:
    """The program's parent, the warm launcher, killed by the host (a fresh-user report: this was scored 0.0,
    ``runtime_error``, as if the program had killed it)."""
    marker = f"43.{os.getpid() % 1000}"
    code = f"import os\nos.execv('/bin/sleep', ['sleep', '{marker}'])\n"
    run = asyncio.ensure_future(run_program(sandbox, "python", code, limits=Limits(time_s=20)))
    await _kill_when_up(marker, signal.SIGKILL, parent=True)
    result = await run
    assert result.status is Status.SANDBOX_ERROR, result.detail
    assert "launcher" in (result.detail or "") and "from outside the sandbox" in (result.detail or "")
    assert result.status.is_infrastructure  # a null reward, never a 0
    later = await run_program(sandbox, "python", "print(6)")  # a new launcher serves the next job
    assert later.run is not None and later.run.stdout == b"6\n"


@pytest.mark.parametrize("parent", [False, True], ids=["the program", "the harness's checker"])
async def test_a_harness_killed_from_outside_is_sandbox_error(sandbox: Sandbox, parent: bool) -> None:
    # The harness's worker turns into `sleep` when it loads the program; kill it, or the checker that forked it.
    marker = f"42.{int(parent)}{os.getpid() % 1000}"
    code = f"import os\nos.execv('/bin/sleep', ['sleep', '{marker}'])\ndef sq(x):\n    return x * x\n"
    tests = AssertTests(test_list=("assert sq(2) == 4", "assert sq(3) == 9"))
    report_task = asyncio.ensure_future(run_tests(sandbox, "python", code, tests, limits=Limits(time_s=20)))
    await _kill_when_up(marker, signal.SIGKILL, parent=parent)
    report = await report_task
    assert report.status is Status.SANDBOX_ERROR, (report.detail, report.cases)
    assert report.reward() is None


def _answer(**overrides: object) -> dict[str, object]:
    answer: dict[str, object] = {
        "stdout": "",
        "stderr": "",
        "exit_code": None,
        "signal": int(signal.SIGKILL),
        "stdout_bytes": 0,
        "stderr_bytes": 0,
        "timed_out": None,
        "oom_killed": False,
        "leftover": False,
        "clean": True,
        "time_s": 1.0,
        "cpu_s": 0.5,
        "maxrss_kb": 100 * 1024,
        "rss_peak_kb": 0,
        "host_oom": False,
        "guarded": True,
    }
    return {**answer, **overrides}


@pytest.mark.parametrize(
    ("overrides", "status", "reason"),
    [
        ({}, Status.SANDBOX_ERROR, "a SIGKILL the runner did not send, and the program could not: from outside"),
        ({"signal": int(signal.SIGTERM)}, Status.SANDBOX_ERROR, "an operator's plain kill"),
        ({"guarded": False}, Status.RUNTIME_ERROR, "without the guard the program may have sent it"),
        ({"signal": int(signal.SIGSEGV)}, Status.RUNTIME_ERROR, "a crash is the program's"),
        ({"cpu_s": 7.0}, Status.TIMEOUT, "the CPU rlimit's SIGKILL, past the 5 s limit"),
        ({"host_oom": True}, Status.SANDBOX_ERROR, "the host's OOM killer took a program within its 512 MiB"),
        ({"host_oom": True, "rss_peak_kb": 600 * 1024}, Status.MEMORY_LIMIT, "its processes held 600 MiB of 512"),
        ({"oom_killed": True}, Status.MEMORY_LIMIT, "the sandbox's own cgroup ran out"),
        ({"timed_out": "cpu", "cpu_s": 5.1}, Status.TIMEOUT, "the runner's own kill"),
        (
            {"launcher_killed": True, "launcher_killed_outside": True, "signal": None, "exit_code": 0},
            Status.SANDBOX_ERROR,
            "the launcher died of a signal the guarded program cannot send it",
        ),
        (
            {"launcher_killed": True, "signal": None, "exit_code": 0},
            Status.RUNTIME_ERROR,
            "the program killed (or stopped) its launcher with another signal",
        ),
    ],
)
def test_how_a_killed_run_is_classified(overrides: dict[str, object], status: Status, reason: str) -> None:
    result = result_from_runner(_answer(**overrides), ["python3"], Limits(time_s=5, memory_mb=512))
    assert result.status is status, (reason, result.detail)
