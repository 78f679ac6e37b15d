"""Code rewards: take the program out of a completion, run it against tests in the sandbox, score it.

Pure with respect to HTTP and settings: the sandbox, the limits and the options come in as arguments.
The reward is the fraction of test cases passed (or 1/0 with ``all_or_nothing``). A sandbox failure
gives ``score=None, status="sandbox_error"`` and unusable tests ``status="grader_error"``: neither may
be trained on as 0. A program that fails to compile, crashes or times out is the program's fault and
scores 0.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import re
import textwrap
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from reward_server.schemas.code import CodeAccuracyParams, CodeTests
from reward_server.verifiers.base import ComponentScore
from sandbox import (
    AssertTests,
    CallTests,
    Limits,
    Sandbox,
    Status,
    StdioTests,
    TestReport,
    TestSpec,
    get_language,
    run_tests,
)

CodeBlock = Literal["last", "first", "none"]

_OPENING_FENCE = re.compile(r"(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)")
_THINK_END = "</think>"
_TESTS: TypeAdapter[Any] = TypeAdapter(CodeTests)
_BUILTIN_NAMES = frozenset(dir(builtins))
_CPP_MAIN = re.compile(r"\bmain\s*\(")


@dataclass(frozen=True, slots=True)
class CodeOptions:
    """How a completion's code is picked and scored.

    Attributes:
        language: the language of the program and of the fenced block to pick (``python``, ``cpp``).
        infer_language: the request named no language: for stdin/stdout tests, a completion whose fenced
            blocks are all of one other supported language is run in that language (see
            :func:`program_language`); else ``language``.
        code_block: which fenced block of that language holds the program: the ``last`` (default, the
            final answer), the ``first``, or ``none`` (the whole text is the program).
        after_think: look for the block only after the last ``</think>`` when there is one, so a draft
            in the reasoning is not graded as the answer.
        all_or_nothing: reward 1 only when every case passes, else 0 (default: fraction passed).
        early_stop: stop at the first failing case (faster; the rest are ``skipped``).
        limits: resource limits of each run (already capped by the server's maxima).
        tail_bytes: stdout/stderr kept per case in the result.
    """

    language: str = "python"
    infer_language: bool = False
    code_block: CodeBlock = "last"
    after_think: bool = True
    all_or_nothing: bool = False
    early_stop: bool = False
    limits: Limits = field(default_factory=Limits)
    tail_bytes: int = 1024


@dataclass(frozen=True, slots=True)
class FencedBlock:
    """One fenced code block of a Markdown text: its language tag (lower case, ``""`` when untagged) and
    its text, as Markdown would show it."""

    tag: str
    body: str


def fenced_blocks(text: str) -> list[FencedBlock]:
    """The fenced code blocks of ``text``, in order, read as CommonMark reads them.

    A block opens with a line of three or more backticks or tildes, optionally indented (a block inside a
    list item) and followed by an info string whose first word is the language (```` ```python ````,
    ``~~~py``, ```` ```python title=sol.py ````, ``{.python}``); a backtick fence's info string has no
    backtick. It closes at the first line of the same character, at least as long, and nothing else, so
    a ```` ```` ```` block may hold ```` ``` ```` lines. The opening fence's indentation is removed from
    each line of the block (then any indentation common to every line, which no program can start with).
    An unclosed block (a truncated completion) is not a block.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    blocks: list[FencedBlock] = []
    i = 0
    while i < len(lines):
        opening = _OPENING_FENCE.fullmatch(lines[i])
        i += 1
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        body: list[str] = []
        while i < len(lines) and not _closes(lines[i], fence):
            line = lines[i]
            body.append(line[min(indent, len(line) - len(line.lstrip(" \t"))) :])
            i += 1
        if i == len(lines):
            break  # never closed: the rest of the text is inside it, and it is not a block
        i += 1
        words = opening["info"].split()
        tag = words[0].strip("{}.").split(":")[0].lower() if words else ""
        blocks.append(FencedBlock(tag, textwrap.dedent("".join(line + "\n" for line in body))))
    return blocks


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip(" \t")
    return len(stripped) >= len(fence) and stripped == fence[0] * len(stripped)


def _has_code(body: str) -> bool:
    """Whether a block holds a line that is not blank or a ``#`` / ``//`` comment: ``# run: python main.py <
    in.txt`` is a note, not a program. (A C++ block of nothing but ``#include`` lines has no ``main`` and
    could not be the answer either.)"""
    return any(line.strip() and not line.lstrip().startswith(("#", "//")) for line in body.splitlines())


def _python_names(code: str) -> set[str] | None:
    """The names a Python program binds at its top level (also in top-level ``if``/``try``/``with``
    blocks), or ``None`` when it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    names: set[str] = set()
    statements = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
            for part in ("body", "orelse", "finalbody", "handlers"):
                statements.extend(getattr(node, part, []))
        elif isinstance(node, ast.ExceptHandler):
            statements.extend(node.body)
    return names


def _cpp_names(code: str) -> set[str] | None:
    return {"main"} if _CPP_MAIN.search(code) else set()


_DEFINED_NAMES: dict[str, Callable[[str], set[str] | None]] = {"python": _python_names, "cpp": _cpp_names}


def required_names(language: str | None, tests: TestSpec) -> list[frozenset[str]]:
    """What the program must define for ``tests`` to call it: each set holds alternatives, one of which
    must be defined (a call test's function, or the ``Solution`` class that has it).

    Python: the call tests' ``fn_name``, HumanEval's ``entry_point``, or the functions that assert code
    (MBPP's ``test_list``) calls and neither defines itself nor finds among the builtins. C++: ``main``.
    Nothing for Python stdin/stdout programs. ``None`` is Python.
    """
    if get_language(language or "python").name == "cpp":
        return [frozenset({"main"})]
    if isinstance(tests, CallTests):
        return [frozenset({tests.fn_name, "Solution"})]
    if not isinstance(tests, AssertTests):
        return []
    if tests.entry_point and tests.test:
        return [frozenset({tests.entry_point})]
    called: set[str] = set()
    own = _python_names(tests.setup_code) or set()
    for source in tests.cases:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        own |= _python_names(source) or set()
        called.update(n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name))
    return [frozenset({name}) for name in sorted(called - own - _BUILTIN_NAMES)]


def program_language(completion: str, tests: TestSpec | None = None, *, after_think: bool = True) -> str:
    """The language of a completion's program when the request names none: ``python``, unless every fenced
    block with code is fenced as one other supported language (```` ```cpp ````), and the tests, if given,
    are stdin/stdout ones (assert and call tests run in the Python harness). A block of an unsupported
    language (```` ```text ````, ```` ```bash ````) does not decide; an untagged block is Python."""
    if tests is not None and not isinstance(tests, StdioTests):
        return "python"
    if after_think and _THINK_END in completion:
        completion = completion.rsplit(_THINK_END, 1)[1]
    python = get_language("python")
    found: set[str] = set()
    for block in fenced_blocks(completion):
        if not _has_code(block.body):
            continue
        if not block.tag or block.tag in python.names:
            return python.name
        try:
            found.add(get_language(block.tag).name)
        except ValueError:
            continue
    return found.pop() if len(found) == 1 else python.name


def extract_code(
    completion: str,
    language: str | None,
    *,
    code_block: CodeBlock = "last",
    after_think: bool = True,
    required: Sequence[Collection[str]] = (),
) -> str | None:
    """The program in ``completion``: a fenced block of ``language`` (see :func:`fenced_blocks`).

    Blocks tagged with the language or one of its aliases count; untagged blocks count only when no block
    is tagged with it; blocks of other languages and empty or comment-only blocks never count. Of those, the ``last``
    (default) or ``first`` is the program, except that with ``required`` (see :func:`required_names`) a
    block that defines what the tests call wins over one that does not: a last block that only shows how
    to call the function (``print(sq(3))``) is a usage example, not the answer. ``None`` when there is no
    such block. ``language=None`` takes the language :func:`program_language` finds.

    Raises:
        ValueError: unknown language.
    """
    lang = get_language(language or program_language(completion, after_think=after_think))
    text = completion
    if after_think and _THINK_END in text:
        text = text.rsplit(_THINK_END, 1)[1]
    if code_block == "none":
        return text
    blocks = [b for b in fenced_blocks(text) if _has_code(b.body)]
    chosen = [b.body for b in blocks if b.tag in lang.names] or [b.body for b in blocks if not b.tag]
    if required and chosen:
        defines = _DEFINED_NAMES.get(lang.name, lambda code: None)
        complete = [code for code in chosen if _defines_all(defines(code), required)]
        chosen = complete or chosen
    if not chosen:
        return None
    return chosen[-1] if code_block == "last" else chosen[0]


def _defines_all(names: set[str] | None, required: Sequence[Collection[str]]) -> bool:
    return names is not None and all(any(name in names for name in alternatives) for alternatives in required)


def resolve_limits(requested: Mapping[str, Any] | None, defaults: Limits, maxima: Limits) -> Limits:
    """The limits of a request: its own values where given, else ``defaults``, all capped by ``maxima``.

    Raises:
        ValueError: an unknown field name.
    """
    values = {k: v for k, v in (requested or {}).items() if v is not None}
    known = {f.name for f in dataclasses.fields(Limits)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown limit {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return dataclasses.replace(defaults, **values).capped(maxima)


def code_options(params: CodeAccuracyParams, defaults: Limits, maxima: Limits, tail_bytes: int = 1024) -> CodeOptions:
    """The :class:`CodeOptions` of a rewards item's ``accuracy.code`` parameters."""
    requested = params.limits.model_dump() if params.limits is not None else None
    return CodeOptions(
        language=params.language or "python",
        infer_language=params.language is None,
        code_block=params.code_block,
        after_think=params.after_think,
        all_or_nothing=params.all_or_nothing,
        early_stop=params.early_stop,
        limits=resolve_limits(requested, defaults, maxima),
        tail_bytes=tail_bytes,
    )


def report_score(report: TestReport, *, all_or_nothing: bool = False) -> ComponentScore:
    """A :class:`TestReport` as a reward component."""
    score = report.reward(all_or_nothing=all_or_nothing)
    info: dict[str, Any] = {
        "verdict": str(report.status),
        "passed": report.passed,
        "total": report.total,
        "cases": [str(c.status) for c in report.cases],
    }
    if score is None:
        return ComponentScore(None, str(report.status), report.detail, info)
    first_failure = next((c for c in report.cases if c.status is not Status.PASSED), None)
    return ComponentScore(score, "ok", first_failure.detail if first_failure else None, info)


async def run_code_tests(code: str, tests: TestSpec, options: CodeOptions, sandbox: Sandbox) -> TestReport:
    """Run ``code`` against ``tests`` in ``sandbox`` (see :func:`sandbox.run_tests`)."""
    return await run_tests(
        sandbox,
        options.language,
        code,
        tests,
        limits=options.limits,
        early_stop=options.early_stop,
        tail_bytes=options.tail_bytes,
    )


async def score_code(
    response: str, tests: Mapping[str, Any] | TestSpec, options: CodeOptions, sandbox: Sandbox | None
) -> ComponentScore:
    """The ``accuracy`` component of a ``task: "code"`` item of ``POST /v1/rewards``.

    Args:
        response: the completion; its program is the ``options.code_block`` fenced block of
            ``options.language`` (after ``</think>``) that defines what the tests call (see
            :func:`extract_code`).
        tests: the item's ``tests`` in their JSON form (``{"type": "stdio"|"assert"|"call", ...}``) or parsed.
        options: language, extraction, scoring and limits.
        sandbox: the app's sandbox, or ``None`` when it is unavailable.

    Returns:
        ``score`` = fraction of cases passed (or 1/0 with ``all_or_nothing``) with status ``ok``;
        ``0.0`` with status ``no_answer`` when the completion holds no program;
        ``None`` with ``grader_error`` (tests empty or malformed) or ``sandbox_error`` (the sandbox failed
        or is unavailable). Never raises for bad input.
    """
    try:
        spec = tests if not isinstance(tests, Mapping) else _TESTS.validate_python(tests).to_spec()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("tests", *first["loc"]))
        return ComponentScore(None, str(Status.GRADER_ERROR), f"bad tests: {where}: {first['msg']}")
    if not spec.cases:
        return ComponentScore(None, str(Status.GRADER_ERROR), "the test list is empty: nothing would be checked")
    if options.infer_language:
        # "```cpp" as the only block of a completion with no language named: run it as C++, not "no python".
        language = program_language(response, spec, after_think=options.after_think)
        options = dataclasses.replace(options, language=language, infer_language=False)
    try:
        code = extract_code(
            response,
            options.language,
            code_block=options.code_block,
            after_think=options.after_think,
            required=required_names(options.language, spec),
        )
    except ValueError as exc:
        return ComponentScore(None, str(Status.GRADER_ERROR), str(exc))
    if code is None:
        return ComponentScore(0.0, "no_answer", f"no ```{options.language} block in the completion")
    if sandbox is None:
        return ComponentScore(None, str(Status.SANDBOX_ERROR), "the code sandbox is not available on this server")
    report = await run_code_tests(code, spec, options, sandbox)
    return report_score(report, all_or_nothing=options.all_or_nothing)
