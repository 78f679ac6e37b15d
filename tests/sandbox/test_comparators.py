"""Output comparators, JSON equality of call-based tests, limits and languages: pure, no sandbox."""

from __future__ import annotations

import math

import pytest

from sandbox import Limits, compare_output, get_language, json_equal
from sandbox.base import result_from_runner
from sandbox.types import Status, TestReport

# (got, want, comparator, matches, why)
COMPARISONS = [
    # The default (issue 15): what judges accept for floating-point output, 1e-6 absolute or relative.
    (b"0.333333\n", b"0.333333333333\n", None, True, "default: six decimals of a longer reference (LCB #129)"),
    (b"2.5000001 7\n", b"2.5 7\n", None, True, "default: within 1e-6, integers equal"),
    (b"2.50001 7\n", b"2.5 7\n", None, False, "default: 1e-5 is beyond the tolerance"),
    (b"8\n", b"9\n", None, False, "default: integers are exact"),
    (b"4 5 \r\n", b"4 5\n", None, True, "default: trailing space and CRLF are normalised"),
    (b"1 2 3 \n", b"1 2 3\n", "whitespace", True, "trailing space on a line is ignored (code-012)"),
    (b"5\r\n7\r\n", b"5\n7\n", "whitespace", True, "CRLF pairs become LF (code-014)"),
    (b"5\r7\n", b"57\n", "whitespace", False, "a lone CR is not deleted"),
    (b"5\r\n", b"5\r\n", "whitespace", True, "CRLF on both sides"),
    (b"42", b"42\n", "whitespace", True, "missing final newline"),
    (b"42\n\n\n", b"42\n", "whitespace", True, "extra trailing newlines"),
    (b"1\n2\n", b"1\n", "whitespace", False, "an extra line is never ignored (no zip())"),
    (b"1\n", b"1\n2\n", "whitespace", False, "a missing line is never ignored"),
    (b"1\n\n2\n", b"1\n2\n", "whitespace", False, "an empty line in the middle counts"),
    (b" 1\n", b"1\n", "whitespace", False, "leading spaces count"),
    (b"1  2\n", b"1 2\n", "whitespace", False, "inner spacing counts under whitespace"),
    (b"1  2\n", b"1 2\n", "float", True, "float compares tokens, so inner spacing is free"),
    (b"0.6667\n", b"0.6666666667\n", "whitespace", False, "not a number comparison (code-016)"),
    (b"0.6667\n", b"0.6666666667\n", "float", False, "3.3e-5 is beyond 1e-6 (code-016)"),
    (b"0.6666667\n", b"0.6666666667\n", "float", True, "3.3e-8 is within 1e-6"),
    (b"1e-7\n", b"0\n", "float", True, "only two integer tokens are compared exactly"),
    (b"1e-7\n", b"0.0\n", "float", True, "absolute tolerance near zero"),
    (b"1000000.5\n", b"1000000.0\n", "float", True, "relative tolerance of big values"),
    (b"1000000001\n", b"1000000000\n", "float", False, "integers never get a tolerance"),
    (b"007\n", b"7\n", "float", True, "leading zeros of an integer"),
    (b"-0\n", b"0\n", "float", True, "minus zero"),
    (b"nan\n", b"nan\n", "float", True, "identical words"),
    (b"inf\n", b"1e400\n", "float", False, "no match through infinity"),
    (b"1" * 400 + b"\n", b"1" * 399 + b"2\n", "float", False, "400-digit integers that differ"),
    (b"1_000\n", b"1000\n", "float", False, "Python's float() would accept 1_000: we do not"),
    (b"yes\n", b"YES\n", "float", False, "words are compared exactly"),
    (b"7" * 5071 + b"\n", b"7" * 5071 + b"\n", "whitespace", True, "5071 digits, never int() (code-018)"),
    (b"7" * 5071 + b"\n", b"7" * 5071 + b"\n", "float", True, "5071 digits under float: text compare"),
    (b"a\n", b"a\n", "exact", True, "exact match"),
    (b"a\n", b"a", "exact", False, "exact: the newline counts"),
    (b"a \n", b"a\n", "exact", False, "exact: trailing space counts"),
]


@pytest.mark.parametrize(("got", "want", "comparator", "matches", "why"), COMPARISONS, ids=[c[-1] for c in COMPARISONS])
def test_compare_output(got: bytes, want: bytes, comparator: str | None, matches: bool, why: str) -> None:
    difference = (
        compare_output(got, want) if comparator is None else compare_output(got, want, comparator)  # type: ignore[arg-type]
    )
    assert (difference is None) is matches, f"{why}: {difference}"
    if not matches:
        assert isinstance(difference, str) and difference


def test_compare_output_says_where() -> None:
    assert compare_output(b"1\n2\n3\n", b"1\n5\n3\n") == "line 2: expected '5', got '2'"
    assert compare_output(b"1\n", b"1\n2\n") == "expected 2 lines, got 1"
    assert compare_output(b"abcX", b"abcY", "exact") == "output differs at byte 3: expected 'Y', got 'X'"


def test_float_tolerances_are_parameters() -> None:
    assert compare_output(b"1.001\n", b"1.0\n", "float", abs_tol=1e-2, rel_tol=0) is None
    assert compare_output(b"1.001\n", b"1.0\n", "float", abs_tol=1e-4, rel_tol=0) is not None
    assert compare_output(b"101.0\n", b"100.0\n", "float", abs_tol=0, rel_tol=0.011) is None


# (got, want, equal, why)
JSON_CASES = [
    ([1, 2], (1, 2), True, "a tuple equals a list"),
    ([[1, 2], [3]], ((1, 2), (3,)), True, "nested tuples"),
    (True, 1, False, "a bool never equals a number"),
    (1, True, False, "a number never equals a bool"),
    (2, 2.0, True, "int and float of the same value"),
    (0.1 + 0.2, 0.3, True, "float rounding within rel_tol 1e-9"),
    (0.3001, 0.3, False, "a real float difference"),
    ("1", 1, False, "a string never equals a number"),
    (None, 0, False, "null is not 0"),
    (None, None, True, "null"),
    ({"a": [1]}, {"a": (1,)}, True, "dict values"),
    ({"a": 1}, {"a": 1, "b": 2}, False, "a missing key"),
    ([1, 2, 3], [1, 2], False, "different lengths"),
    (2**20000, 2**20000, True, "ints past the 4300-digit str limit"),
    (2**20000 + 1, 2**20000, False, "huge ints that differ"),
    (10**400, 1e300, False, "an int too big for float"),
    (math.nan, math.nan, True, "NaN equals NaN here (both failed the same way)"),
    ("", "", True, "empty strings"),
]


@pytest.mark.parametrize(("got", "want", "equal", "why"), JSON_CASES, ids=[c[-1] for c in JSON_CASES])
def test_json_equal(got: object, want: object, equal: bool, why: str) -> None:
    assert json_equal(got, want) is equal, why


def test_limits_are_validated_and_capped() -> None:
    with pytest.raises(ValueError, match="time_s"):
        Limits(time_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=-1)
    capped = Limits(time_s=100, memory_mb=8192).capped(Limits(time_s=10, memory_mb=1024))
    assert (capped.time_s, capped.memory_mb, capped.max_processes) == (10, 1024, Limits().max_processes)
    compile_limits = Limits(time_s=1, memory_mb=64).for_compile()
    assert (compile_limits.time_s, compile_limits.memory_mb) == (Limits().compile_time_s, Limits().compile_memory_mb)


def test_languages() -> None:
    assert get_language("Python3").name == "python"
    assert get_language("c++").name == "cpp"
    assert get_language("cpp").compile is not None
    with pytest.raises(ValueError, match="unsupported language 'java'"):
        get_language("java")


def test_report_reward() -> None:
    assert TestReport(Status.WRONG_ANSWER, 2, 3).reward() == pytest.approx(2 / 3)
    assert TestReport(Status.WRONG_ANSWER, 2, 3).reward(all_or_nothing=True) == 0.0
    assert TestReport(Status.PASSED, 3, 3).reward(all_or_nothing=True) == 1.0
    assert TestReport(Status.SANDBOX_ERROR, 0, 3).reward() is None
    assert TestReport(Status.GRADER_ERROR, 0, 0).reward() is None
    assert TestReport(Status.COMPILE_ERROR, 0, 3).reward() == 0.0


def _answer(**overrides: object) -> dict[str, object]:
    answer: dict[str, object] = {
        "exit_code": 0,
        "signal": None,
        "time_s": 0.1,
        "cpu_s": 0.1,
        "cpu_wait_s": 0.0,
        "maxrss_kb": 2048,
        "stdout": "",
        "stdout_bytes": 0,
        "stderr": "",
        "stderr_bytes": 0,
        "timed_out": False,
        "oom_killed": False,
        "leftover": False,
        "clean": True,
        "spawn_error": None,
    }
    answer.update(overrides)
    return answer


# (runner answer fields, status, reusable, why)
CLASSIFICATIONS = [
    ({}, Status.OK, True, "a clean exit"),
    ({"exit_code": 3}, Status.RUNTIME_ERROR, True, "a non-zero exit"),
    ({"exit_code": None, "signal": 11}, Status.RUNTIME_ERROR, True, "a signal"),
    (
        {"timed_out": "cpu", "exit_code": None, "signal": 9, "stdout_bytes": 10**9},
        Status.TIMEOUT,
        False,
        "timeout first",
    ),
    ({"oom_killed": True, "exit_code": None, "signal": 9}, Status.MEMORY_LIMIT, False, "the OOM killer"),
    ({"exit_code": 1, "stderr": "TWVtb3J5RXJyb3I="}, Status.MEMORY_LIMIT, False, "Python's MemoryError"),
    ({"exit_code": 0, "stdout_bytes": 5 * 1024 * 1024}, Status.OUTPUT_LIMIT, False, "too much output"),
    ({"leftover": True}, Status.OK, False, "a process left behind: replace the sandbox"),
    ({"spawn_error": "FileNotFoundError"}, Status.SANDBOX_ERROR, False, "our image lacks the tool"),
    ({"timed_out": "cpu", "exit_code": None, "signal": 9}, Status.TIMEOUT, False, "over its CPU time"),
    ({"timed_out": "idle", "exit_code": None, "signal": 9}, Status.TIMEOUT, False, "asleep past time_s + grace"),
    (
        {"timed_out": "wall", "exit_code": None, "signal": 9, "cpu_s": 0.42, "cpu_wait_s": 2.6, "time_s": 3.05},
        Status.SANDBOX_ERROR,
        False,
        "the wall-clock ceiling within both limits: the host kept it from a CPU, no verdict",
    ),
]


@pytest.mark.parametrize(("fields", "status", "reusable", "why"), CLASSIFICATIONS, ids=[c[-1] for c in CLASSIFICATIONS])
def test_result_from_runner(fields: dict[str, object], status: Status, reusable: bool, why: str) -> None:
    result = result_from_runner(_answer(**fields), ["python3", "main.py"], Limits())
    assert result.status is status, why
    assert result.reusable is reusable, why


def test_the_wall_clock_ceiling_says_how_long_the_host_kept_the_program_waiting() -> None:
    answer = _answer(timed_out="wall", exit_code=None, signal=9, cpu_s=0.42, cpu_wait_s=2.6, time_s=3.05)
    result = result_from_runner(answer, ["python3", "main.py"], Limits(time_s=0.5))
    assert result.detail == (
        "no verdict: the host kept the program waiting for a CPU for 2.60 s, so it reached the 3 s wall-clock "
        "ceiling after 0.42 of its 0.5 s of CPU time (the host is overloaded); killed"
    )
    assert TestReport(result.status, 0, 1).reward() is None  # a null reward, never a 0
