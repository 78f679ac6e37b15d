"""The Python test harness: runs INSIDE the sandbox as the job's main program (stdlib only).

``python3 harness.py`` reads from stdin a nonce line and then the spec (``marshal``: mode, cases, time
limit), runs the candidate's ``solution.py`` once, then each test case (HumanEval ``check``, MBPP asserts,
or calls of ``fn_name``), and reports every case on the result channel (fd 3) as soon as it ends: one
JSON line that carries the nonce. The host counts only nonce-bearing lines, so a case passes only when
this harness saw it pass: a program that exits early (``sys.exit(0)``, ``os._exit(0)``, ``quit()``),
crashes, or prints a fake "passed" leaves its cases unconfirmed, and they fail.

The nonce and the spec arrive through a pipe that is drained and replaced by ``/dev/null`` before any
candidate code runs, so the candidate cannot read the expected outputs or the nonce from anywhere. It
runs in this same interpreter, though, so a program that digs through the harness's memory (``gc``,
frames) could still forge a line: the harness defeats early exits, crashes, swallowed exceptions and
always-equal objects, not a program written to attack it. The sandbox contains that program either way.

Only modules that the interpreter has loaded at start-up or that are built in are imported (no ``json``,
``signal``, ``traceback``: they cost ~10 ms per run, as much as the interpreter start itself).
"""

import _signal
import builtins
import marshal
import os
import sys
import time

_CHANNEL_FD = 3
_BIG_INT_BITS = 12_000  # above ~3600 digits, int -> str hits CPython's 4300-digit limit; send hex instead
_TIMER_REPEAT_S = 0.1
_ESCAPES = {**{c: f"\\u{c:04x}" for c in range(0x20)}, **{c: f"\\u{c:04x}" for c in range(0xD800, 0xE000)}}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\t"): "\\t"})


class _CaseTimeout(BaseException):
    """Raised by the timer in the running case (a BaseException, so ``except Exception`` misses it)."""


class _NotJSON(Exception):
    pass


class _GraderFault(Exception):
    """The tests, not the program, are broken (e.g. no ``check`` function for an ``entry_point``)."""


def _json(value, depth=0):
    """JSON text of a plain value. Tuples become lists; subclasses of int/str/list... lose their
    overrides, and any other object (the "always equal" hack) has no JSON form, so it never matches."""
    if depth > 200:
        raise _NotJSON("nested too deeply")
    if value is None:
        return "null"
    if type(value) is bool:
        return "true" if value else "false"
    if isinstance(value, int):
        value = int.__int__(value)
        if value.bit_length() > _BIG_INT_BITS:
            return '{"__bigint__":"' + hex(value) + '"}'
        return int.__repr__(value)
    if isinstance(value, float):
        value = float.__float__(value)
        if value != value or value in (float("inf"), float("-inf")):
            return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[float.__repr__(value)]
        return float.__repr__(value)
    if isinstance(value, str):
        return '"' + str.translate(str.__str__(value), _ESCAPES) + '"'
    if isinstance(value, (list, tuple)):
        items = list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value)
        return "[" + ",".join(_json(v, depth + 1) for v in items) + "]"
    if isinstance(value, dict):
        parts = []
        for k, v in dict.items(value):
            if not isinstance(k, str):
                raise _NotJSON(f"a dict with a {type(k).__name__} key")
            parts.append(_json(k) + ":" + _json(v, depth + 1))
        return "{" + ",".join(parts) + "}"
    raise _NotJSON(f"a {type(value).__name__}")


def _describe(exc):
    """``Type: message (solution.py, line N)``, without the traceback module."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "solution.py":
            where = f" (solution.py, line {tb.tb_lineno})"
        tb = tb.tb_next
    try:
        message = str(exc)
    except BaseException:
        message = "<unprintable>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return (text[:2000] + where) if len(text) > 2000 else text + where


def main():
    # Everything the harness needs is bound here, before the candidate can patch modules.
    write, perf, setitimer, itimer = os.write, time.perf_counter, _signal.setitimer, _signal.ITIMER_REAL
    data = sys.stdin.buffer.read()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    nonce, _, blob = data.partition(b"\n")
    nonce = nonce.decode()
    spec = marshal.loads(blob)
    del data, blob

    def emit(raw_value=None, **record):
        """Write one record; ``raw_value`` is JSON text already made from the program's return value."""
        record["nonce"] = nonce
        line = _json(record)  # harness-made fields only: str, int, float, None
        if raw_value is not None:
            line = line[:-1] + ',"value":' + raw_value + "}"
        write(_CHANNEL_FD, (line + "\n").encode("utf-8", "replace"))

    def on_timer(signum, frame):
        raise _CaseTimeout()

    _signal.signal(_signal.SIGALRM, on_timer)
    time_s = float(spec["time_s"])

    def guarded(fn):
        """Run fn() under the case's time limit; return (status, detail, value, elapsed_s)."""
        start = perf()
        setitimer(itimer, time_s, _TIMER_REPEAT_S)  # re-fires, in case the first is swallowed
        try:
            value = fn()
            status, detail = "ok", None
        except _CaseTimeout:
            value, status, detail = None, "timeout", f"still running after {time_s:g} s"
        except _GraderFault as exc:
            value, status, detail = None, "grader_error", str(exc)
        except AssertionError as exc:
            value, status, detail = None, "wrong_answer", _describe(exc)
        except MemoryError as exc:
            value, status, detail = None, "memory_limit", _describe(exc)
        except SystemExit as exc:
            value, status, detail = None, "runtime_error", f"the program called exit({exc.code!r}) during the test"
        except BaseException as exc:
            value, status, detail = None, "runtime_error", _describe(exc)
        finally:
            setitimer(itimer, 0)
        return status, detail, value, perf() - start

    mode = spec["mode"]
    with open("solution.py", "rb") as f:
        source = f.read()
    try:
        code = compile(source, "solution.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        emit(kind="compile_error", detail=_describe(exc))
        return

    # The tests are compiled before the candidate runs: a broken test is the grader's fault.
    tests = []
    try:
        if mode == "assert":
            setup = compile(spec["setup_code"], "setup.py", "exec", dont_inherit=True)
            for i, text in enumerate(spec["tests"]):
                tests.append(compile(text, f"test_{i}.py", "exec", dont_inherit=True))
    except (SyntaxError, ValueError) as exc:
        emit(kind="grader_error", detail=f"the test code does not compile: {_describe(exc)}")
        return

    namespace = {"__name__": "solution", "__file__": "solution.py", "__builtins__": builtins}

    def load():
        try:
            exec(code, namespace)
        except SystemExit as exc:
            # sys.exit(0) at the end of a module is a clean exit: its definitions stand and are tested.
            if exc.code not in (None, 0):
                raise

    status, detail, _, _ = guarded(load)
    if status != "ok":
        emit(kind="load_error", status=status, detail=f"while loading the program: {detail}")
        return

    early_stop = bool(spec["early_stop"])
    if mode == "assert":
        scope = dict(namespace)  # test definitions (e.g. `check`) must not replace the candidate's names
        status, detail, _, _ = guarded(lambda: exec(setup, scope))
        if status != "ok":
            emit(kind="load_error", status=status, detail=f"while running the test setup: {detail}")
            return
        entry_point = spec["entry_point"]
        for i, test in enumerate(tests):
            if entry_point:

                def run(test=test):
                    exec(test, scope)
                    check = scope.get("check")
                    if not callable(check):
                        raise _GraderFault("the test code defines no check(candidate) function")
                    if entry_point not in namespace:
                        raise NameError(f"the program does not define {entry_point!r}")
                    check(namespace[entry_point])
            else:

                def run(test=test):
                    exec(test, scope)

            status, detail, _, elapsed = guarded(run)
            status = "passed" if status == "ok" else status
            if status == "wrong_answer" and not entry_point:
                detail = f"{detail}: {spec['tests'][i].strip()[:300]}"
            emit(kind="case", index=i, status=status, detail=detail, time_s=elapsed)
            if early_stop and status != "passed":
                break
    else:  # call
        fn_name = spec["fn_name"]
        target = namespace.get(fn_name)
        solution_class = namespace.get("Solution")
        if target is None and isinstance(solution_class, type):
            # LeetCode-style problems (TACO, LiveCodeBench) put the function on a Solution class.
            status, detail, instance, _ = guarded(solution_class)
            target = getattr(instance, fn_name, None) if status == "ok" else None
        if not callable(target):
            emit(
                kind="load_error", status="runtime_error", detail=f"the program does not define a function {fn_name!r}"
            )
            return
        function = target
        for i, args in enumerate(spec["inputs"]):
            status, detail, value, elapsed = guarded(lambda args=args: function(*args))
            if status == "ok":
                try:
                    raw = _json(value)
                except Exception as exc:  # _NotJSON, RecursionError, or an object lying about its class
                    status, detail = "wrong_answer", f"returned {exc}, which has no JSON form"
                else:
                    emit(raw, kind="case", index=i, status="returned", detail=None, time_s=elapsed)
                    continue
            emit(kind="case", index=i, status=status, detail=detail, time_s=elapsed)
            if early_stop:
                break
    emit(kind="done")


if __name__ == "__main__":
    main()
