"""A Python job forked from the warm launcher (``@python``) behaves as ``python3 main.py`` would.

Each program runs both ways in the same sandbox; exit code, stdout and stderr must be identical.
"""

from __future__ import annotations

import pytest

from sandbox import Limits, Sandbox, Status

# (program, stdin, why)
PROGRAMS = [
    ("import sys\nprint(sys.argv, __name__, __file__, sys.path[0], sys.orig_argv)", b"", "names and paths"),
    ("import sys\nsys.exit('bye')", b"", "exit with a message: stderr and status 1"),
    ("import sys\nsys.exit(3)", b"", "exit status"),
    ("import sys\nsys.exit(256 + 7)", b"", "exit status modulo 256"),
    ("raise SystemExit", b"", "bare SystemExit"),
    ("def f():\n    raise ValueError('x')\nf()", b"", "traceback without the launcher's frames"),
    ("x = (", b"", "a syntax error at run time of the script"),
    ("import atexit\natexit.register(print, 'at exit')\nprint('body')", b"", "atexit handlers"),
    (
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('late', flush=True))).start()\nprint('early')",
        b"",
        "non-daemon threads are joined",
    ),
    ("import sys\nsys.stdout.write('no newline')", b"", "stdout flushed at exit"),
    ("import sys\nprint(input(), sys.stdin.read())", b"first\nrest\n", "stdin"),
    (
        "import sys\nprint(sys.stdout.isatty(), sys.stdout.encoding, sys.stdout.errors, sys.stdout.line_buffering,"
        " sys.stdin.errors, sys.stderr.errors, sys.stderr.line_buffering)",
        b"",
        "the standard streams",
    ),
    ("import sys\nprint(sorted(sys.modules))", b"", "only a fresh interpreter's modules"),
    ("import os\nprint(os.environ.get('HOME'), os.getcwd(), os.environ.get('TMPDIR'))", b"", "environment"),
    ("import sys\nprint(sys.flags, sys.getrecursionlimit(), sys.dont_write_bytecode)", b"", "flags"),
    (
        "import signal\nprint(signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGPIPE),"
        " signal.getsignal(signal.SIGALRM))",
        b"",
        "signal handlers",
    ),
    ("print(len(open('/proc/self/environ', 'rb').read()) > 0)", b"", "an ordinary (dumpable) process"),
    ("import __main__\nprint(sorted(k for k in vars(__main__) if k.startswith('__')))", b"", "__main__'s names"),
    ("import __main__, pickle\nclass A: pass\nprint(type(pickle.loads(pickle.dumps(A()))).__name__)", b"", "pickle"),
    ("import inspect\ndef f():\n    return 1\nprint(inspect.getsource(f))", b"", "inspect.getsource"),
    ("import ctypes\nprint(ctypes.sizeof(ctypes.c_int))", b"", "re-importing what the launcher used"),
    ("import random\nprint(random.random() != random.random())", b"", "random"),
]


@pytest.mark.parametrize(("program", "stdin", "why"), PROGRAMS, ids=[p[-1] for p in PROGRAMS])
async def test_warm_python_matches_a_fresh_interpreter(sandbox: Sandbox, program: str, stdin: bytes, why: str) -> None:
    async with sandbox.job({"main.py": program.encode()}) as job:
        warm = await job.exec(["@python", "main.py"], stdin=stdin, limits=Limits())
        fresh = await job.exec(["python3", "main.py"], stdin=stdin, limits=Limits())
    assert (warm.exit_code, warm.stdout, warm.stderr) == (fresh.exit_code, fresh.stdout, fresh.stderr), why
    assert warm.status is fresh.status


async def test_warm_python_is_faster(sandbox: Sandbox) -> None:
    async with sandbox.job({"main.py": b"print(1)"}) as job:
        warm = [await job.exec(["@python", "main.py"], limits=Limits()) for _ in range(5)]
        fresh = [await job.exec(["python3", "main.py"], limits=Limits()) for _ in range(5)]
    assert min(r.time_s for r in warm) < min(r.time_s for r in fresh)


async def test_a_job_that_kills_the_launcher_gets_its_verdict_and_the_next_one_works(sandbox: Sandbox) -> None:
    # SIGUSR1 (its default action ends the launcher): SIGKILL and SIGTERM are refused by the kill guard, so that a
    # launcher dying of those means an outside kill (test_outside_kill.py).
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGUSR1)\nprint('still here')\n"
    for _ in range(2):
        async with sandbox.job({"main.py": code.encode()}) as job:
            result = await job.exec(["@python", "main.py"], limits=Limits())
            # Always a failure: the job's own exit status may have died with the launcher.
            assert (result.status, result.stdout) == (Status.RUNTIME_ERROR, b"still here\n")
            assert result.detail == "killed or stopped the sandbox's process launcher (its parent)"
            assert not result.reusable  # it attacked the sandbox: that sandbox is replaced
    async with sandbox.job({"main.py": b"print(5)"}) as job:
        result = await job.exec(["@python", "main.py"], limits=Limits())
        assert result.stdout == b"5\n"
