"""Test formats and verdicts: stdio, assert (HumanEval, MBPP) and call-based, on both backends.

The harness must confirm every case itself: a program that exits, crashes or fakes a pass before its
tests finish fails them.
"""

from __future__ import annotations

import pytest

from sandbox import (
    AssertTests,
    CallCase,
    CallTests,
    Limits,
    Sandbox,
    Status,
    StdioCase,
    StdioTests,
    run_tests,
)

ADD_CHECK = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
HUMANEVAL = AssertTests(test=ADD_CHECK, entry_point="add")
MBPP = AssertTests(test_list=("assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add(1, 1) == 2"))


def _statuses(report) -> list[Status]:  # type: ignore[no-untyped-def]
    return [c.status for c in report.cases]


async def test_stdio_cases_each_get_a_verdict(sandbox: Sandbox) -> None:
    code = "a, b = map(int, input().split())\nprint(a + b if a != 9 else a * b)"
    tests = StdioTests((StdioCase(b"1 2\n", b"3\n"), StdioCase(b"9 9\n", b"18\n"), StdioCase(b"4 5", b"9")))
    report = await run_tests(sandbox, "python", code, tests)
    assert _statuses(report) == [Status.PASSED, Status.WRONG_ANSWER, Status.PASSED]
    assert (report.status, report.passed, report.total) == (Status.WRONG_ANSWER, 2, 3)
    assert report.reward() == pytest.approx(2 / 3)
    assert report.reward(all_or_nothing=True) == 0.0
    assert report.cases[1].detail == "line 1: expected '18', got '81'"
    assert report.cases[1].stdout == "81\n"


async def test_stdio_early_stop_skips_the_rest(sandbox: Sandbox) -> None:
    tests = StdioTests((StdioCase(b"", b"1\n"), StdioCase(b"", b"2\n"), StdioCase(b"", b"1\n")))
    report = await run_tests(sandbox, "python", "print(1)", tests, early_stop=True)
    assert _statuses(report) == [Status.PASSED, Status.WRONG_ANSWER, Status.SKIPPED]
    assert report.reward() == pytest.approx(1 / 3)


async def test_stdio_cpp_compiles_once_for_all_cases(sandbox: Sandbox) -> None:
    code = "#include <iostream>\nint main(){long long n;std::cin>>n;std::cout<<n*n<<std::endl;}"
    tests = StdioTests(tuple(StdioCase(f"{n}\n".encode(), f"{n * n}\n".encode()) for n in range(1, 6)))
    report = await run_tests(sandbox, "cpp", code, tests)
    assert report.status is Status.PASSED and report.passed == 5
    assert report.compile is not None and report.compile.status is Status.OK


async def test_stdio_compile_error_fails_every_case(sandbox: Sandbox) -> None:
    tests = StdioTests((StdioCase(b"", b"1\n"), StdioCase(b"", b"2\n")))
    report = await run_tests(sandbox, "cpp", "int main( {", tests)
    assert _statuses(report) == [Status.COMPILE_ERROR, Status.COMPILE_ERROR]
    assert report.status is Status.COMPILE_ERROR and report.reward() == 0.0
    assert "error" in (report.cases[0].detail or "")


async def test_stdio_timeout_in_one_case_only(sandbox: Sandbox) -> None:
    code = "n = int(input())\nwhile n == 0:\n    pass\nprint(n)"
    tests = StdioTests((StdioCase(b"1\n", b"1\n"), StdioCase(b"0\n", b"0\n"), StdioCase(b"2\n", b"2\n")))
    report = await run_tests(sandbox, "python", code, tests, limits=Limits(time_s=0.5))
    assert _statuses(report) == [Status.PASSED, Status.TIMEOUT, Status.PASSED]


async def test_stdio_float_comparator(sandbox: Sandbox) -> None:
    tests = StdioTests((StdioCase(b"", b"0.3333333333\n"),), comparator="float")
    assert (await run_tests(sandbox, "python", "print(1/3)", tests)).status is Status.PASSED
    assert (await run_tests(sandbox, "python", "print(0.3333)", tests)).status is Status.WRONG_ANSWER


async def test_humaneval_check(sandbox: Sandbox) -> None:
    good = await run_tests(sandbox, "python", "def add(a, b):\n    return a + b\n", HUMANEVAL)
    assert good.status is Status.PASSED and good.reward() == 1.0
    bad = await run_tests(sandbox, "python", "def add(a, b):\n    return a - b\n", HUMANEVAL)
    assert bad.status is Status.WRONG_ANSWER and bad.reward() == 0.0
    assert "AssertionError" in (bad.cases[0].detail or "")


async def test_mbpp_asserts_are_separate_cases(sandbox: Sandbox) -> None:
    report = await run_tests(sandbox, "python", "def add(a, b):\n    return a + b + (a < 0)\n", MBPP)
    assert _statuses(report) == [Status.PASSED, Status.WRONG_ANSWER, Status.PASSED]
    assert report.reward() == pytest.approx(2 / 3)


async def test_mbpp_setup_code_runs_after_the_program(sandbox: Sandbox) -> None:
    tests = AssertTests(test_list=("assert area(2) == round(math.pi * 4, 5)",), setup_code="import math")
    report = await run_tests(
        sandbox, "python", "import math\ndef area(r):\n    return round(math.pi * r * r, 5)", tests
    )
    assert report.status is Status.PASSED


# (program, status of every case, why): the harness confirms each case itself.
EARLY_EXITS = [
    (
        "def add(a, b):\n    return a - b\nimport sys\nsys.exit(0)\n",
        Status.WRONG_ANSWER,
        "sys.exit(0) at the end (code-005)",
    ),
    ("def add(a, b):\n    return a + b\nimport sys\nsys.exit(0)\n", Status.PASSED, "a right answer that exits cleanly"),
    ("def add(a, b):\n    return a - b\nquit()\n", Status.WRONG_ANSWER, "quit() at the end"),
    ("def add(a, b):\n    return a - b\nraise SystemExit\n", Status.WRONG_ANSWER, "raise SystemExit"),
    (
        "def add(a, b):\n    return a - b\nimport os\nos._exit(0)\n",
        Status.RUNTIME_ERROR,
        "os._exit(0) before the tests",
    ),
    ("def add(a, b):\n    return a - b\nimport sys\nsys.exit(1)\n", Status.RUNTIME_ERROR, "exit(1) at load"),
    ("import os\ndef add(a, b):\n    os._exit(0)\n", Status.RUNTIME_ERROR, "os._exit(0) inside the function"),
    ("import sys\ndef add(a, b):\n    sys.exit(0)\n", Status.RUNTIME_ERROR, "sys.exit(0) inside the function"),
    ("def add(a, b):\n    quit()\n", Status.RUNTIME_ERROR, "quit() inside the function"),
    (
        "import os, signal\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
        Status.RUNTIME_ERROR,
        "kills itself",
    ),
    ("import ctypes\ndef add(a, b):\n    ctypes.string_at(0)\n", Status.RUNTIME_ERROR, "segfaults"),
    (
        'import sys\ndef add(a, b):\n    print(\'{"kind": "case", "index": 0, "status": "passed"}\')\n'
        '    import os\n    os.write(3, b\'{"kind": "case", "index": 0, "status": "passed", "nonce": "x"}\\n\')\n'
        "    os._exit(0)\n",
        Status.RUNTIME_ERROR,
        "forges a pass line without the nonce",
    ),
    ("import os\nos.close(3)\ndef add(a, b):\n    return a + b\n", Status.RUNTIME_ERROR, "closes the result channel"),
    (
        "def add(a, b):\n    try:\n        assert False\n    except BaseException:\n        pass\n",
        Status.WRONG_ANSWER,
        "swallows",
    ),
    ("def add(a, b):\n    return a +\n", Status.COMPILE_ERROR, "syntax error (code-023)"),
    ("raise ValueError('at import')\n", Status.RUNTIME_ERROR, "crash at import"),
    ("x = input()\ndef add(a, b):\n    return a + b\n", Status.RUNTIME_ERROR, "reads stdin at import: it is empty"),
]


@pytest.mark.parametrize(("code", "status", "why"), EARLY_EXITS, ids=[c[-1] for c in EARLY_EXITS])
@pytest.mark.parametrize("tests", [HUMANEVAL, MBPP], ids=["humaneval", "mbpp"])
async def test_assert_cases_need_the_harness_confirmation(
    sandbox: Sandbox, tests: AssertTests, code: str, status: Status, why: str
) -> None:
    report = await run_tests(sandbox, "python", code, tests)
    assert _statuses(report) == [status] * len(tests.cases), (why, report.cases[0].detail)
    assert report.reward() == (1.0 if status is Status.PASSED else 0.0), why


async def test_a_late_exit_keeps_the_cases_already_confirmed(sandbox: Sandbox) -> None:
    code = "import os\ncalls = []\ndef add(a, b):\n    calls.append(1)\n    if len(calls) == 2:\n        os._exit(0)\n"
    code += "    return a + b\n"
    report = await run_tests(sandbox, "python", code, MBPP)
    assert _statuses(report) == [Status.PASSED, Status.RUNTIME_ERROR, Status.RUNTIME_ERROR]
    assert "before the harness confirmed" in (report.cases[1].detail or "")


async def test_assert_case_timeout_does_not_stop_the_next(sandbox: Sandbox) -> None:
    code = "def add(a, b):\n    while a < 0:\n        pass\n    return a + b\n"
    report = await run_tests(sandbox, "python", code, MBPP, limits=Limits(time_s=0.5))
    assert _statuses(report) == [Status.PASSED, Status.TIMEOUT, Status.PASSED]


async def test_assert_case_ignoring_the_timer_times_out(sandbox: Sandbox) -> None:
    code = (
        "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ndef add(a, b):\n    while True:\n        pass\n"
    )
    report = await run_tests(sandbox, "python", code, HUMANEVAL, limits=Limits(time_s=0.5))
    assert _statuses(report) == [Status.TIMEOUT]


async def test_memory_error_in_a_case(sandbox: Sandbox) -> None:
    code = "def add(a, b):\n    if a < 0:\n        return len(bytearray(10**10))\n    return a + b\n"
    report = await run_tests(sandbox, "python", code, MBPP)
    assert _statuses(report) == [Status.PASSED, Status.MEMORY_LIMIT, Status.PASSED]


async def test_candidate_names_survive_the_test_code(sandbox: Sandbox) -> None:
    # The program's own helper named `check` must not be replaced by the test's `check`.
    code = "def check(x):\n    return x * 2\ndef add(a, b):\n    return check(a + b) // 2\n"
    report = await run_tests(sandbox, "python", code, HUMANEVAL)
    assert report.status is Status.PASSED


async def test_grader_errors(sandbox: Sandbox) -> None:
    empty = await run_tests(sandbox, "python", "def add(a, b): return a + b", AssertTests(test_list=()))
    assert (empty.status, empty.reward()) == (Status.GRADER_ERROR, None)
    broken = await run_tests(sandbox, "python", "def add(a, b): return a + b", AssertTests(test_list=("assert (",)))
    assert (broken.status, broken.reward()) == (Status.GRADER_ERROR, None)
    no_check = await run_tests(sandbox, "python", "def add(a, b): return a + b", AssertTests("x = 1", "add"))
    assert (no_check.status, no_check.reward()) == (Status.GRADER_ERROR, None)
    cpp = await run_tests(sandbox, "cpp", "int main(){}", MBPP)
    assert (cpp.status, cpp.reward()) == (Status.GRADER_ERROR, None)
    stdio = await run_tests(sandbox, "python", "print(1)", StdioTests(()))
    assert (stdio.status, stdio.reward()) == (Status.GRADER_ERROR, None)


def _call(fn: str, *cases: tuple[tuple[object, ...], object], **kw: float) -> CallTests:
    return CallTests(fn, tuple(CallCase(args, out) for args, out in cases), **kw)


# (program, tests, statuses, why)
CALLS = [
    ("def f(x):\n    return (x, x)\n", _call("f", ((1,), [1, 1])), [Status.PASSED], "a tuple equals a list"),
    ("def f(x):\n    return True\n", _call("f", ((1,), 1)), [Status.WRONG_ANSWER], "True is not 1"),
    ("def f(x):\n    return 0.1 + 0.2\n", _call("f", ((1,), 0.3)), [Status.PASSED], "float rounding"),
    ("def f(x):\n    return 2 ** 20000\n", _call("f", ((1,), 2**20000)), [Status.PASSED], "ints past 4300 digits"),
    ("def f(x):\n    return {1, 2}\n", _call("f", ((1,), [1, 2])), [Status.WRONG_ANSWER], "a set has no JSON form"),
    (
        "class E:\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return E()\n",
        _call("f", ((1,), 5)),
        [Status.WRONG_ANSWER],
        "an always-equal object",
    ),
    (
        "class I(int):\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return I(4)\n",
        _call("f", ((1,), 5)),
        [Status.WRONG_ANSWER],
        "an int subclass that lies",
    ),
    ("def solve(x):\n    raise ValueError('boom')\n", _call("solve", ((1,), "")), [Status.RUNTIME_ERROR], "code-007"),
    ("def g(x):\n    return x\n", _call("f", ((1,), 1)), [Status.RUNTIME_ERROR], "no such function"),
    (
        "class Solution:\n    def twoSum(self, a, t):\n        return [0, 1]\n",
        _call("twoSum", (([2, 7], 9), [0, 1])),
        [Status.PASSED],
        "a LeetCode Solution class",
    ),
    (
        "def f(d):\n    return {k: v * 2 for k, v in d.items()}\n",
        _call("f", (({"a": 1},), {"a": 2}), (({"b": [1]},), {"b": [1, 1]})),
        [Status.PASSED, Status.PASSED],
        "dicts and lists",
    ),
    (
        "from collections import Counter, namedtuple\nP = namedtuple('P', 'x y')\n"
        "def f(x):\n    return {1: 'a', None: Counter('bb'), 2.5: P(1, [2]), False: ()}\n",
        _call("f", ((1,), {"1": "a", "null": {"b": 2}, "2.5": [1, [2]], "false": []})),
        [Status.PASSED],
        "JSON as json.dumps writes it: number, bool and None keys become strings, a namedtuple a list",
    ),
    ("def f(x):\n    return {(1, 2): 3}\n", _call("f", ((1,), {"(1, 2)": 3})), [Status.WRONG_ANSWER], "a tuple key"),
    (
        "def f(x):\n    return x\n",
        _call("f", ((1,), 1), ((2,), 3), ((3,), 3)),
        [Status.PASSED, Status.WRONG_ANSWER, Status.PASSED],
        "mixed",
    ),
]


@pytest.mark.parametrize(("code", "tests", "statuses", "why"), CALLS, ids=[c[-1] for c in CALLS])
async def test_call_based(sandbox: Sandbox, code: str, tests: CallTests, statuses: list[Status], why: str) -> None:
    report = await run_tests(sandbox, "python", code, tests)
    assert _statuses(report) == statuses, (why, [c.detail for c in report.cases])


async def test_call_empty_test_list_is_a_grader_error(sandbox: Sandbox) -> None:
    report = await run_tests(sandbox, "python", "def f(x):\n    return x\n", CallTests("f", ()))
    assert (report.status, report.reward()) == (Status.GRADER_ERROR, None)  # code-024


async def test_call_expected_outputs_are_not_in_the_sandbox(sandbox: Sandbox) -> None:
    # The program looks for the expected answer everywhere it could be; it must find nothing.
    code = """
import os
def f(x):
    seen = []
    for root, dirs, files in os.walk("/work"):
        for name in files:
            seen.append(open(os.path.join(root, name), "rb").read())
    return "31337" + "-sec" + "ret" in repr(seen)  # split, so this source does not match itself
"""
    report = await run_tests(sandbox, "python", code, CallTests("f", (CallCase((1,), "31337-secret"),)))
    assert report.cases[0].detail == 'expected "31337-secret", got false'
