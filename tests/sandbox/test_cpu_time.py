"""``time_s`` is CPU time: a correct program passes on a loaded host; one that sleeps, stops or ignores
signals still ends as ``timeout`` within ``time_s + 1`` s; every case reports its CPU and wall time.

No test here depends on an idle machine. On a busy one a program's wall-clock time grows by the time it waits
for a CPU, so the tests check the rules the sandbox enforces, which do not move with the load: CPU time
against ``time_s``, wall-clock time less the measured wait against ``time_s + IDLE_GRACE_S``, and plain
wall-clock time against the ceiling. A run that reaches the ceiling within the other two was kept from a CPU
by the host: it is ``sandbox_error`` (no verdict), and :func:`overloaded` checks that its numbers show it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sandbox import (
    AssertTests,
    CallCase,
    CallTests,
    Limits,
    Sandbox,
    Status,
    StdioCase,
    StdioTests,
    run_program,
    run_tests,
)
from tests.sandbox.conftest import KILL_LATENCY_S, overloaded

# Burns `seconds` of its own CPU time, however long that takes on the wall clock.
BURN = (
    "import time\ndef burn(seconds):\n    end = time.process_time() + seconds\n"
    "    while time.process_time() < end:\n        pass\n"
)


@contextmanager
def host_load(per_core: int = 2) -> Iterator[None]:
    """Busy processes outside the sandbox, as math workers or other jobs would be. Each has a session of
    its own: with the kernel's autogroups a session shares one CPU weight, as a sandbox does."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(per_core * (os.cpu_count() or 1))
    ]
    try:
        time.sleep(0.2)  # let them get going
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


async def test_a_correct_program_passes_on_a_loaded_host(sandbox: Sandbox) -> None:
    # 0.4 s of CPU under a 0.8 s limit. With the cores taken by other work, its wall time passes 0.8 s:
    # a wall-clock limit would call it a timeout (QA's cpu.py), a CPU-time limit lets it pass.
    limits = Limits(time_s=0.8)
    stdio = StdioTests((StdioCase(b"", b"ok\n"),))
    asserts = AssertTests(test_list=("assert work(1) == 1",))
    calls = CallTests("work", (CallCase((2,), 2),))
    with host_load():
        reports = [
            await run_tests(sandbox, "python", BURN + "burn(0.4)\nprint('ok')\n", stdio, limits=limits),
            await run_tests(
                sandbox, "python", BURN + "def work(x):\n    burn(0.4)\n    return x\n", asserts, limits=limits
            ),
            await run_tests(
                sandbox, "python", BURN + "def work(x):\n    burn(0.4)\n    return x\n", calls, limits=limits
            ),
        ]
    for report in reports:
        case = report.cases[0]
        if overloaded(case, limits):  # the host, not the program: no verdict rather than a wrong timeout
            continue
        assert report.status is Status.PASSED, case
        assert 0.4 <= case.cpu_s < 0.8, case
        assert case.time_s > limits.time_s, f"the load did not slow the program down, so this proves nothing: {case}"
        assert case.cpu_wait_s > 0, case


async def test_cpu_time_over_the_limit_is_a_timeout_in_every_format(sandbox: Sandbox) -> None:
    limits = Limits(time_s=0.5)
    stdio = await run_tests(sandbox, "python", BURN + "burn(5)\n", StdioTests((StdioCase(b"", b""),)), limits=limits)
    code = BURN + "def work(x):\n    if x:\n        burn(5)\n    return x\n"
    asserts = await run_tests(
        sandbox, "python", code, AssertTests(test_list=("assert work(1) == 1", "assert work(0) == 0")), limits=limits
    )
    assert [c.status for c in asserts.cases][1:] == [Status.PASSED]  # the next case still runs
    for case in (stdio.cases[0], asserts.cases[0]):
        if overloaded(case, limits):  # the ceiling came first: under 1/6 of a core for 3 s
            continue
        assert case.status is Status.TIMEOUT, case
        assert 0.5 <= case.cpu_s < 0.5 + KILL_LATENCY_S, case
        assert case.detail is not None and "s of CPU time, over the 0.5 s limit" in case.detail, case.detail


async def test_cpu_time_of_child_processes_counts(sandbox: Sandbox) -> None:
    # Four children burn 0.3 s each: none is over a 1 s limit, the program is (1.2 s).
    code = BURN + (
        "import os\npids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n        burn(0.3)\n"
        "        os._exit(0)\n    pids.append(pid)\nfor pid in pids:\n    os.waitpid(pid, 0)\n"
        "burn(0.2)\nprint('done')\n"
    )
    limits = Limits(time_s=1.0)
    result = await run_program(sandbox, "python", code, limits=limits)
    assert result.run is not None
    if not overloaded(result.run, limits):
        assert result.status is Status.TIMEOUT, result.run
        assert 1.0 <= result.run.cpu_s < 1.0 + KILL_LATENCY_S, result.run


# (program, why): programs that use no CPU; each must end as timeout within time_s + 1 s.
IDLE = [
    ("import time\ntime.sleep(60)\n", "sleeps"),
    (
        "import signal, time\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\ntime.sleep(60)\n",
        "ignores signals and sleeps",
    ),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n", "stops itself"),
    ("import os\nos.read(os.pipe()[0], 1)\n", "blocks on a pipe forever"),
]


async def test_idle_programs_end_within_time_s_plus_one_second(sandbox: Sandbox) -> None:
    # The run's own time: the wait for a free sandbox (others are being replaced after timeouts) is not its.
    for code, why in IDLE:
        result = await run_program(sandbox, "python", code, limits=Limits(time_s=1))
        assert result.status is Status.TIMEOUT, (why, result.run)
        assert result.run is not None and result.run.time_s < 1 + 1, (why, result.run)
        assert result.run.detail is not None and "not spent waiting for a CPU" in result.run.detail


async def test_an_idle_assert_case_ends_within_time_s_plus_one_second(sandbox: Sandbox) -> None:
    # A sleep in a case is interrupted and the next case runs; a program that ignores the interruption is
    # killed, and the cases after it time out too, all within time_s + 1 s of the case's start.
    tests = AssertTests(test_list=("assert f(1) == 1", "assert f(2) == 2"))
    sleeper = "import time\ndef f(x):\n    if x == 1:\n        time.sleep(60)\n    return x\n"
    deaf = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n" + sleeper
    for code, statuses in ((sleeper, [Status.TIMEOUT, Status.PASSED]), (deaf, [Status.TIMEOUT, Status.TIMEOUT])):
        report = await run_tests(sandbox, "python", code, tests, limits=Limits(time_s=1))
        assert [c.status for c in report.cases] == statuses, [c.detail for c in report.cases]
        assert report.cases[0].time_s < 1 + 1, report.cases[0]
        assert report.cases[1].time_s < 0.5, report.cases[1]


# (language, program, why): programs that never stop writing. The sandbox drains their pipes; before it
# drained a full pipe at a time, the runner woken for every write took the sandbox's CPU turn about turn
# with the program, whose waits counted as waiting for a CPU, and a flood with time_s=2 ran 4 s.
FLOODS = [
    ("python", "while True:\n    print('y' * 4096)\n", "print loop"),
    ("python", "import sys\nb = b'x' * 65536\nwhile True:\n    sys.stdout.buffer.write(b)\n", "64 KiB writes"),
    ("python", "import sys\nwhile True:\n    sys.stderr.write('e' * 100)\n", "stderr"),
    (
        "python",
        "import sys\nwhile True:\n    sys.stdout.write('o' * 9000)\n    sys.stderr.write('e' * 9000)\n",
        "stdout and stderr",
    ),
    (
        "cpp",
        "#include <cstdio>\nint main() { static char b[65536] = {'x'}; for (;;) fwrite(b, 1, sizeof b, stdout); }",
        "C++",
    ),
]


async def test_an_output_flood_ends_within_time_s_plus_one_second(sandbox: Sandbox) -> None:
    # Within time_s + 1 s of time not spent waiting for a CPU (an idle host: of wall-clock time), and within
    # the ceiling whatever the load. A flood that the runner's reads held up used to count that as waiting
    # and ran twice its time; what it costs in wall-clock time on an idle host is benchmarks' to measure.
    limits = Limits(time_s=2, output_bytes=1024 * 1024)
    for language, code, why in FLOODS:
        start = time.monotonic()
        result = await run_program(sandbox, language, code, limits=limits)
        run_elapsed = time.monotonic() - start - (result.compile.time_s if result.compile else 0.0)
        run = result.run
        assert run is not None and (run.stdout_truncated or run.stderr_truncated), (why, run)
        assert run_elapsed < limits.wall_ceiling_s + 1, (why, run_elapsed)  # the caller's wait: the answer too
        if overloaded(run, limits):
            continue
        assert result.status is Status.TIMEOUT, (why, run)
        assert run.time_s - run.cpu_wait_s < 2 + 1, (why, run)


async def test_an_output_flood_in_a_harness_case_ends_within_time_s_plus_one_second(sandbox: Sandbox) -> None:
    code = "def f(x):\n    while True:\n        print('y' * 4096)\n"
    limits = Limits(time_s=2, output_bytes=1024 * 1024)
    for tests in (CallTests("f", (CallCase((1,), 1),)), AssertTests(test_list=("assert f(1) == 1",))):
        start = time.monotonic()
        report = await run_tests(sandbox, "python", code, tests, limits=limits)
        case = report.cases[0]
        assert time.monotonic() - start < limits.wall_ceiling_s + 1 + 1, report  # + loading program and harness
        if overloaded(case, limits):
            continue
        assert [c.status for c in report.cases] == [Status.TIMEOUT], report
        assert case.time_s - case.cpu_wait_s < 2 + 1, case


async def test_output_over_the_cap_then_exit_is_still_an_output_limit(sandbox: Sandbox) -> None:
    # Past the cap the pipe is read a whole pipe at a time: a program that writes 50 MB and exits must not
    # be held up long enough to time out.
    code = "import sys\nfor _ in range(50):\n    sys.stdout.write('z' * 1_000_000)\n"
    result = await run_program(sandbox, "python", code, limits=Limits(time_s=2, output_bytes=1024 * 1024))
    assert result.status is Status.OUTPUT_LIMIT, result.run
    assert result.run is not None and result.run.stdout == b"z" * (1024 * 1024) and result.run.exit_code == 0


async def test_each_case_reports_its_cpu_and_wall_time(sandbox: Sandbox) -> None:
    code = BURN + "def work(x):\n    burn(x)\n    return x\n"
    report = await run_tests(
        sandbox, "python", code, AssertTests(test_list=("assert work(0.05) == 0.05", "assert work(0.25) == 0.25"))
    )
    small, large = report.cases
    assert report.status is Status.PASSED
    assert 0.05 <= small.cpu_s < 0.15 and 0.25 <= large.cpu_s < 0.35, report.cases
    assert small.time_s >= small.cpu_s - 0.01 and large.time_s >= large.cpu_s - 0.01, report.cases
    assert small.memory_mb > 1
