"""Real data through both backends: HumanEval, MBPP and stdin/stdout problems with hand-written solutions."""

from __future__ import annotations

import asyncio
import functools
import json
from collections import Counter
from typing import Any

import pytest

from sandbox import AssertTests, Limits, Sandbox, Status, StdioCase, StdioTests, run_tests
from tests.conftest import data_dir, require_file

pytestmark = [pytest.mark.data, pytest.mark.slow]

# These tests check verdicts on code known to be right (or wrong), not its speed, so a case gets 30 s of CPU rather
# than the default 5. The slowest reference, MBPP-sanitized task 123 (amicable_numbers_sum(9999), quadratic), uses
# 4.4 s of CPU alone on the 2-core CI machine, and CPU time grows under load: it timed out there once at 5 s.
REFERENCE = Limits(time_s=30.0)


def read_jsonl(name: str) -> list[dict[str, Any]]:
    path = require_file(data_dir() / name)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_humaneval_canonical_solutions_pass_and_wrong_bodies_fail(sandbox: Sandbox) -> None:
    problems = read_jsonl("humaneval.jsonl")
    assert len(problems) == 164

    def tests(p: dict[str, Any]) -> AssertTests:
        return AssertTests(test=p["test"], entry_point=p["entry_point"])

    right = await asyncio.gather(
        *(
            run_tests(sandbox, "python", p["prompt"] + p["canonical_solution"], tests(p), limits=REFERENCE)
            for p in problems
        )
    )
    failed = {
        p["task_id"]: (r.status, r.cases[0].detail if r.cases else r.detail)
        for p, r in zip(problems, right, strict=True)
    }
    failed = {k: v for k, v in failed.items() if v[0] is not Status.PASSED}
    assert failed == {}

    # The same problems with a body that returns None: every one must fail, none may error on our side.
    wrong = await asyncio.gather(
        *(run_tests(sandbox, "python", p["prompt"] + "    return None\n", tests(p), limits=REFERENCE) for p in problems)
    )
    verdicts = Counter(r.status for r in wrong)
    assert verdicts[Status.PASSED] == 0
    assert set(verdicts) <= {Status.WRONG_ANSWER, Status.RUNTIME_ERROR}, verdicts
    assert all(r.reward() == 0.0 for r in wrong)


async def test_mbpp_reference_code_passes_its_test_list(sandbox: Sandbox) -> None:
    tasks = read_jsonl("mbpp.jsonl")
    assert len(tasks) == 974
    reports = await asyncio.gather(
        *(
            run_tests(
                sandbox,
                "python",
                t["code"],
                AssertTests(test_list=tuple(t["test_list"]), setup_code=t["test_setup_code"]),
                limits=REFERENCE,
            )
            for t in tasks
        )
    )
    failed = {
        t["task_id"]: [c.detail for c in r.cases]
        for t, r in zip(tasks, reports, strict=True)
        if r.status is not Status.PASSED
    }
    assert failed == {}
    assert sum(r.total for r in reports) == sum(len(t["test_list"]) for t in tasks)  # one case per assert


async def test_mbpp_sanitized_reference_code_passes(sandbox: Sandbox) -> None:
    path = require_file(data_dir() / "mbpp_sanitized.json")
    tasks = json.loads(path.read_text())
    reports = await asyncio.gather(
        *(
            run_tests(
                sandbox,
                "python",
                t["code"],
                AssertTests(test_list=tuple(t["test_list"]), setup_code="\n".join(t["test_imports"])),
                limits=REFERENCE,
            )
            for t in tasks
        )
    )
    failed = {
        t["task_id"]: (r.status, [c.detail for c in r.cases if c.status is not Status.PASSED])
        for t, r in zip(tasks, reports, strict=True)
        if r.status is not Status.PASSED
    }
    assert failed == {}


# (problem_id, language, solution, comparator, passes): hand-written, including wrong ones that must fail.
SOLUTIONS = [
    (
        "p00001",
        "python",
        "import sys\nh = sorted(map(int, sys.stdin.read().split()), reverse=True)\nprint(*h[:3], sep='\\n')",
        "whitespace",
        True,
    ),
    (
        "p00001",
        "python",
        "import sys\nh = sorted(map(int, sys.stdin.read().split()))\nprint(*h[:3], sep='\\n')",
        "whitespace",
        False,
    ),
    (
        "p03000",
        "cpp",
        "#include <iostream>\nint main(){int n,x,d=0,c=1,l;std::cin>>n>>x;"
        "for(int i=0;i<n;i++){std::cin>>l;d+=l;if(d<=x)c++;}std::cout<<c<<std::endl;}",
        "whitespace",
        True,
    ),
    ("p02388", "python", "print(int(input()) ** 3)", "whitespace", True),
    ("p02388", "python", "print(int(input()) ** 2)", "whitespace", False),
    (
        "p02389",
        "cpp",
        '#include <cstdio>\nint main(){int a,b;scanf("%d %d",&a,&b);printf("%d %d\\n",a*b,2*(a+b));}',
        "whitespace",
        True,
    ),
    ("p02390", "python", "s = int(input())\nprint(f'{s // 3600}:{s % 3600 // 60}:{s % 60}')", "whitespace", True),
    # Full-precision floats: wrong under the whitespace comparator, right within the statement's 1e-5.
    ("p02400", "python", "import math\nr = float(input())\nprint(math.pi * r * r, 2 * math.pi * r)", "float", True),
    (
        "p02400",
        "python",
        "import math\nr = float(input())\nprint(math.pi * r * r, 2 * math.pi * r)",
        "whitespace",
        False,
    ),
    ("p02400", "python", "r = float(input())\nprint(3.14 * r * r, 2 * 3.14 * r)", "float", False),
    (
        "p00002",
        "cpp",
        "#include <iostream>\n#include <string>\nint main(){long a,b;while(std::cin>>a>>b)"
        "std::cout<<std::to_string(a+b).size()<<'\\n';}",
        "whitespace",
        True,
    ),
    ("p02546", "python", "s = input()\nprint(s + ('es' if s.endswith('s') else 's'))", "whitespace", True),
    (
        "p03693",
        "cpp",
        '#include <iostream>\nint main(){int r,g,b;std::cin>>r>>g>>b;std::cout<<((g*10+b)%4?"NO":"YES")<<std::endl;}',
        "whitespace",
        True,
    ),
    ("p02612", "python", "n = int(input())\nprint((1000 - n % 1000) % 1000)", "whitespace", True),
    ("p02612", "python", "n = int(input())\nprint(1000 - n % 1000)", "whitespace", False),
]


@pytest.mark.parametrize(
    ("problem_id", "language", "solution", "comparator", "passes"),
    SOLUTIONS,
    ids=[f"{s[0]}-{s[1]}-{s[3]}-{'right' if s[4] else 'wrong'}-{i}" for i, s in enumerate(SOLUTIONS)],
)
async def test_codecontests_handwritten_solutions(
    sandbox: Sandbox, problem_id: str, language: str, solution: str, comparator: str, passes: bool
) -> None:
    problem = _codecontests()[problem_id]
    cases = tuple(StdioCase(t["input"].encode(), t["output"].encode()) for t in problem["tests"])
    tolerance = 1e-5 if "float_tolerance" in problem["checker_hints"] else 1e-6
    tests = StdioTests(cases, comparator, abs_tol=tolerance, rel_tol=0.0)  # type: ignore[arg-type]
    report = await run_tests(sandbox, language, solution, tests, limits=REFERENCE)
    if passes:
        assert report.status is Status.PASSED, [c.detail for c in report.cases]
        assert report.passed == len(cases) >= 1
    else:
        assert report.status is Status.WRONG_ANSWER and report.passed < len(cases)


@functools.cache
def _codecontests() -> dict[str, dict[str, Any]]:
    return {p["problem_id"]: p for p in read_jsonl("codecontests_sample.jsonl")}
