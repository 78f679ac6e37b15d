"""The conformance suite: every backend must give these results (each test runs on both)."""

from __future__ import annotations

import asyncio
import time

import pytest

from sandbox import Limits, Sandbox, SandboxUnavailable, Status, run_program
from tests.sandbox.conftest import FORK_COUNTER, KILL_LATENCY_S, make_sandbox, overloaded, started, unavailable

CPP_SUM = """#include <bits/stdc++.h>
int main() { long long a, b; std::cin >> a >> b; std::cout << a + b << "\\n"; }
"""


async def test_stdout_stdin_and_measurements(sandbox: Sandbox) -> None:
    code = "import sys\ndata = sys.stdin.buffer.read()\nsys.stdout.buffer.write(data[::-1])\nprint(file=sys.stderr)"
    result = await run_program(sandbox, "python", code, stdin=b"\x00\xffabc")
    assert result.status is Status.OK
    assert result.run is not None
    assert result.run.stdout == b"cba\xff\x00"
    assert result.run.stderr == b"\n"
    assert result.run.exit_code == 0
    assert 0 < result.run.time_s < 2
    assert 1 < result.run.memory_mb < 100


async def test_exit_code_and_signal(sandbox: Sandbox) -> None:
    result = await run_program(sandbox, "python", "import sys\nprint('x')\nsys.exit(7)")
    assert (result.status, result.run.exit_code, result.run.stdout) == (Status.RUNTIME_ERROR, 7, b"x\n")  # type: ignore[union-attr]
    result = await run_program(sandbox, "python", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert result.status is Status.RUNTIME_ERROR
    assert (result.run.exit_code, result.run.signal) == (None, 11)  # type: ignore[union-attr]
    assert result.detail == "killed by SIGSEGV"


async def test_uncaught_exception_is_runtime_error_with_traceback(sandbox: Sandbox) -> None:
    result = await run_program(sandbox, "python", "def f():\n    raise ValueError('boom')\nf()\n")
    assert result.status is Status.RUNTIME_ERROR
    assert b"ValueError: boom" in result.run.stderr  # type: ignore[union-attr]


async def test_python_syntax_error_is_compile_error(sandbox: Sandbox) -> None:
    result = await run_program(sandbox, "python", "def inc(x):\n    return x +\n")
    assert result.status is Status.COMPILE_ERROR
    assert result.run is None
    assert result.compile is not None and b"SyntaxError" in result.compile.stderr
    assert b"line 2" in result.compile.stderr


async def test_runtime_syntax_error_is_not_compile_error(sandbox: Sandbox) -> None:
    result = await run_program(sandbox, "python", "eval('1 +')")
    assert result.status is Status.RUNTIME_ERROR


async def test_cpp_compiles_and_runs(sandbox: Sandbox) -> None:
    result = await run_program(sandbox, "cpp", CPP_SUM, stdin=b"1000000000000 2345\n")
    assert result.status is Status.OK, result.compile
    assert result.run is not None and result.run.stdout == b"1000000002345\n"
    assert result.compile is not None and result.compile.status is Status.OK


async def test_cpp_compile_error_reports_the_compiler(sandbox: Sandbox) -> None:
    result = await run_program(sandbox, "cpp", "int main() { return x; }")
    assert result.status is Status.COMPILE_ERROR
    assert result.compile is not None and b"was not declared in this scope" in result.compile.stderr


async def test_cpp_runtime_error(sandbox: Sandbox) -> None:
    result = await run_program(sandbox, "cpp", "#include <cstdlib>\nint main() { std::abort(); }")
    assert result.status is Status.RUNTIME_ERROR
    assert result.run is not None and result.run.signal == 6


async def test_timeout_kills_at_the_limit(sandbox: Sandbox) -> None:
    # time_s is CPU time: the loop dies once it has used 1 s of CPU. On a loaded host that takes longer
    # than 1 s of wall-clock time, by the time it waited for a CPU (cpu_wait_s).
    start = time.monotonic()
    limits = Limits(time_s=1)
    result = await run_program(sandbox, "python", "while True:\n    pass\n", limits=limits)
    elapsed = time.monotonic() - start
    assert result.run is not None
    if overloaded(result.run, limits):  # under 1/5 of a core for 5 s: no verdict, never a wrong timeout
        return
    assert result.status is Status.TIMEOUT
    assert result.run is not None and 1.0 <= result.run.cpu_s < 1.0 + KILL_LATENCY_S, result.run
    assert result.run.time_s - result.run.cpu_wait_s < 1.0 + KILL_LATENCY_S, result.run
    assert result.run.detail == f"used {result.run.cpu_s:.2f} s of CPU time, over the 1 s limit; killed"
    assert elapsed - result.run.cpu_wait_s < 1 + 1.0


async def test_output_within_limit_is_kept_whole(sandbox: Sandbox) -> None:
    code = "import sys\nsys.stdout.write('ab' * 500_000)"
    result = await run_program(sandbox, "python", code, limits=Limits(output_bytes=1_000_000))
    assert result.status is Status.OK
    assert result.run is not None and result.run.stdout == b"ab" * 500_000 and not result.run.stdout_truncated


async def test_output_over_limit_is_cut_and_flagged(sandbox: Sandbox) -> None:
    code = "import sys\nsys.stdout.write('ab' * 500_001)"
    result = await run_program(sandbox, "python", code, limits=Limits(output_bytes=1_000_000))
    assert result.status is Status.OUTPUT_LIMIT
    assert result.run is not None and result.run.stdout == (b"ab" * 500_000) and result.run.stdout_truncated


async def test_stderr_keeps_the_end(sandbox: Sandbox) -> None:
    code = "import sys\nsys.stderr.write('x' * 5000 + 'END')\nsys.exit(1)"
    result = await run_program(sandbox, "python", code, limits=Limits(output_bytes=1000))
    assert result.run is not None and result.run.stderr.endswith(b"END") and len(result.run.stderr) == 1000
    assert result.run.stderr_truncated


async def test_memory_limit_on_allocation(sandbox: Sandbox) -> None:
    code = "x = bytearray(300 * 1024 * 1024)\nprint(len(x))"
    result = await run_program(sandbox, "python", code, limits=Limits(memory_mb=256))
    assert result.status is Status.MEMORY_LIMIT
    result = await run_program(sandbox, "python", code, limits=Limits(memory_mb=512))
    assert result.status is Status.OK
    assert result.run is not None and result.run.memory_mb >= 300  # the peak is measured, not guessed


async def test_cpp_bad_alloc_is_memory_limit(sandbox: Sandbox) -> None:
    code = "#include <vector>\nint main() { std::vector<char> v(3000000000ULL); return v[7]; }"
    result = await run_program(sandbox, "cpp", code, limits=Limits(memory_mb=512))
    assert result.status is Status.MEMORY_LIMIT


@pytest.mark.parametrize("max_processes", [5, 20])
async def test_process_limit_is_exact(sandbox: Sandbox, max_processes: int) -> None:
    # The program itself is one of its max_processes: it can fork max_processes - 1 children.
    result = await run_program(sandbox, "python", FORK_COUNTER, limits=Limits(max_processes=max_processes))
    assert result.run is not None and result.run.stdout == f"{max_processes - 1}\n".encode()
    assert not result.run.reusable  # its sleeping children were left behind (and killed)


async def test_deep_recursion_with_a_raised_stack(sandbox: Sandbox) -> None:
    # lru_cache recursion goes through C frames, so it needs the stack that stack_mb grants (code-019).
    code = (
        "import sys\nfrom functools import lru_cache\nsys.setrecursionlimit(10**6)\n"
        "@lru_cache(maxsize=None)\ndef d(n):\n    return 0 if n == 0 else 1 + d(n - 1)\nprint(d(100000))"
    )
    result = await run_program(sandbox, "python", code, limits=Limits(stack_mb=512, memory_mb=1024, time_s=10))
    assert result.status is Status.OK, result.run
    assert result.run is not None and result.run.stdout == b"100000\n"
    small = await run_program(sandbox, "python", code, limits=Limits(stack_mb=8, memory_mb=1024, time_s=10))
    assert small.status is Status.RUNTIME_ERROR and small.run is not None and small.run.signal == 11


async def test_each_job_gets_a_fresh_work_dir(sandbox: Sandbox) -> None:
    code = "import os\nprint(sorted(os.listdir('.')))\nopen('mine.txt', 'w').write('x')\nos.mkdir('d')"
    for _ in range(3):  # more jobs than the pool has sandboxes, so some reuse one
        result = await run_program(sandbox, "python", code)
        assert result.status is Status.OK
        assert result.run is not None and result.run.stdout == b"['main.py']\n"


async def test_tmpdir_is_the_work_dir(sandbox: Sandbox) -> None:
    code = (
        "import os, tempfile\nwith tempfile.NamedTemporaryFile() as f:\n    print(os.path.dirname(f.name), os.getcwd())"
    )
    result = await run_program(sandbox, "python", code)
    assert result.run is not None and result.run.stdout == b"/work /work\n"


async def test_multiprocessing_works(sandbox: Sandbox) -> None:
    code = (
        "import multiprocessing as mp\ndef sq(x):\n    return x * x\nif __name__ == '__main__':\n"
        "    with mp.Pool(2) as pool:\n        print(pool.map(sq, range(5)))"
    )
    result = await run_program(sandbox, "python", code)
    assert result.run is not None and result.run.stdout == b"[0, 1, 4, 9, 16]\n", result.run.stderr


async def test_large_unread_stdin_is_no_sandbox_error(sandbox: Sandbox) -> None:
    # code-021: 400 KB of stdin, far above a pipe buffer, that the program never reads.
    result = await run_program(sandbox, "python", "raise SystemExit(3)", stdin=b"1\n" * 200_000)
    assert result.status is Status.RUNTIME_ERROR
    assert result.run is not None and result.run.exit_code == 3


async def test_large_stdin_is_read_whole(sandbox: Sandbox) -> None:
    code = "import sys\nprint(len(sys.stdin.buffer.read()))"
    result = await run_program(sandbox, "python", code, stdin=b"7" * 3_000_000)
    assert result.run is not None and result.run.stdout == b"3000000\n"


async def test_concurrent_jobs_time_only_their_own_run(sandbox: Sandbox) -> None:
    # code-028: a burst far larger than the pool; the limit counts the run, not the queue.
    results = await asyncio.gather(
        *(run_program(sandbox, "python", "print(sum(range(10)))", limits=Limits(time_s=1)) for _ in range(40))
    )
    assert [r.status for r in results] == [Status.OK] * 40
    assert all(r.run is not None and r.run.stdout == b"45\n" for r in results)


@pytest.mark.parametrize("kind", ["local", "docker"])
async def test_sandbox_hit_by_a_limit_is_cleaned_not_replaced(kind: str) -> None:
    sandbox = await started(kind, pool_size=1)
    try:
        assert sandbox.replaced == 0  # type: ignore[attr-defined]
        await run_program(sandbox, "python", "print(1)")
        assert (sandbox.cleaned, sandbox.replaced) == (0, 0)  # type: ignore[attr-defined]
        await run_program(sandbox, "python", "while True: pass", limits=Limits(time_s=0.5))
        assert (sandbox.cleaned, sandbox.replaced) == (1, 0)  # type: ignore[attr-defined]
        result = await run_program(sandbox, "python", "print(2)")  # served by the same sandbox, cleaned
        assert result.run is not None and result.run.stdout == b"2\n"
        assert sandbox.alive == 1  # type: ignore[attr-defined]
    finally:
        await sandbox.close()


@pytest.mark.parametrize("kind", ["local", "docker"])
async def test_cancelled_job_does_not_leak_its_sandbox(kind: str) -> None:
    sandbox = await started(kind, pool_size=1)
    try:
        task = asyncio.ensure_future(run_program(sandbox, "python", "import time\ntime.sleep(30)"))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        result = await asyncio.wait_for(run_program(sandbox, "python", "print(3)"), 30)
        assert result.run is not None and result.run.stdout == b"3\n"
    finally:
        await sandbox.close()


async def test_closed_sandbox_gives_sandbox_error() -> None:
    sandbox = make_sandbox("local", 1)
    result = await run_program(sandbox, "python", "print(1)")  # never started
    assert result.status is Status.SANDBOX_ERROR


async def test_pool_recovers_when_sandboxes_can_start_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restarts that fail (an engine down) leave the pool empty: jobs get sandbox_error, never a hang, and
    the pool fills again once sandboxes start."""
    import sandbox.base as base
    from sandbox.local import LocalSandbox

    monkeypatch.setattr(base, "_RESPAWN_ATTEMPTS", 1)
    monkeypatch.setattr(base, "_REFILL_INTERVAL_S", 0.0)

    class Flaky(LocalSandbox):
        broken = False

        async def _spawn(self, label: str) -> base.Transport:
            if self.broken:
                raise SandboxUnavailable("engine down")
            return await super()._spawn(label)

    sandbox = Flaky(1)
    try:
        await sandbox.start()
    except SandboxUnavailable as exc:
        unavailable(str(exc))
    try:
        sandbox.broken = True
        await next(iter(sandbox._slots)).transport.kill()  # its runner dies: replaced, and the restart fails
        for _ in range(2):  # the dead sandbox, then none
            result = await asyncio.wait_for(run_program(sandbox, "python", "print(1)"), 30)
            assert result.status is Status.SANDBOX_ERROR
        sandbox.broken = False
        result = await asyncio.wait_for(run_program(sandbox, "python", "print(1)"), 30)
        assert result.status is Status.OK and sandbox.alive == 1
    finally:
        await sandbox.close()
