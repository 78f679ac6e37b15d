"""The sandbox's vocabulary: limits, statuses and results. Plain frozen dataclasses, no I/O."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any


class Status(enum.StrEnum):
    """How one run, one test case or one whole test ended.

    The program's faults (``runtime_error`` ... ``compile_error``, ``wrong_answer``) are kept apart from
    ours (``sandbox_error``: the sandbox failed, ``grader_error``: the tests cannot be graded). A
    ``sandbox_error`` or ``grader_error`` must never be trained on as a reward of 0.
    """

    OK = "ok"
    """A run ended by itself with exit code 0 (``run`` only: it says nothing about correctness)."""
    PASSED = "passed"
    WRONG_ANSWER = "wrong_answer"
    RUNTIME_ERROR = "runtime_error"
    """Non-zero exit, a signal, an uncaught exception, or an exit before the harness confirmed the test."""
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    COMPILE_ERROR = "compile_error"
    SKIPPED = "skipped"
    """Not run, because an earlier case failed and ``early_stop`` was asked for."""
    SANDBOX_ERROR = "sandbox_error"
    GRADER_ERROR = "grader_error"

    @property
    def is_infrastructure(self) -> bool:
        """True for outcomes that are our fault, not the program's: they have no score."""
        return self in (Status.SANDBOX_ERROR, Status.GRADER_ERROR)


IDLE_GRACE_S = 0.5
"""A run may spend ``time_s`` + this much wall-clock time not waiting for a CPU (asleep, blocked), in s."""
WALL_CEILING_FACTOR = 4.0
"""Under any load, a run ends after ``WALL_CEILING_FACTOR * time_s + 1`` s of wall-clock time (as ``sandbox_error``
when it got there within its CPU time and its idle allowance: at least ``(WALL_CEILING_FACTOR - 1) * time_s +
IDLE_GRACE_S`` s of waiting for a CPU)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of one run. Every field carries its unit in its name.

    Attributes:
        time_s: CPU-time limit of one run (one test case), in seconds: user + system time of all its
            processes, what judges count, so a correct program slowed down by other work on the cores
            does not time out. A run that uses no CPU (it sleeps, blocks, or ignores every signal while
            stopped) still ends as ``timeout`` once its wall-clock time, less the time it spent waiting
            for a CPU, passes ``time_s + IDLE_GRACE_S``; and any run ends after
            :attr:`wall_ceiling_s` of plain wall-clock time. A run that reaches that ceiling within both
            limits spent most of it waiting for a CPU (the host is overloaded): it ends as
            ``sandbox_error``, no verdict, never the program's ``timeout``. Time spent waiting for a free
            sandbox never counts.
        memory_mb: address-space limit of the program (``RLIMIT_AS``), in MiB. The sandbox's cgroup
            (container or slot) is a hard ceiling above it.
        max_processes: processes and threads the run may have at once (``RLIMIT_NPROC``, plus the
            sandbox's pids cgroup as a ceiling).
        output_bytes: stdout (and, separately, stderr) kept per run; more is read and thrown away, and
            the run ends as ``output_limit`` unless it times out first.
        stack_mb: stack size (``RLIMIT_STACK``), in MiB. Deep recursion needs more than the usual 8.
        file_size_mb: largest file the program may write (``RLIMIT_FSIZE``), in MiB.
        compile_time_s: CPU-time limit of the compile stage (as ``time_s``).
        compile_memory_mb: address-space limit of the compile stage (g++ needs several hundred MiB).
    """

    time_s: float = 5.0
    memory_mb: int = 512
    max_processes: int = 32
    output_bytes: int = 4 * 1024 * 1024
    stack_mb: int = 64
    file_size_mb: int = 16
    compile_time_s: float = 20.0
    compile_memory_mb: int = 2048

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not value > 0:
                raise ValueError(f"Limits.{f.name} must be > 0, got {value!r}")

    @property
    def wall_ceiling_s(self) -> float:
        """The most wall-clock time one run may take under any load, in seconds."""
        return WALL_CEILING_FACTOR * self.time_s + 1.0

    def capped(self, maxima: Limits) -> Limits:
        """This limit set with every field lowered to at most the same field of ``maxima``."""
        return Limits(**{f.name: min(getattr(self, f.name), getattr(maxima, f.name)) for f in dataclasses.fields(self)})

    def for_compile(self) -> Limits:
        """The limits of a compile stage: its own time and memory, room for the compiler's processes."""
        return dataclasses.replace(
            self,
            time_s=self.compile_time_s,
            memory_mb=self.compile_memory_mb,
            max_processes=max(self.max_processes, 16),
            output_bytes=min(self.output_bytes, 256 * 1024),
            file_size_mb=max(self.file_size_mb, 256),
        )


@dataclass(frozen=True, slots=True)
class ExecResult:
    """One process run inside the sandbox.

    Attributes:
        status: ``ok``, ``runtime_error``, ``timeout``, ``memory_limit``, ``output_limit`` or
            ``sandbox_error`` (compile stages report their failure as ``compile_error`` one level up).
        exit_code: the exit status, or ``None`` when the process died of a signal or never ran.
        signal: the number of the signal that ended the process, else ``None``.
        stdout: the first ``Limits.output_bytes`` of standard output.
        stderr: the last ``Limits.output_bytes`` of standard error (the end holds the traceback).
        stdout_truncated / stderr_truncated: more was written than was kept.
        time_s: wall-clock time from start to exit, in seconds.
        cpu_s: user + system CPU time of the run's processes, in seconds (what ``Limits.time_s`` limits).
        cpu_wait_s: time the run was ready to run but waited for a CPU taken by other work, in seconds
            (sampled every few tens of ms, so 0 for short runs).
        memory_mb: peak resident memory of the process (and its waited-for children), in MiB.
        detail: why, in words, for anything but ``ok``.
        channel: what the program wrote to the harness's result channel (assert/call tests only).
        reusable: False when this run leaves the sandbox in need of a clean-up (a limit was hit or a
            process was left behind); the backend then cleans it in place and replaces that container or
            bubblewrap sandbox only when the clean-up cannot prove it clean.
        host_oom: the OOM killer of the host or container acted during the run (on this job or another).
        guarded: the run's processes could not send SIGKILL or SIGTERM to its main process (the launcher's kill
            guard), so such a death came from outside the sandbox.
    """

    status: Status
    exit_code: int | None = None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    time_s: float = 0.0
    cpu_s: float = 0.0
    cpu_wait_s: float = 0.0
    memory_mb: float = 0.0
    detail: str | None = None
    channel: bytes = b""
    reusable: bool = True
    host_oom: bool = False
    guarded: bool = False

    @classmethod
    def sandbox_error(cls, detail: str) -> ExecResult:
        return cls(Status.SANDBOX_ERROR, detail=detail, reusable=False)


@dataclass(frozen=True, slots=True)
class RunResult:
    """A program compiled (when its language compiles) and run once with one stdin.

    ``status`` is ``compile_error`` when the compile stage failed (``run`` is then ``None``), else the
    run's status. ``compile`` is the compile stage's result, or ``None`` for languages without one.
    """

    status: Status
    run: ExecResult | None
    compile: ExecResult | None = None

    @property
    def detail(self) -> str | None:
        stage = self.run if self.run is not None else self.compile
        return stage.detail if stage is not None else None


@dataclass(frozen=True, slots=True)
class CaseResult:
    """The verdict on one test case.

    Attributes:
        index: position of the case in the test list.
        status: ``passed``, ``wrong_answer``, ``runtime_error``, ``timeout``, ``memory_limit``,
            ``output_limit``, ``compile_error``, ``skipped`` or ``sandbox_error``.
        time_s / cpu_s / memory_mb: the case's wall-clock time (s), the CPU time of the program's
            processes during it (s; what ``Limits.time_s`` limits) and the program's peak resident
            memory (MiB). For assert and call tests, where one program process runs every case,
            ``memory_mb`` is that process's peak up to the end of the case.
        cpu_wait_s: how much of ``time_s`` the program was ready to run but waited for a CPU taken by
            other work on the host (s); large values mean the host is overloaded.
        exit_code: the process's exit code, when there was one process per case.
        stdout / stderr: tails of the program's output, cut to the caller's tail limit.
        detail: what differed or failed, in words.
    """

    index: int
    status: Status
    time_s: float = 0.0
    cpu_s: float = 0.0
    cpu_wait_s: float = 0.0
    memory_mb: float = 0.0
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class TestReport:
    """The verdict on a program against a whole test list.

    Attributes:
        status: ``passed`` when every case passed; ``grader_error`` when the tests cannot be graded (empty,
            undecodable, unsupported); ``sandbox_error`` when the sandbox failed; otherwise the status of
            the first case that did not pass (``compile_error`` when it did not compile).
        passed / total: cases passed, and cases in the test list.
        cases: one result per case, in order (empty for ``grader_error``).
        compile: the compile stage's result, if the language has one and it ran.
        detail: why, in words, for ``grader_error`` and ``sandbox_error``.
    """

    __test__ = False  # not a pytest test class, despite its name

    status: Status
    passed: int
    total: int
    cases: tuple[CaseResult, ...] = ()
    compile: ExecResult | None = None
    detail: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def reward(self, *, all_or_nothing: bool = False) -> float | None:
        """The fraction of cases passed (or 1/0 with ``all_or_nothing``); ``None`` when not scoreable."""
        if self.status.is_infrastructure or self.total == 0:
            return None
        if all_or_nothing:
            return 1.0 if self.passed == self.total else 0.0
        return self.passed / self.total


def utf8(text: str) -> bytes:
    """``text`` as UTF-8 bytes, for a program's source, its stdin or an expected output.

    JSON can carry a lone surrogate (``"\\ud800"``), which strict UTF-8 cannot encode; it becomes its
    three-byte form (``surrogatepass``) instead of an error, so such text is run and compared as the bytes
    it stands for (a Python source with one is then a compile error, as the file would be) and never makes
    the server fail.
    """
    return text.encode("utf-8", "surrogatepass")


class SandboxUnavailable(RuntimeError):
    """The backend cannot start here (no bubblewrap, no Docker engine, no image). The message says how to fix it."""
