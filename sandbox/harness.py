"""Running programs against tests: the formats the field uses, their comparators, and the verdicts.

Three test formats:

* :class:`StdioTests` (APPS, CodeContests, LiveCodeBench, Codeforces): each case's input goes to stdin
  and stdout is compared with the expected output by one of three comparators: ``exact`` (bytes);
  ``whitespace`` (CRLF pairs become LF, trailing spaces and tabs of each line and trailing empty lines are
  dropped, and the line count must match; a lone CR is kept); ``float``, the default (as ``whitespace``,
  then token by token: integer tokens must be equal, other numeric tokens may differ by ``abs_tol`` or
  ``rel_tol`` of the expected value, 1e-6 each by default, anything else must be equal). ``float`` is what
  competitive-programming judges accept for floating-point output, and what LiveCodeBench's exact
  ``Decimal`` comparison was found to reject wrongly (LiveCodeBench issues #129 and #133).
* :class:`AssertTests`: HumanEval's ``check(candidate)`` with ``entry_point``, or MBPP's ``test_list``
  of assert statements (one case each), with optional ``setup_code``.
* :class:`CallTests` (APPS/TACO call-based, LiveCodeBench functional): call ``fn_name`` with each case's
  JSON arguments and compare the JSON of the return value with the expected output; a tuple equals a
  list, ``True`` never equals ``1``, and floats match within ``rel_tol``/``abs_tol``.

Assert and call tests run through the in-sandbox harness (``_pyharness.py``): the candidate's program
runs in a worker process, and the test code runs in a separate checker process that calls into it and
gets back plain values only, so every comparison is made on exact builtin types, and the program can
neither see the tests nor forge a verdict. The checker confirms each case on its own channel; a case it
did not confirm fails. An empty test list is a grader error (reward ``None``), never a pass.
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import math
import re
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from sandbox.base import Sandbox, in_sandbox_source
from sandbox.languages import PYTHON_TRUSTED, Language, get_language
from sandbox.types import IDLE_GRACE_S, CaseResult, ExecResult, Limits, RunResult, Status, TestReport, utf8

Comparator = Literal["exact", "whitespace", "float"]
COMPARATORS: tuple[str, ...] = ("exact", "whitespace", "float")

_DEFAULT_TAIL_BYTES = 1024
_HARNESS_SLACK_S = 0.5
"""Per case, on top of its own limit, for the harness's job as a whole: the checker interrupts a case and
kills a program that will not stop (0.3 s); the job is only ended from outside when the harness fails."""
_CASE_STATUSES = (
    Status.PASSED,
    Status.WRONG_ANSWER,
    Status.RUNTIME_ERROR,
    Status.TIMEOUT,
    Status.MEMORY_LIMIT,
    Status.OUTPUT_LIMIT,
    # The checker's word (it alone has the nonce) that the host kept the program from a CPU past the ceiling, or
    # that the program (the harness's worker) was killed from outside the sandbox (see _pyharness.py).
    Status.SANDBOX_ERROR,
)


@dataclass(frozen=True, slots=True)
class StdioCase:
    input: bytes
    output: bytes


@dataclass(frozen=True, slots=True)
class StdioTests:
    """stdin/stdout cases. Tolerances apply to the ``float`` comparator (the default) only."""

    cases: tuple[StdioCase, ...]
    comparator: Comparator = "float"
    abs_tol: float = 1e-6
    rel_tol: float = 1e-6


@dataclass(frozen=True, slots=True)
class AssertTests:
    """Assert-based tests: ``test`` (code that defines ``check``; with ``entry_point`` it is called with
    the candidate function) as one case, or ``test_list`` with one assert statement per case."""

    test: str | None = None
    entry_point: str | None = None
    test_list: tuple[str, ...] = ()
    setup_code: str = ""

    @property
    def cases(self) -> tuple[str, ...]:
        return (self.test,) if self.test is not None and self.test.strip() else self.test_list


@dataclass(frozen=True, slots=True)
class CallCase:
    input: tuple[Any, ...]
    output: Any


@dataclass(frozen=True, slots=True)
class CallTests:
    """Call-based cases: ``fn_name(*input) == output`` in JSON terms."""

    fn_name: str
    cases: tuple[CallCase, ...]
    abs_tol: float = 0.0
    rel_tol: float = 1e-9


TestSpec = StdioTests | AssertTests | CallTests


# ---------------------------------------------------------------------------------------- comparators

_NUMBER = re.compile(rb"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(rb"([+-]?)0*(\d+)")


def _lines(data: bytes) -> list[bytes]:
    lines = [line.rstrip(b" \t") for line in data.replace(b"\r\n", b"\n").split(b"\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _show(data: bytes, limit: int = 80) -> str:
    text = data.decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _int_key(token: bytes) -> bytes | None:
    """An integer token without its leading zeros and '+' (compared as text: no 4300-digit limit)."""
    m = _INTEGER.fullmatch(token)
    if m is None:
        return None
    sign = b"" if m.group(1) in (b"", b"+") or m.group(2) == b"0" else b"-"
    return sign + m.group(2)


def _tokens_match(got: bytes, want: bytes, abs_tol: float, rel_tol: float) -> bool:
    if got == want:
        return True
    got_int, want_int = _int_key(got), _int_key(want)
    if got_int is not None and want_int is not None:
        return got_int == want_int
    if not (_NUMBER.fullmatch(got) and _NUMBER.fullmatch(want)):
        return False
    a, b = float(got), float(want)  # a huge literal becomes inf, never an exception
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= max(abs_tol, rel_tol * abs(b))


def compare_output(
    got: bytes, want: bytes, comparator: Comparator = "float", *, abs_tol: float = 1e-6, rel_tol: float = 1e-6
) -> str | None:
    """Compare a program's stdout with the expected output.

    Returns:
        ``None`` when they match, else the first difference in words.
    """
    if comparator == "exact":
        if got == want:
            return None
        at = next((i for i, (x, y) in enumerate(zip(got, want, strict=False)) if x != y), min(len(got), len(want)))
        return f"output differs at byte {at}: expected {_show(want[at : at + 40])}, got {_show(got[at : at + 40])}"
    got_lines, want_lines = _lines(got), _lines(want)
    if len(got_lines) != len(want_lines):
        return f"expected {len(want_lines)} lines, got {len(got_lines)}"
    for number, (g, w) in enumerate(zip(got_lines, want_lines, strict=True), start=1):
        if g == w:
            continue
        if comparator == "whitespace":
            return f"line {number}: expected {_show(w)}, got {_show(g)}"
        g_tokens, w_tokens = g.split(), w.split()
        if len(g_tokens) != len(w_tokens):
            return f"line {number}: expected {len(w_tokens)} tokens, got {len(g_tokens)}"
        for gt, wt in zip(g_tokens, w_tokens, strict=True):
            if not _tokens_match(gt, wt, abs_tol, rel_tol):
                return f"line {number}: expected {_show(wt)}, got {_show(gt)}"
    return None


def json_equal(got: Any, want: Any, *, abs_tol: float = 0.0, rel_tol: float = 1e-9) -> bool:
    """JSON-value equality for call-based tests: a tuple equals a list, a bool never equals a number,
    an int equals an int exactly, and any float comparison allows ``rel_tol``/``abs_tol``."""
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(got, int | float) and isinstance(want, int | float):
        if isinstance(got, int) and isinstance(want, int):
            return got == want
        try:
            a, b = float(got), float(want)
        except OverflowError:
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(got, str) or isinstance(want, str):
        return type(got) is type(want) and got == want
    if want is None or got is None:
        return got is want
    if isinstance(got, list | tuple) and isinstance(want, list | tuple):
        return len(got) == len(want) and all(
            json_equal(g, w, abs_tol=abs_tol, rel_tol=rel_tol) for g, w in zip(got, want, strict=True)
        )
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(
            json_equal(got[k], want[k], abs_tol=abs_tol, rel_tol=rel_tol) for k in want
        )
    return False


def _short(value: Any, limit: int = 120) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):  # ValueError: an int past the 4300-digit str limit
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def _from_channel(obj: dict[str, Any]) -> Any:
    if obj.keys() == {"__bigint__"}:
        return int(obj["__bigint__"], 16)  # base 16 has no digit limit
    return obj


# ---------------------------------------------------------------------------------------- running


def _tail(data: bytes, n: int) -> str:
    return data[-n:].decode("utf-8", "replace") if n > 0 else ""


def _compile_failed(compiled: ExecResult) -> Status:
    return Status.SANDBOX_ERROR if compiled.status is Status.SANDBOX_ERROR else Status.COMPILE_ERROR


def _compile_detail(compiled: ExecResult, tail_bytes: int) -> str:
    return _tail(compiled.stderr, max(tail_bytes, 256)).strip() or compiled.detail or "compilation failed"


def _report(cases: list[CaseResult], compiled: ExecResult | None = None) -> TestReport:
    passed = sum(c.status is Status.PASSED for c in cases)
    failing = [c for c in cases if c.status is not Status.PASSED]
    if any(c.status is Status.SANDBOX_ERROR for c in cases):
        detail = next(c.detail for c in cases if c.status is Status.SANDBOX_ERROR)
        return TestReport(Status.SANDBOX_ERROR, passed, len(cases), tuple(cases), compiled, detail)
    status = failing[0].status if failing else Status.PASSED
    return TestReport(status, passed, len(cases), tuple(cases), compiled)


def _grader_error(detail: str, total: int = 0) -> TestReport:
    return TestReport(Status.GRADER_ERROR, 0, total, (), None, detail)


async def run_program(
    sandbox: Sandbox, language: str | Language, code: str, *, stdin: bytes = b"", limits: Limits | None = None
) -> RunResult:
    """Compile (if the language compiles) and run ``code`` once with ``stdin``.

    Raises:
        ValueError: unknown language.
    """
    lang = language if isinstance(language, Language) else get_language(language)
    limits = limits or Limits()
    async with sandbox.job({lang.source_file: utf8(code)}) as job:
        compiled = None
        if lang.compile is not None:
            compiled = await job.exec(lang.compile, limits=limits.for_compile())
            if compiled.status is not Status.OK:
                return RunResult(_compile_failed(compiled), None, compiled)
        run = await job.exec(lang.run, stdin=stdin, limits=limits)
        return RunResult(run.status, run, compiled)


async def run_tests(
    sandbox: Sandbox,
    language: str | Language,
    code: str,
    tests: TestSpec,
    *,
    limits: Limits | None = None,
    early_stop: bool = False,
    tail_bytes: int = _DEFAULT_TAIL_BYTES,
) -> TestReport:
    """Run ``code`` against ``tests`` and return one verdict per case.

    ``limits.time_s`` applies to each case. With ``early_stop`` the cases after the first failure are
    ``skipped``. ``tail_bytes`` bounds the stdout/stderr kept per case.

    Raises:
        ValueError: unknown language.
    """
    lang = language if isinstance(language, Language) else get_language(language)
    limits = limits or Limits()
    if not tests.cases:
        return _grader_error("the test list is empty: nothing would be checked")
    if isinstance(tests, StdioTests):
        return await _run_stdio(sandbox, lang, code, tests, limits, early_stop, tail_bytes)
    if not lang.harness:
        kind = "assert" if isinstance(tests, AssertTests) else "call"
        return _grader_error(f"{kind} tests need a language with a test harness (python), not {lang.name}")
    return await _run_harness(sandbox, code, tests, limits, early_stop, tail_bytes)


async def _run_stdio(
    sandbox: Sandbox,
    lang: Language,
    code: str,
    tests: StdioTests,
    limits: Limits,
    early_stop: bool,
    tail_bytes: int,
) -> TestReport:
    cases: list[CaseResult] = []
    detail: str | None
    async with sandbox.job({lang.source_file: utf8(code)}) as job:
        compiled = None
        if lang.compile is not None:
            compiled = await job.exec(lang.compile, limits=limits.for_compile())
            if compiled.status is not Status.OK:
                status, detail = _compile_failed(compiled), _compile_detail(compiled, tail_bytes)
                cases = [CaseResult(i, status, detail=detail) for i in range(len(tests.cases))]
                return _report(cases, compiled)
        stopped = False
        for i, case in enumerate(tests.cases):
            if stopped:
                cases.append(CaseResult(i, Status.SKIPPED))
                continue
            run = await job.exec(lang.run, stdin=case.input, limits=limits)
            if run.status is Status.OK:
                detail = compare_output(
                    run.stdout, case.output, tests.comparator, abs_tol=tests.abs_tol, rel_tol=tests.rel_tol
                )
                status = Status.PASSED if detail is None else Status.WRONG_ANSWER
            else:
                status, detail = run.status, run.detail
            cases.append(
                CaseResult(
                    i,
                    status,
                    time_s=run.time_s,
                    cpu_s=run.cpu_s,
                    cpu_wait_s=run.cpu_wait_s,
                    memory_mb=run.memory_mb,
                    exit_code=run.exit_code,
                    stdout=_tail(run.stdout, tail_bytes),
                    stderr=_tail(run.stderr, tail_bytes),
                    detail=detail,
                )
            )
            if status is Status.SANDBOX_ERROR:
                break
            stopped = early_stop and status is not Status.PASSED
    return _report(cases, compiled)


def _harness_spec(tests: AssertTests | CallTests, limits: Limits, early_stop: bool) -> dict[str, Any]:
    common = {
        "time_s": limits.time_s,
        "idle_grace_s": IDLE_GRACE_S,
        "wall_s": limits.wall_ceiling_s,
        "max_value_bytes": limits.output_bytes,
        "early_stop": early_stop,
    }
    if isinstance(tests, AssertTests):
        return {
            "mode": "assert",
            "tests": list(tests.cases),
            "entry_point": tests.entry_point if tests.test is not None and tests.test.strip() else None,
            "setup_code": tests.setup_code,
            **common,
        }
    return {"mode": "call", "fn_name": tests.fn_name, "inputs": [list(c.input) for c in tests.cases], **common}


async def _run_harness(
    sandbox: Sandbox,
    code: str,
    tests: AssertTests | CallTests,
    limits: Limits,
    early_stop: bool,
    tail_bytes: int,
) -> TestReport:
    total = len(tests.cases)
    nonce = secrets.token_hex(16)
    try:
        # marshal, because the harness must not pay for importing json (~10 ms a run).
        spec = marshal.dumps(_harness_spec(tests, limits, early_stop))
    except ValueError as exc:
        return _grader_error(f"the test inputs cannot be sent to the harness: {exc}", total)
    files = {"harness.py": in_sandbox_source("_pyharness.py").encode(), "solution.py": utf8(code)}
    # The checker limits each case itself. The job as a whole gets every case's time (and slack), plus
    # two more for loading the program and the test setup, and one process more: the checker's.
    process_limits = dataclasses.replace(
        limits,
        time_s=(limits.time_s + IDLE_GRACE_S + _HARNESS_SLACK_S) * (total + 2),
        max_processes=limits.max_processes + 1,
    )
    argv = (PYTHON_TRUSTED, "harness.py", str(limits.output_bytes))
    async with sandbox.job(files) as job:
        stdin = nonce.encode() + b"\n" + spec
        run = await job.exec(argv, stdin=stdin, limits=process_limits, channel=True)
    if run.status is Status.SANDBOX_ERROR:
        return TestReport(Status.SANDBOX_ERROR, 0, total, (), None, run.detail)

    records: dict[int, dict[str, Any]] = {}
    fatal: dict[str, Any] | None = None
    abort: dict[str, Any] | None = None
    for line in run.channel.splitlines():
        try:
            record = json.loads(line, object_hook=_from_channel)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("nonce") != nonce:
            continue  # not written by the harness: the program cannot forge a verdict without the nonce
        kind = record.get("kind")
        if kind in ("grader_error", "compile_error", "load_error") and fatal is None:
            fatal = record
        elif kind == "case" and isinstance(record.get("index"), int):
            records.setdefault(record["index"], record)
        elif kind == "abort" and abort is None:
            abort = record
    grader = [r for r in (fatal, *records.values()) if r is not None and "grader_error" in (r["kind"], r.get("status"))]
    if grader:
        return _grader_error(str(grader[0].get("detail")), total)

    stdout, stderr = _tail(run.stdout, tail_bytes), _tail(run.stderr, tail_bytes)
    cases: list[CaseResult] = []
    stopped = False
    for i in range(total):
        record = records.get(i)
        detail: str | None
        if stopped:
            status, detail, time_s = Status.SKIPPED, None, 0.0
        elif fatal is not None:
            status = Status.COMPILE_ERROR if fatal["kind"] == "compile_error" else Status(fatal["status"])
            detail, time_s = fatal.get("detail"), 0.0
        elif record is None:
            status, detail, time_s = _unconfirmed(run, abort)
        else:
            status, detail, time_s = _case_verdict(record, tests, i)
        if status is Status.SANDBOX_ERROR and _memory_killed(run, limits):
            status, detail = Status.MEMORY_LIMIT, f"{detail}, by the out-of-memory killer, over its memory limit"
        passed = status is Status.PASSED
        measured = record if record is not None and not stopped and fatal is None else {}
        cases.append(
            CaseResult(
                i,
                status,
                time_s=time_s,
                cpu_s=_number(measured, "cpu_s"),
                cpu_wait_s=_number(measured, "cpu_wait_s"),
                memory_mb=_number(measured, "memory_mb") or run.memory_mb,
                exit_code=run.exit_code,
                stdout="" if passed else stdout,
                stderr="" if passed else stderr,
                detail=detail,
            )
        )
        stopped = stopped or (early_stop and not passed)
    return _report(cases)


def _number(record: dict[str, Any], key: str) -> float:
    value = record.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _memory_killed(run: ExecResult, limits: Limits) -> bool:
    """Was a harness worker killed from outside (the checker says so) for its own memory use? The sandbox's
    cgroup ran out (``memory_limit`` of the run), or the host's OOM killer acted while the job used more than
    its limit."""
    return run.status is Status.MEMORY_LIMIT or (run.host_oom and run.memory_mb >= limits.memory_mb)


def _unconfirmed(run: ExecResult, abort: dict[str, Any] | None) -> tuple[Status, str | None, float]:
    """The verdict on a case the harness never confirmed: the program's run ended (or was ended) first."""
    if run.status in (Status.TIMEOUT, Status.MEMORY_LIMIT, Status.OUTPUT_LIMIT):
        return run.status, f"the program ended before the harness confirmed this test ({run.detail})", 0.0
    if abort is not None and abort.get("status") in ("timeout", "runtime_error", "sandbox_error"):
        return Status(abort["status"]), str(abort.get("detail")), 0.0
    why = run.detail or f"exit code {run.exit_code}"
    return Status.RUNTIME_ERROR, f"the program ended before the harness confirmed this test ({why})", 0.0


def _case_verdict(
    record: dict[str, Any], tests: AssertTests | CallTests, index: int
) -> tuple[Status, str | None, float]:
    time_s = _number(record, "time_s")
    raw = record.get("status")
    if isinstance(tests, CallTests):
        # A call's verdict is always made here, from the value it returned: the harness only reports it.
        if raw == "returned":
            want = tests.cases[index].output
            got = record.get("value")
            if json_equal(got, want, abs_tol=tests.abs_tol, rel_tol=tests.rel_tol):
                return Status.PASSED, None, time_s
            return Status.WRONG_ANSWER, f"expected {_short(want)}, got {_short(got)}", time_s
        if raw == "passed":
            return Status.RUNTIME_ERROR, "unexpected harness status 'passed' for a call", time_s
    try:
        status = Status(str(raw))
    except ValueError:
        return Status.RUNTIME_ERROR, f"unknown harness status {raw!r}", time_s
    if status not in _CASE_STATUSES:
        return Status.RUNTIME_ERROR, f"unexpected harness status {raw!r}", time_s
    return status, record.get("detail"), time_s


__all__ = [
    "COMPARATORS",
    "AssertTests",
    "CallCase",
    "CallTests",
    "Comparator",
    "StdioCase",
    "StdioTests",
    "TestSpec",
    "compare_output",
    "json_equal",
    "run_program",
    "run_tests",
]
