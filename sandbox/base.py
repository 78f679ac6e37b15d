"""The ``Sandbox`` protocol, and the pool of warm runner sandboxes that both backends are made of.

A backend (``local``: bubblewrap, ``docker``: containers) only knows how to start one isolated sandbox
with the runner (``sandbox/_runner.py``) inside and talk to it over a byte stream (a :class:`Transport`).
Everything else is shared here: leasing a sandbox to one job at a time, the runner protocol, the
mapping of a run's outcome to a :class:`~sandbox.types.Status`, and replacing a sandbox in which a job
hit a limit or left a process behind (it is never reused).
"""

from __future__ import annotations

import abc
import asyncio
import base64
import contextlib
import functools
import json
import logging
import re
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

from sandbox.types import IDLE_GRACE_S, ExecResult, Limits, SandboxUnavailable, Status

logger = logging.getLogger("sandbox")

WORK_ROOT = "/work"
"""The tmpfs, inside every sandbox, that is the work directory of the job it runs (emptied between jobs)."""

_OPEN_TIMEOUT_S = 10.0
_CLOSE_TIMEOUT_S = 10.0
_EXEC_GRACE_S = 10.0
"""How long past a run's own limit the host waits for the runner's answer before it gives the sandbox up."""
_RESPAWN_ATTEMPTS = 5
_RESPAWN_BACKOFF_S = 0.5
_REFILL_INTERVAL_S = 5.0
_MEMORY_ERROR = re.compile(rb"(^|\n)MemoryError\b|std::bad_alloc")


@functools.cache
def in_sandbox_source(name: str) -> str:
    """The text of one of the programs that run inside the sandbox (``_runner.py``, ``_launcher.py``,
    ``_pyharness.py``): they travel on the command line or as job files, so no image or host path has to
    hold them, and an image never goes stale."""
    return (Path(__file__).parent / name).read_text()


def runner_command(python: str = "python3") -> list[str]:
    """The command that starts the runner inside a sandbox (isolated mode, no site: stdlib only)."""
    return [python, "-I", "-S", "-c", in_sandbox_source("_runner.py"), WORK_ROOT, in_sandbox_source("_launcher.py")]


class Job(Protocol):
    """A fresh work directory in one sandbox, leased to one caller; see :meth:`Sandbox.job`."""

    async def exec(
        self, argv: Sequence[str], *, stdin: bytes = b"", limits: Limits, channel: bool = False
    ) -> ExecResult:
        """Run ``argv`` in the work directory with ``stdin`` under ``limits``.

        ``channel=True`` gives the process a result pipe at fd 3 whose content comes back in
        :attr:`ExecResult.channel` (the assert/call harness reports through it).
        Never raises for the program's faults or the sandbox's: those are statuses of the result.
        """
        ...


class Sandbox(Protocol):
    """Untrusted code execution: compile and run programs with stdin, limits and a fresh work dir.

    ``start()`` brings the backend up (raises :class:`SandboxUnavailable` with the fix when it cannot
    run here); ``job(files)`` leases one sandbox, writes ``files`` (name -> bytes) into a new private
    work directory and yields a :class:`Job`; the work directory and every process the job started are
    gone when the block exits. ``close()`` stops everything.
    """

    name: str

    @property
    def alive(self) -> int:
        """Sandboxes up now (idle or busy)."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def job(self, files: Mapping[str, bytes]) -> AbstractAsyncContextManager[Job]: ...


class Transport(abc.ABC):
    """A byte stream to one runner: lines out, lines in."""

    @abc.abstractmethod
    async def send(self, data: bytes) -> None:
        """Write ``data`` to the runner's stdin. Raises ``ConnectionError`` when it is gone."""

    @abc.abstractmethod
    async def readline(self) -> bytes:
        """The runner's next stdout line. Raises ``ConnectionError`` (or ``EOFError``) when it is gone."""

    @abc.abstractmethod
    async def kill(self) -> None:
        """Stop the sandbox for good and release what it holds. Must not raise."""


class _SlotBroken(Exception):
    """The runner stopped answering or answered nonsense; the sandbox cannot be used any more."""


class _Slot:
    """One warm sandbox with its runner. Requests go strictly in turn; any failure breaks it for good."""

    def __init__(self, transport: Transport, label: str) -> None:
        self.transport = transport
        self.label = label
        self.broken: str | None = None

    async def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self.broken:
            raise _SlotBroken(self.broken)
        try:
            await self.transport.send(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            line = await asyncio.wait_for(self.transport.readline(), timeout_s)
        except TimeoutError:
            self.broken = f"the runner gave no answer to {message['op']!r} within {timeout_s:g} s"
        except (ConnectionError, EOFError, OSError) as exc:
            self.broken = f"lost the runner: {exc or type(exc).__name__}"
        except asyncio.CancelledError:
            # The answer may still come; it would be read as the answer to the next request.
            self.broken = "a request was cancelled midway"
            raise
        else:
            if not line:
                self.broken = "the runner exited"
            else:
                try:
                    answer: dict[str, Any] = json.loads(line)
                except ValueError:
                    self.broken = f"the runner answered garbage: {line[:200]!r}"
                else:
                    if "error" not in answer:
                        return answer
                    self.broken = f"the runner failed {message['op']!r}: {answer['error']}"
        raise _SlotBroken(self.broken)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _timeout_detail(why: str, answer: Mapping[str, Any], limits: Limits) -> str:
    if why == "cpu":
        return f"used {answer['cpu_s']:.2f} s of CPU time, over the {limits.time_s:g} s limit; killed"
    if why == "idle":
        return (
            f"still running after {limits.time_s + IDLE_GRACE_S:g} s of wall-clock time not spent waiting for a "
            "CPU (asleep or blocked); killed"
        )
    return (
        f"no verdict: the host kept the program waiting for a CPU for {answer['cpu_wait_s']:.2f} s, so it reached the "
        f"{limits.wall_ceiling_s:g} s wall-clock ceiling after {answer['cpu_s']:.2f} of its {limits.time_s:g} s of "
        "CPU time (the host is overloaded); killed"
    )


def result_from_runner(answer: Mapping[str, Any], argv: Sequence[str], limits: Limits) -> ExecResult:
    """Turn the runner's answer to one ``exec`` into an :class:`ExecResult` with its status.

    The order matters: a run that timed out is ``timeout`` even if it also flooded its output (it did
    not finish); memory beats output because a failed allocation explains the rest.
    """
    stdout = base64.b64decode(answer["stdout"])
    stderr = base64.b64decode(answer["stderr"])
    exit_code, sig = answer["exit_code"], answer["signal"]
    over_output = answer["stdout_bytes"] > limits.output_bytes or answer["stderr_bytes"] > limits.output_bytes
    failed = exit_code != 0
    spawn_error = answer.get("spawn_error")
    reusable = True
    if spawn_error:
        status, detail = Status.SANDBOX_ERROR, f"could not start {argv[0]!r}: {spawn_error}"
    elif answer.get("launcher_killed_outside"):
        # The job cannot send its launcher SIGKILL or SIGTERM (the kill guard): the OOM killer or an operator did.
        status, detail = (
            Status.SANDBOX_ERROR,
            (
                "the sandbox's process launcher (the program's parent) was killed from outside the sandbox (the host's "
                "out-of-memory killer or an operator); no verdict on the program"
            ),
        )
    elif answer.get("launcher_killed"):
        status, detail = Status.RUNTIME_ERROR, "killed or stopped the sandbox's process launcher (its parent)"
    elif answer["timed_out"] == "wall":
        # The ceiling comes last: the run was within its CPU time and its time off the CPU, so it spent at least
        # (WALL_CEILING_FACTOR - 1) * time_s + 0.5 s waiting for a CPU. The host's fault: no verdict, never a 0.
        status, detail = Status.SANDBOX_ERROR, _timeout_detail("wall", answer, limits)
    elif answer["timed_out"]:
        status, detail = Status.TIMEOUT, _timeout_detail(str(answer["timed_out"]), answer, limits)
    elif answer["oom_killed"]:
        status, detail = Status.MEMORY_LIMIT, "killed by the out-of-memory killer of the sandbox's cgroup"
    elif sig in OUTSIDE_SIGNALS and answer.get("guarded"):
        status, detail = killed_from_outside(sig, answer, limits)
    elif failed and _MEMORY_ERROR.search(stderr[-4096:]):
        status, detail = Status.MEMORY_LIMIT, f"an allocation failed under the {limits.memory_mb} MiB limit"
    elif over_output:
        status, detail = Status.OUTPUT_LIMIT, f"wrote more than {limits.output_bytes} bytes to stdout or stderr"
    elif sig is not None:
        status, detail = Status.RUNTIME_ERROR, f"killed by {_signal_name(sig)}"
    elif failed:
        status, detail = Status.RUNTIME_ERROR, f"exit code {exit_code}"
    else:
        status, detail = Status.OK, None
    if status not in (Status.OK, Status.RUNTIME_ERROR) or answer["leftover"] or not answer["clean"]:
        reusable = False
    if answer["leftover"] and detail is None:
        detail = "left processes behind (killed)"
    return ExecResult(
        status=status,
        exit_code=exit_code,
        signal=sig,
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=answer["stdout_bytes"] > len(stdout),
        stderr_truncated=answer["stderr_bytes"] > len(stderr),
        time_s=float(answer["time_s"]),
        cpu_s=float(answer["cpu_s"]),
        cpu_wait_s=float(answer.get("cpu_wait_s", 0.0)),
        memory_mb=round(answer["maxrss_kb"] / 1024, 3),
        detail=detail,
        channel=base64.b64decode(answer.get("channel") or ""),
        reusable=reusable,
        host_oom=bool(answer.get("host_oom")),
        guarded=bool(answer.get("guarded")),
    )


#: Signals that end a guarded job's process only from outside the sandbox (``_launcher.py``'s kill guard): the
#: kernel (the OOM killer, the CPU rlimit) or a process outside (an operator's ``kill``, ``docker kill``).
OUTSIDE_SIGNALS = (signal.SIGKILL, signal.SIGTERM)


def killed_from_outside(sig: int, answer: Mapping[str, Any], limits: Limits) -> tuple[Status, str]:
    """The status of a guarded process that died of ``sig`` (SIGKILL or SIGTERM) which the runner did not send.

    The program could not send it to itself, so it came from the kernel or from outside the sandbox: the CPU
    rlimit (the runner's own CPU limit comes first, so this is a backstop: ``timeout``), the OOM killer of the
    host or container (``memory_limit`` when the job used more than its memory limit, else ``sandbox_error``: the
    host was short of memory, not the program at fault), or anything else (an operator, a stop of the server):
    ``sandbox_error``, a null reward, never a wrong answer.
    """
    if float(answer["cpu_s"]) >= limits.time_s:
        return Status.TIMEOUT, f"used {answer['cpu_s']:.2f} s of CPU time, over the {limits.time_s:g} s limit; killed"
    used_mb = max(int(answer.get("maxrss_kb") or 0), int(answer.get("rss_peak_kb") or 0)) / 1024
    if answer.get("host_oom"):
        if used_mb >= limits.memory_mb:
            return Status.MEMORY_LIMIT, (
                f"killed by the out-of-memory killer after using {used_mb:.0f} MiB, over the {limits.memory_mb} MiB "
                "limit"
            )
        return Status.SANDBOX_ERROR, (
            f"killed by the host's out-of-memory killer while using {used_mb:.0f} MiB, within its {limits.memory_mb} "
            "MiB limit: the host or container ran short of memory, not the program"
        )
    return Status.SANDBOX_ERROR, (
        f"killed by {_signal_name(sig)} from outside the sandbox (an operator, or the host); the program cannot "
        "send it to itself, so this is no verdict on it"
    )


def limits_to_runner(limits: Limits) -> dict[str, Any]:
    return {
        "time_s": limits.time_s,
        "idle_grace_s": IDLE_GRACE_S,
        "wall_s": limits.wall_ceiling_s,
        "memory_mb": limits.memory_mb,
        "max_processes": limits.max_processes,
        "output_bytes": limits.output_bytes,
        "stack_mb": limits.stack_mb,
        "file_size_mb": limits.file_size_mb,
    }


class _RunnerJob:
    """A :class:`Job` on one leased slot."""

    def __init__(self, slot: _Slot | None, unavailable: str | None = None) -> None:
        self._slot = slot
        self._unavailable = unavailable
        self.reusable = True
        """False once a run hit a limit or left something behind: the sandbox needs a clean-up before reuse."""
        self.suspect = False
        """True once a run ended in ``sandbox_error`` (the host's fault): the sandbox is replaced, not cleaned."""

    def _broken(self) -> str | None:
        if self._slot is None:
            return self._unavailable or "no sandbox"
        return self._slot.broken

    async def _open(self, files: Mapping[str, bytes]) -> None:
        if self._slot is not None and not self._slot.broken:
            with contextlib.suppress(_SlotBroken):
                message = {"op": "open", "files": {k: _b64(v) for k, v in files.items()}}
                await self._slot.request(message, _OPEN_TIMEOUT_S)

    async def _close(self) -> bool:
        """Kill what is left, empty the work dir and ``/dev/shm``, remove SysV IPC objects (the runner's ``close``).

        Returns whether the slot may serve another job: the runner proved it clean (no process but its own, the
        scratch directories empty, no IPC object), and no run of this job was a ``sandbox_error``.
        """
        if self._slot is None or self._slot.broken:
            return False
        try:
            answer = await self._slot.request({"op": "close"}, _CLOSE_TIMEOUT_S)
        except _SlotBroken as exc:
            logger.warning("sandbox %s: %s", self._slot.label, exc)
            return False
        if answer["leftover"]:
            self.reusable = False
        return not self.suspect and bool(answer["clean"])

    async def exec(
        self, argv: Sequence[str], *, stdin: bytes = b"", limits: Limits, channel: bool = False
    ) -> ExecResult:
        broken = self._broken()
        if broken or self._slot is None:
            return ExecResult.sandbox_error(broken or "no sandbox")
        message = {
            "op": "exec",
            "argv": list(argv),
            "stdin": _b64(stdin),
            "limits": limits_to_runner(limits),
            "channel": channel,
        }
        try:
            answer = await self._slot.request(message, limits.wall_ceiling_s + _EXEC_GRACE_S)
        except _SlotBroken as exc:
            logger.warning("sandbox %s: %s", self._slot.label, exc)
            return ExecResult.sandbox_error(str(exc))
        result = result_from_runner(answer, argv, limits)
        if not result.reusable:
            self.reusable = False
        if result.status is Status.SANDBOX_ERROR or not answer["clean"]:
            self.suspect = True
        return result


class RunnerPool(abc.ABC):
    """A :class:`Sandbox` made of ``pool_size`` warm sandboxes, each running the runner.

    Subclasses implement :meth:`_check` (can this backend run here?) and :meth:`_spawn` (start one
    sandbox and return its transport). A job leases one sandbox. After each job the runner kills every
    process the job left (its whole PID namespace but itself), empties the scratch directories and removes
    SysV IPC objects, then checks that nothing is left: a sandbox proven clean serves the next job, even
    after a limit hit (``cleaned``). Only one that cannot be proven clean, whose runner broke, or whose job
    ended in ``sandbox_error`` is killed and replaced in the background (``replaced``), so the next job
    never sees what the last one did.
    """

    name = "runner-pool"

    def __init__(self, pool_size: int) -> None:
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        self.pool_size = pool_size
        self._slots: set[_Slot] = set()
        self._idle: deque[_Slot] = deque()
        self._cond: asyncio.Condition | None = None
        self._respawning = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._last_refill = time.monotonic()
        self._spawned = 0
        self.replaced = 0
        """Sandboxes replaced so far (the clean-up could not prove them clean, or the runner broke)."""
        self.cleaned = 0
        """Sandboxes cleaned in place and reused after a job that hit a limit or left something behind."""

    # ------------------------------------------------------------------ backend hooks

    @abc.abstractmethod
    async def _check(self) -> None:
        """Raise :class:`SandboxUnavailable`, with the fix in the message, when this backend cannot run."""

    @abc.abstractmethod
    async def _spawn(self, label: str) -> Transport:
        """Start one sandbox with the runner in it and return its transport (before the ready line)."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start ``pool_size`` sandboxes and wait until their runners are ready.

        Raises:
            SandboxUnavailable: the backend cannot run here, or no sandbox could be started.
        """
        self._cond = asyncio.Condition()
        await self._check()
        results = await asyncio.gather(*(self._new_slot() for _ in range(self.pool_size)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if len(errors) == len(results):
            raise SandboxUnavailable(f"{self.name}: no sandbox could be started: {errors[0]}")
        for error in errors:
            logger.error("%s: a sandbox failed to start: %s", self.name, error)
            self._start_respawn()
        self._idle.extend(r for r in results if isinstance(r, _Slot))

    async def close(self) -> None:
        """Kill every sandbox. Jobs still running get ``sandbox_error``."""
        self._closed = True
        if self._cond is not None:
            async with self._cond:
                self._cond.notify_all()
        slots = list(self._slots)
        self._slots.clear()
        self._idle.clear()
        await asyncio.gather(*(s.transport.kill() for s in slots))
        # Let clean-ups and restarts in flight end (a restart that lands now kills its own sandbox);
        # cancelling them could strand a sandbox that is half started.
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=30)

    @property
    def alive(self) -> int:
        """Sandboxes up now, idle or busy."""
        return len(self._slots)

    # ------------------------------------------------------------------ jobs

    @asynccontextmanager
    async def job(self, files: Mapping[str, bytes]) -> AsyncIterator[Job]:
        slot, reason = await self._acquire()
        job = _RunnerJob(slot, reason)
        try:
            await job._open(files)
            yield job
        finally:
            if slot is not None:
                # The clean-up must finish even when the caller is cancelled, or the slot would leak.
                finish = asyncio.get_running_loop().create_task(self._finish(job, slot))
                self._tasks.add(finish)
                finish.add_done_callback(self._tasks.discard)
                await asyncio.shield(finish)

    async def _finish(self, job: _RunnerJob, slot: _Slot) -> None:
        reusable = await job._close()
        if reusable and not self._closed:
            if not job.reusable:
                self.cleaned += 1
            self._idle.append(slot)
            assert self._cond is not None
            async with self._cond:
                self._cond.notify()
            return
        self.replaced += 1
        self._slots.discard(slot)
        await slot.transport.kill()
        if not self._closed:
            self._start_respawn()

    async def _acquire(self) -> tuple[_Slot | None, str | None]:
        if self._cond is None:
            return None, f"{self.name} is not started"
        refilled = False
        async with self._cond:
            while not self._idle:
                if self._closed:
                    return None, f"{self.name} is closed"
                if not self._slots and self._respawning == 0:
                    if refilled or not self._refill():
                        return None, f"{self.name}: every sandbox failed and none could be restarted"
                    refilled = True  # wait for this round of restarts, but for no other
                await self._cond.wait()
            return self._idle.popleft(), None

    # ------------------------------------------------------------------ internals

    def _schedule(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _new_slot(self) -> _Slot:
        self._spawned += 1
        label = f"{self.name}-{self._spawned}"
        transport = await self._spawn(label)
        try:
            line = await asyncio.wait_for(transport.readline(), 60.0)
            ready = json.loads(line) if line else {"ready": False, "error": "the runner exited at start"}
        except (TimeoutError, ConnectionError, EOFError, OSError, ValueError) as exc:
            ready = {"ready": False, "error": f"{type(exc).__name__}: {exc}"}
        if not ready.get("ready"):
            await transport.kill()
            raise SandboxUnavailable(f"{label}: the runner did not start: {ready.get('error')}")
        slot = _Slot(transport, label)
        if self._closed:
            await transport.kill()
            raise SandboxUnavailable(f"{self.name} is closed")
        self._slots.add(slot)
        return slot

    def _start_respawn(self) -> None:
        self._respawning += 1  # counted now, so a waiting job knows that a sandbox is on its way
        self._schedule(self._respawn())

    def _refill(self) -> bool:
        """Start sandboxes for the slots that restarts gave up on (the engine may be back), at most every
        few seconds. Returns whether it started any."""
        now = time.monotonic()
        missing = self.pool_size - len(self._slots) - self._respawning
        if self._closed or missing <= 0 or now - self._last_refill < _REFILL_INTERVAL_S:
            return False
        self._last_refill = now
        for _ in range(missing):
            self._start_respawn()
        return True

    async def _respawn(self) -> None:
        try:
            for attempt in range(_RESPAWN_ATTEMPTS):
                try:
                    slot = await self._new_slot()
                except (SandboxUnavailable, OSError) as exc:
                    if self._closed:
                        return
                    logger.error("%s: restarting a sandbox failed (try %d): %s", self.name, attempt + 1, exc)
                    if attempt + 1 < _RESPAWN_ATTEMPTS:
                        await asyncio.sleep(_RESPAWN_BACKOFF_S * 2**attempt)
                    continue
                self._idle.append(slot)
                return
        finally:
            self._respawning -= 1
            assert self._cond is not None
            async with self._cond:
                self._cond.notify_all()


async def log_stream(stream: asyncio.StreamReader, label: str) -> None:
    """Log what a runner writes to stderr (it only does so when something is wrong)."""
    while line := await stream.readline():
        logger.warning("sandbox %s: %s", label, line.decode(errors="replace").rstrip())


__all__ = [
    "WORK_ROOT",
    "Job",
    "RunnerPool",
    "Sandbox",
    "SandboxUnavailable",
    "Transport",
    "in_sandbox_source",
    "limits_to_runner",
    "log_stream",
    "result_from_runner",
    "runner_command",
]
