"""The ``local`` backend: warm bubblewrap sandboxes on this host, plus rlimits and a cgroup where available.

Each sandbox is ``bwrap`` with every namespace unshared (user, PID, network, IPC, UTS, cgroup), further
user namespaces disabled, no capabilities, a read-only ``/usr``, no ``/etc`` beyond the loader cache, a
tmpfs work root, and the runner as PID 1. When the server runs as root, the sandbox first drops to an
unprivileged uid (``setpriv``) and joins a cgroup of its own (v1 memory, pids and cpu controllers), which
caps its memory, process count and CPU share whatever the job does. Without a writable cgroup v1
hierarchy the per-run rlimits (address space, processes, CPU time) are the only caps.

Requires the Debian package ``bubblewrap`` and unprivileged user namespaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import shutil
import subprocess
from pathlib import Path

from sandbox.base import WORK_ROOT, RunnerPool, Transport, log_stream, runner_command
from sandbox.types import Limits, SandboxUnavailable

logger = logging.getLogger("sandbox")

BWRAP_FIX = "apt-get install bubblewrap"
_CGROUP_V1 = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "pids", "cpu")
_RUNNER_OVERHEAD_MB = 128
SHM_MB = 64
_CPU_PERIOD_US = 100_000
_LINE_LIMIT = 1 << 28  # one runner answer carries up to two output buffers in base64


def sandbox_ceilings(max_limits: Limits, work_mb: int) -> tuple[int, int]:
    """The (memory MiB, pids) ceiling of one sandbox (container or cgroup), above any single run's limits."""
    memory_mb = max(max_limits.memory_mb, max_limits.compile_memory_mb) + work_mb + SHM_MB + _RUNNER_OVERHEAD_MB
    pids = max(max_limits.max_processes, 16) + 8
    return memory_mb, pids


class _Cgroup:
    """One sandbox's cgroup v1 directories (memory, pids, cpu), created under the server's own cgroups."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    @classmethod
    def parents(cls, tag: str) -> dict[str, Path] | None:
        """Where sandbox cgroups go, or ``None`` when this host has no writable cgroup v1 hierarchy."""
        if os.geteuid() != 0:
            return None
        own: dict[str, str] = {}
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                for c in controllers.split(","):
                    own[c] = path
        parents = {}
        for c in _CONTROLLERS:
            root = _CGROUP_V1 / c
            if c not in own or not (root / "cgroup.procs").exists():
                return None
            parent = root / own[c].lstrip("/") / f"rlvr-sandbox-{os.getpid()}-{tag}"
            try:
                parent.mkdir(exist_ok=True)
            except OSError:
                return None
            parents[c] = parent
        return parents

    @classmethod
    def create(cls, parents: dict[str, Path], name: str, memory_mb: int, pids: int, cpus: float) -> _Cgroup:
        dirs = {c: parents[c] / name for c in _CONTROLLERS}
        for d in dirs.values():
            d.mkdir(exist_ok=True)
        memory = str(memory_mb * 1024 * 1024)
        (dirs["memory"] / "memory.limit_in_bytes").write_text(memory)
        memsw = dirs["memory"] / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # no swap either, or a memory hog would only slow the host down
            memsw.write_text(memory)
        (dirs["pids"] / "pids.max").write_text(str(pids))
        quota = dirs["cpu"] / "cpu.cfs_quota_us"
        if quota.exists():
            (dirs["cpu"] / "cpu.cfs_period_us").write_text(str(_CPU_PERIOD_US))
            quota.write_text(str(int(cpus * _CPU_PERIOD_US)))
        return cls(dirs)

    def join_command(self) -> str:
        """Shell words that move the shell itself into this cgroup (before it execs the sandbox)."""
        return " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs.values())

    async def remove(self) -> None:
        # A killed sandbox's processes take a moment to leave; rmdir fails (EBUSY) until they have.
        remaining = list(self.dirs.values())
        for _ in range(100):
            for d in list(remaining):
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    continue
                remaining.remove(d)
            if not remaining:
                return
            await asyncio.sleep(0.05)
        logger.warning("could not remove cgroups %s", remaining)


class _ProcessTransport(Transport):
    def __init__(self, process: asyncio.subprocess.Process, cgroup: _Cgroup | None, label: str) -> None:
        self.process = process
        self.cgroup = cgroup
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._stderr_task = asyncio.get_running_loop().create_task(log_stream(process.stderr, label))

    async def send(self, data: bytes) -> None:
        # A runner killed while its sandbox sat idle leaves a closed pipe; writing to it raises RuntimeError
        # under uvloop ("the handler is closed"), which must break the slot (sandbox_error), not the request.
        if self._stdin.is_closing() or self.process.returncode is not None:
            raise ConnectionError("the runner's stdin is closed")
        try:
            self._stdin.write(data)
            await self._stdin.drain()
        except RuntimeError as exc:
            raise ConnectionError(f"the runner's stdin is closed ({exc})") from exc

    async def readline(self) -> bytes:
        return await self._stdout.readline()

    async def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        with contextlib.suppress(Exception):
            await self.process.wait()
        self._stderr_task.cancel()
        if self.cgroup is not None:
            await self.cgroup.remove()


class LocalSandbox(RunnerPool):
    """Warm bubblewrap sandboxes on this host.

    Args:
        pool_size: sandboxes kept warm, i.e. jobs run at once.
        max_limits: the largest limits any run will ask for; they size each sandbox's cgroup.
        bwrap: the bubblewrap executable.
        python: the interpreter that runs the runner and Python jobs (its ``/usr`` is mounted read-only).
        uid: unprivileged host uid to drop to when the server runs as root (default: nobody, 65534).
        work_mb: size of the tmpfs that holds the work directories, in MiB.
        cpus: CPU share of one sandbox (cgroup quota), in CPUs.
    """

    name = "local"

    def __init__(
        self,
        pool_size: int = 2,
        *,
        max_limits: Limits | None = None,
        bwrap: str = "bwrap",
        python: str = "/usr/bin/python3",
        uid: int = 65534,
        work_mb: int = 256,
        cpus: float = 1.0,
    ) -> None:
        super().__init__(pool_size)
        self.max_limits = max_limits or Limits()
        self.bwrap = bwrap
        self.python = python
        self.uid = uid
        self.work_mb = work_mb
        self.cpus = cpus
        self._bwrap_path: str | None = None
        self._cgroup_parents: dict[str, Path] | None = None

    @property
    def isolation(self) -> str:
        """What caps a sandbox: ``cgroup-v1`` (+ rlimits) or ``rlimits`` only."""
        return "cgroup-v1" if self._cgroup_parents else "rlimits"

    def _bwrap_argv(self, cgroup: _Cgroup | None = None) -> list[str]:
        assert self._bwrap_path is not None
        argv = [
            self._bwrap_path,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
        ]
        argv += ["--as-pid-1", "--uid", "1000", "--gid", "1000", "--hostname", "sandbox"]
        argv += ["--ro-bind", "/usr", "/usr"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / top
            if host.is_symlink():  # merged /usr: recreate the link instead of binding
                argv += ["--symlink", os.readlink(host), f"/{top}"]
            elif host.is_dir():
                argv += ["--ro-bind", str(host), f"/{top}"]
        argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        # Its own /dev/shm (multiprocessing's semaphores need one), emptied with the work dir after each job.
        argv += ["--perms", "1777", "--size", str(SHM_MB * 1024 * 1024), "--tmpfs", "/dev/shm"]
        argv += ["--perms", "1777", "--size", str(self.work_mb * 1024 * 1024), "--tmpfs", WORK_ROOT]
        if cgroup is not None:
            # The runner reads its OOM-kill counter where a container would see it.
            argv += ["--ro-bind", str(cgroup.dirs["memory"]), "/sys/fs/cgroup/memory"]
        # Everything else is read-only.
        argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
        argv += ["--chdir", WORK_ROOT, "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"]
        argv += ["--setenv", "LANG", "C.UTF-8", "--cap-drop", "ALL"]
        return argv

    def _command(self, cgroup: _Cgroup | None) -> list[str]:
        command = [*self._bwrap_argv(cgroup), *runner_command(self.python)]
        if os.geteuid() == 0:
            command = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--", *command]
        if cgroup is not None:
            # Join the cgroup before anything can fork, then exec into the sandbox.
            command = ["/bin/sh", "-c", f'{cgroup.join_command()} && exec "$@"', "sh", *command]
        return command

    async def _check(self) -> None:
        self._bwrap_path = shutil.which(self.bwrap)
        if self._bwrap_path is None:
            raise SandboxUnavailable(f"bubblewrap ({self.bwrap}) is not installed: {BWRAP_FIX}")
        if not Path(self.python).exists():
            raise SandboxUnavailable(f"{self.python} is missing: apt-get install python3")
        if os.geteuid() == 0 and shutil.which("setpriv") is None:
            raise SandboxUnavailable("setpriv is missing (needed to drop root): apt-get install util-linux")
        probe = [*self._bwrap_argv(), self.python, "-I", "-S", "-c", "pass"]
        if os.geteuid() == 0:
            probe = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--", *probe]
        done = await asyncio.to_thread(subprocess.run, probe, capture_output=True, timeout=30, check=False)
        if done.returncode != 0:
            raise SandboxUnavailable(
                f"bubblewrap cannot make a sandbox here ({done.stderr.decode(errors='replace').strip()}); "
                "unprivileged user namespaces must be allowed (sysctl kernel.unprivileged_userns_clone=1, "
                "kernel.apparmor_restrict_unprivileged_userns=0)"
            )
        self._cgroup_parents = _Cgroup.parents(secrets.token_hex(4))
        if self._cgroup_parents is None:
            logger.warning("local sandbox: no writable cgroup v1 hierarchy; only rlimits cap each run")

    async def _spawn(self, label: str) -> Transport:
        cgroup = None
        if self._cgroup_parents is not None:
            memory_mb, pids = sandbox_ceilings(self.max_limits, self.work_mb)
            cgroup = _Cgroup.create(self._cgroup_parents, label, memory_mb, pids, self.cpus)
        try:
            process = await asyncio.create_subprocess_exec(
                *self._command(cgroup),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=_LINE_LIMIT,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
        except OSError:
            if cgroup is not None:
                await cgroup.remove()
            raise
        return _ProcessTransport(process, cgroup, label)

    async def close(self) -> None:
        await super().close()
        if self._cgroup_parents is not None:
            for parent in self._cgroup_parents.values():
                with contextlib.suppress(OSError):
                    parent.rmdir()
