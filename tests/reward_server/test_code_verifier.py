"""The code reward component: extraction from completions, limits, and scores (``score_code``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from reward_server.verifiers.code import (
    CodeOptions,
    extract_code,
    program_language,
    required_names,
    resolve_limits,
    score_code,
)
from sandbox import (
    AssertTests,
    CallCase,
    CallTests,
    ExecResult,
    Limits,
    LocalSandbox,
    SandboxUnavailable,
    StdioCase,
    StdioTests,
    TestSpec,
)
from tests.conftest import IN_CI

# (completion, language, code_block, expected, why)
EXTRACTIONS = [
    ("```python\nprint(1)\n```", "python", "last", "print(1)\n", "one block"),
    ("a\n```python\nx = 1\n```\nb\n```python\nx = 2\n```\n", "python", "last", "x = 2\n", "the last block"),
    ("```python\nx = 1\n```\n```python\nx = 2\n```", "python", "first", "x = 1\n", "the first block"),
    ("```py\nx\n```", "python", "last", "x\n", "an alias as the tag"),
    ("```Python3\nx\n```", "python", "last", "x\n", "tags are case-insensitive"),
    ("```bash\nrm -rf /\n```", "python", "last", None, "another language never counts"),
    ("```\nx = 3\n```", "python", "last", "x = 3\n", "an untagged block when no tagged one"),
    ("```\nuntagged\n```\n```python\ntagged\n```\n```\nlater\n```", "python", "last", "tagged\n", "tagged wins"),
    ("```cpp\nint main(){}\n```", "cpp", "last", "int main(){}\n", "C++"),
    ("```c++\nint main(){}\n```", "cpp", "last", "int main(){}\n", "C++ by its alias"),
    ("no code here", "python", "last", None, "no block"),
    ("```python\nprint(1)\n", "python", "last", None, "an unclosed block (a truncated completion)"),
    ("<think>```python\ndraft\n```</think>Answer:\n```python\nfinal\n```", "python", "last", "final\n", "after think"),
    ("<think>```python\ndraft\n```</think>no code in the answer", "python", "last", None, "a draft is not an answer"),
    ("  ```python\n  indented\n  ```", "python", "last", "indented\n", "an indented fence loses its indentation"),
    ("print(5)", "python", "none", "print(5)", "the whole text"),
    # What counts as a block (QA c5): CommonMark fences of either kind, any length, indented in a list item.
    ("~~~python\nx = 1\n~~~", "python", "last", "x = 1\n", "a tilde fence"),
    ("````python\nx = 1\n````", "python", "last", "x = 1\n", "a four-backtick fence"),
    ("````python\ns = '''\n```\n'''\n````", "python", "last", "s = '''\n```\n'''\n", "``` lines inside ````"),
    ("~~~python\nx\n```\ny\n~~~", "python", "last", "x\n```\ny\n", "a backtick line does not close a tilde fence"),
    ("```python\nx = 1\n`````", "python", "last", "x = 1\n", "a longer closing fence closes"),
    (
        "1. The function:\n\n   ```python\n   def f():\n       return 1\n   ```\n2. Done.",
        "python",
        "last",
        "def f():\n    return 1\n",
        "indented in a list item (was an IndentationError)",
    ),
    ("- a\n    - b\n\t```python\n\tx = 1\n\t```", "python", "last", "x = 1\n", "indented by a tab"),
    ("```python\n    x = 1\n    y = 2\n```", "python", "last", "x = 1\ny = 2\n", "a body indented as a whole"),
    ("```python title=sol.py\nx\n```", "python", "last", "x\n", "an info string after the language"),
    ("```{.python}\nx\n```", "python", "last", "x\n", "a pandoc-style tag"),
    (
        "```python\nprint(int(input()) ** 2)\n```\nRun it:\n```python\n# python main.py < in.txt\n\n```",
        "python",
        "last",
        "print(int(input()) ** 2)\n",
        "a block of comments only is a note, not the program",
    ),
    ("```cpp\n// g++ -O2 main.cpp\n```", "cpp", "last", None, "a C++ block of comments only"),
    ("``` python\nx\n```", "python", "last", "x\n", "a space before the tag"),
    ("```python\r\nx = 1\r\n```", "python", "last", "x = 1\n", "CRLF line ends"),
    ("```python\nx = 1\n```\n```python\n```", "python", "last", "x = 1\n", "an empty last block is no program"),
    ("Use ```print(1)``` to print.", "python", "last", None, "inline code is not a block"),
    ("~~~python\nx = 1\n```", "python", "last", None, "a fence closes only with its own character"),
]


@pytest.mark.parametrize(
    ("completion", "language", "code_block", "expected", "why"), EXTRACTIONS, ids=[e[-1] for e in EXTRACTIONS]
)
def test_extract_code(completion: str, language: str, code_block: str, expected: str | None, why: str) -> None:
    assert extract_code(completion, language, code_block=code_block) == expected, why  # type: ignore[arg-type]


SQ = "def sq(x):\n    return x * x\n"
# (completion, language, required, expected, why): a block that defines what the tests call wins.
CHOICES = [
    (f"```python\n{SQ}```\nFor example:\n```python\nprint(sq(3))\n```", "python", [{"sq"}], SQ, "a usage example last"),
    (f"```python\n{SQ}```\n```python\n{SQ}print(sq(3))\n```", "python", [{"sq"}], f"{SQ}print(sq(3))\n", "both define"),
    ("```python\nprint(1)\n```\n```python\nprint(2)\n```", "python", [{"sq"}], "print(2)\n", "neither: the last"),
    (
        "```python\nclass Solution:\n    def sq(self, x):\n        return x * x\n```\n```python\nSolution().sq(2)\n```",
        "python",
        [{"sq", "Solution"}],
        "class Solution:\n    def sq(self, x):\n        return x * x\n",
        "a LeetCode Solution class",
    ),
    (
        "```python\nif True:\n    def sq(x):\n        return x\n```\n```python\nsq(2)\n```",
        "python",
        [{"sq"}],
        "if True:\n    def sq(x):\n        return x\n",
        "defined inside a top-level if",
    ),
    (
        "```cpp\nint main(){return 0;}\n```\nCall it:\n```cpp\nsolve(3);\n```",
        "cpp",
        [{"main"}],
        "int main(){return 0;}\n",
        "a C++ snippet without main",
    ),
    ("```python\ndef sq(x) return\n```\n```python\nsq(1)\n```", "python", [{"sq"}], "sq(1)\n", "no block parses"),
]


@pytest.mark.parametrize(
    ("completion", "language", "required", "expected", "why"), CHOICES, ids=[c[-1] for c in CHOICES]
)
def test_extract_code_skips_usage_examples(
    completion: str, language: str, required: list[set[str]], expected: str, why: str
) -> None:
    assert extract_code(completion, language, required=required) == expected, why


# (language, tests, names, why)
REQUIRED = [
    ("python", CallTests("sq", (CallCase((1,), 1),)), [{"sq", "Solution"}], "a call test's function or class"),
    ("python", AssertTests(test="def check(c):\n    pass\n", entry_point="sq"), [{"sq"}], "HumanEval"),
    (
        "python",
        AssertTests(test_list=("assert sq(2) == 4", "assert set(pairs([1])) == {1}")),
        [{"pairs"}, {"sq"}],
        "MBPP, builtins left out",
    ),
    (
        "python",
        AssertTests(test="def helper(x):\n    return x\nassert helper(sq(2)) == 4\n"),
        [{"sq"}],
        "what the test code defines itself is left out",
    ),
    (
        "python",
        AssertTests(test_list=("assert depth(root) == 2",), setup_code="root = Node(1)"),
        [{"depth"}],
        "names the setup code binds are left out",
    ),
    ("python", StdioTests((StdioCase(b"", b""),)), [], "a script"),
    ("cpp", StdioTests((StdioCase(b"", b""),)), [{"main"}], "C++"),
]


@pytest.mark.parametrize(("language", "tests", "names", "why"), REQUIRED, ids=[r[-1] for r in REQUIRED])
def test_required_names(language: str, tests: TestSpec, names: list[set[str]], why: str) -> None:
    assert required_names(language, tests) == [frozenset(n) for n in names], why


def test_resolve_limits() -> None:
    defaults, maxima = Limits(time_s=5, memory_mb=512), Limits(time_s=10, memory_mb=1024)
    assert resolve_limits(None, defaults, maxima) == defaults
    got = resolve_limits({"time_s": 100, "memory_mb": 256, "stack_mb": None}, defaults, maxima)
    assert (got.time_s, got.memory_mb, got.stack_mb) == (10, 256, defaults.stack_mb)
    with pytest.raises(ValueError, match="unknown limit 'cpu'"):
        resolve_limits({"cpu": 1}, defaults, maxima)


class _BrokenSandbox:
    """A sandbox whose every run fails on our side (e.g. the engine died)."""

    name = "broken"

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    @asynccontextmanager
    async def job(self, files: Mapping[str, bytes]) -> AsyncIterator[Any]:
        class _Job:
            async def exec(self, argv: Sequence[str], **kwargs: Any) -> ExecResult:
                return ExecResult.sandbox_error("the container vanished")

        yield _Job()


TESTS = {"type": "assert", "test_list": ["assert sq(2) == 4", "assert sq(3) == 9", "assert sq(-1) == 1"]}

STDIO = StdioTests((StdioCase(b"2 3\n", b"5\n"),))
CPP_SUM = "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n"
# (completion, tests, language the request did not name, why)
UNNAMED_LANGUAGE = [
    (f"```cpp\n{CPP_SUM}```", STDIO, "cpp", "the only block is C++"),
    (f"```c++\n{CPP_SUM}```\nOutput:\n```text\n5\n```", STDIO, "cpp", "an unsupported tag does not decide"),
    (f"<think>```python\ndraft\n```</think>\n```cpp\n{CPP_SUM}```", STDIO, "cpp", "a draft in the thinking"),
    (f"```cpp\n{CPP_SUM}```\n```python\nprint(5)\n```", STDIO, "python", "a Python block too: Python"),
    (f"```cpp\n{CPP_SUM}```\n```\nprint(5)\n```", STDIO, "python", "an untagged block is Python"),
    (f"```cpp\n{CPP_SUM}```", AssertTests(None, None, ("assert f() == 1",)), "python", "assert tests are Python"),
    ("no code at all", STDIO, "python", "nothing to go by"),
]


@pytest.mark.parametrize(
    ("completion", "tests", "language", "why"), UNNAMED_LANGUAGE, ids=[u[-1] for u in UNNAMED_LANGUAGE]
)
def test_program_language(completion: str, tests: TestSpec, language: str, why: str) -> None:
    assert program_language(completion, tests) == language


def test_extract_code_without_a_language() -> None:
    assert extract_code(f"```cpp\n{CPP_SUM}```", None) == CPP_SUM
    assert extract_code("```python\nprint(5)\n```", None) == "print(5)\n"


async def test_score_code_never_turns_our_failures_into_zero() -> None:
    completion = "```python\ndef sq(x):\n    return x * x\n```"
    broken = await score_code(completion, TESTS, CodeOptions(), _BrokenSandbox())  # type: ignore[arg-type]
    assert (broken.score, broken.status) == (None, "sandbox_error")
    missing = await score_code(completion, TESTS, CodeOptions(), None)
    assert (missing.score, missing.status) == (None, "sandbox_error")
    bad = await score_code(completion, {"type": "stdio", "cases": "x"}, CodeOptions(), None)
    assert (bad.score, bad.status) == (None, "grader_error")
    assert bad.detail is not None and "tests.stdio.cases" in bad.detail
    empty = await score_code(completion, {"type": "call", "fn_name": "f", "cases": []}, CodeOptions(), None)
    assert (empty.score, empty.status) == (None, "grader_error")  # code-024: never 1.0
    none = await score_code("I would write a function.", TESTS, CodeOptions(), None)
    assert (none.score, none.status) == (0.0, "no_answer")


async def test_score_code_runs_the_tests() -> None:
    sandbox = LocalSandbox(1)
    try:
        await sandbox.start()
    except SandboxUnavailable as exc:
        if IN_CI:
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        half = (
            "<think>```python\ndef sq(x):\n    return x * x\n```</think>\n```python\ndef sq(x):\n    return x * 2\n```"
        )
        score = await score_code(half, TESTS, CodeOptions(), sandbox)
        assert (score.score, score.status) == (pytest.approx(1 / 3), "ok")  # only sq(2) == 4 holds for x * 2
        assert score.info["cases"] == ["passed", "wrong_answer", "wrong_answer"]
        strict = await score_code(half, TESTS, CodeOptions(all_or_nothing=True), sandbox)
        assert strict.score == 0.0
        crash = await score_code("```python\ndef sq(x):\n    return x +\n```", TESTS, CodeOptions(), sandbox)
        assert (crash.score, crash.status, crash.info["verdict"]) == (0.0, "ok", "compile_error")
        # Issue 15: a C++-only completion with no language named runs as C++ (it was "no python block").
        cpp = f"```cpp\n{CPP_SUM}```"
        inferred = await score_code(cpp, STDIO, CodeOptions(infer_language=True), sandbox)
        assert (inferred.score, inferred.status, inferred.info["verdict"]) == (1.0, "ok", "passed")
        named = await score_code(cpp, STDIO, CodeOptions(language="python"), sandbox)
        assert (named.score, named.status) == (0.0, "no_answer")  # a language named is the language
    finally:
        await sandbox.close()
