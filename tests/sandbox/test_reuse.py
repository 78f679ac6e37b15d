"""A sandbox survives limit hits: a job that hits a limit or leaves something behind is cleaned in place.

Each test starts its own pool of one sandbox, so the job after the hostile one is served by the very sandbox the
hostile one ran in: it must find no process, no file and no IPC object of its predecessor.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from sandbox import Limits, Sandbox, Status, run_program
from tests.conftest import REPO_ROOT
from tests.sandbox.conftest import BACKENDS, started

# What the next job sees of its predecessor: processes but itself (and its launcher, the runner), files in its
# scratch directories, SysV IPC objects.
INSPECT = """
import os
me, parent = os.getpid(), os.getppid()
procs = sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (me, parent, 1))
files = sorted(os.listdir('.')) + sorted(os.listdir('/dev/shm'))
ipc = [len(open(f'/proc/sysvipc/{k}').read().splitlines()) - 1 for k in ('shm', 'sem', 'msg')]
print(procs, [f for f in files if f != 'main.py'], ipc)
"""
NOTHING_LEFT = b"[] [] [0, 0, 0]\n"

DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open('/dev/shm/daemon-was-here', 'w').write('x')
        time.sleep(300)
    os._exit(0)
time.sleep(0.2)
print('forked')
"""
SCRATCH_FILE = "open('left.txt', 'w').write('x' * 1000)\nopen('/dev/shm/seg', 'wb').write(b'y' * 1000)\nprint(1)\n"
MEMORY_HOG = "x = bytearray(1 << 33)\n"
FORK_BOMB = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(60)\n"
FLOOD = "import sys\nsys.stdout.write('x' * (1 << 22))\n"
# SysV IPC, POSIX message queues and kernel keys outlive every process: the guard refuses them.
OUTLIVING = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
IPC_PRIVATE, IPC_CREAT = 0, 0o1000
results = {
    'shmget': libc.shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0o600),
    'semget': libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o600),
    'msgget': libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600),
    'mq_open': libc.syscall(240 if __import__('os').uname().machine == 'x86_64' else 180, b'q', 0o100 | 2, 0o600, None),
    'add_key': libc.syscall(248 if __import__('os').uname().machine == 'x86_64' else 217, b'user', b'k', b'v', 1, -3),
}
print(sorted(k for k, v in results.items() if v == -1))
"""


async def _one(kind: str) -> Sandbox:
    return await started(kind, pool_size=1)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize(
    ("code", "limits", "status"),
    [
        (DAEMON, Limits(), Status.OK),
        (SCRATCH_FILE, Limits(), Status.OK),
        (MEMORY_HOG, Limits(memory_mb=128), Status.MEMORY_LIMIT),
        (FORK_BOMB, Limits(time_s=0.5, max_processes=16), Status.TIMEOUT),
        (FLOOD, Limits(output_bytes=1 << 16), Status.OUTPUT_LIMIT),
        ("while True: pass", Limits(time_s=0.3), Status.TIMEOUT),
    ],
    ids=["daemon", "scratch-file", "memory", "fork-bomb", "output", "timeout"],
)
async def test_hostile_job_is_cleaned_in_place(kind: str, code: str, limits: Limits, status: Status) -> None:
    sandbox = await _one(kind)
    try:
        result = await run_program(sandbox, "python", code, limits=limits)
        assert result.status is status, result.detail
        after = await run_program(sandbox, "python", INSPECT)
        assert after.status is Status.OK, after.detail
        assert after.run is not None and after.run.stdout == NOTHING_LEFT
        dirty = code not in (SCRATCH_FILE,)  # a file alone needs no clean-up beyond the usual wipe
        assert (sandbox.cleaned, sandbox.replaced) == (int(dirty), 0)  # type: ignore[attr-defined]
        assert sandbox.alive == 1  # type: ignore[attr-defined]
    finally:
        await sandbox.close()


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_daemon_is_killed_without_the_launcher(kind: str) -> None:
    """What a job left behind is killed pid by pid: the warm launcher (the jobs' parent) serves on, so the next
    job pays no new interpreter (kill(-1), which takes the launcher too, is kept for what outruns that)."""
    sandbox = await _one(kind)
    parent = "import os\nprint(os.getppid())\n"
    try:
        before = await run_program(sandbox, "python", parent)
        assert (await run_program(sandbox, "python", DAEMON)).status is Status.OK
        after = await run_program(sandbox, "python", parent)
        assert before.run is not None and after.run is not None
        assert after.run.stdout == before.run.stdout  # the same launcher
        assert (sandbox.cleaned, sandbox.replaced) == (1, 0)  # type: ignore[attr-defined]
        inspect = await run_program(sandbox, "python", INSPECT)
        assert inspect.run is not None and inspect.run.stdout == NOTHING_LEFT
    finally:
        await sandbox.close()


@pytest.mark.parametrize("kind", BACKENDS)
async def test_objects_that_outlive_processes_are_refused(kind: str) -> None:
    sandbox = await _one(kind)
    try:
        result = await run_program(sandbox, "python", OUTLIVING)
        assert result.run is not None and result.run.stdout == b"['add_key', 'mq_open', 'msgget', 'semget', 'shmget']\n"
        after = await run_program(sandbox, "python", INSPECT)
        assert after.run is not None and after.run.stdout == NOTHING_LEFT
    finally:
        await sandbox.close()


def test_sysv_ipc_left_behind_is_removed_by_the_clean_up() -> None:
    """Where the guard cannot be installed (no seccomp), a job can still make SysV IPC objects: the runner's clean-up
    removes them and says whether it could. Run in a fresh IPC namespace, as in a sandbox."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is missing: apt-get install util-linux")
    code = f"""
import ctypes, sys
sys.path.insert(0, {str(REPO_ROOT)!r})
from sandbox import _runner
libc = ctypes.CDLL(None)
made = [libc.shmget(0, 4096, 0o1000 | 0o600), libc.semget(0, 1, 0o1000 | 0o600), libc.msgget(0, 0o1000 | 0o600)]
before = _runner._sysvipc_ids()
print(all(m >= 0 for m in made), sorted(k for k, _ in before), _runner._remove_sysvipc(), _runner._sysvipc_ids())
"""
    done = subprocess.run(
        ["unshare", "--user", "--ipc", sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no user namespaces here: {done.stderr.strip()}")
    assert done.stdout == "True ['msg', 'sem', 'shm'] True []\n", done.stderr


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_sandbox_that_cannot_be_proven_clean_is_replaced(kind: str) -> None:
    sandbox = await _one(kind)
    try:
        slot = next(iter(sandbox._slots))  # type: ignore[attr-defined]
        await slot.transport.kill()  # the runner is gone: nothing can be proven
        result = await run_program(sandbox, "python", "print(1)")
        assert result.status is Status.SANDBOX_ERROR
        assert sandbox.replaced == 1  # type: ignore[attr-defined]
        result = await run_program(sandbox, "python", "print(2)")
        assert result.run is not None and result.run.stdout == b"2\n"
    finally:
        await sandbox.close()
