"""Code rewards: take the program out of a completion, run it against tests in the sandbox, score it.

Pure with respect to HTTP and settings: the sandbox, the limits and the options come in as arguments.
The reward is the fraction of test cases passed (or 1/0 with ``all_or_nothing``). A sandbox failure
gives ``score=None, status="sandbox_error"`` and unusable tests ``status="grader_error"``: neither may
be trained on as 0. A program that fails to compile, crashes or times out is the program's fault and
scores 0.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from reward_server.schemas.code import CodeAccuracyParams, CodeTests
from reward_server.verifiers.base import ComponentScore
from sandbox import Limits, Sandbox, Status, TestReport, TestSpec, get_language, run_tests

CodeBlock = Literal["last", "first", "none"]

_FENCE = re.compile(r"^[ \t]*```[ \t]*([^\s`]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)
_THINK_END = "</think>"
_TESTS: TypeAdapter[Any] = TypeAdapter(CodeTests)


@dataclass(frozen=True, slots=True)
class CodeOptions:
    """How a completion's code is picked and scored.

    Attributes:
        language: the language of the program and of the fenced block to pick (``python``, ``cpp``).
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
    code_block: CodeBlock = "last"
    after_think: bool = True
    all_or_nothing: bool = False
    early_stop: bool = False
    limits: Limits = field(default_factory=Limits)
    tail_bytes: int = 1024


def extract_code(
    completion: str, language: str, *, code_block: CodeBlock = "last", after_think: bool = True
) -> str | None:
    """The program in ``completion``: a fenced block (```` ```python ... ``` ````) of ``language``.

    Blocks tagged with the language or one of its aliases count; untagged blocks count only when no block
    is tagged with it; blocks of other languages never count. ``None`` when there is no such block.

    Raises:
        ValueError: unknown language.
    """
    names = get_language(language).names
    text = completion
    if after_think and _THINK_END in text:
        text = text.rsplit(_THINK_END, 1)[1]
    if code_block == "none":
        return text
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    tagged = [body for tag, body in blocks if tag in names]
    chosen = tagged or [body for tag, body in blocks if not tag]
    if not chosen:
        return None
    return chosen[-1] if code_block == "last" else chosen[0]


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
        language=params.language,
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
            ``options.language`` (after ``</think>``).
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
    try:
        code = extract_code(response, options.language, code_block=options.code_block, after_think=options.after_think)
    except ValueError as exc:
        return ComponentScore(None, str(Status.GRADER_ERROR), str(exc))
    if code is None:
        return ComponentScore(0.0, "no_answer", f"no ```{options.language} block in the completion")
    if sandbox is None:
        return ComponentScore(None, str(Status.SANDBOX_ERROR), "the code sandbox is not available on this server")
    report = await run_code_tests(code, spec, options, sandbox)
    return report_score(report, all_or_nothing=options.all_or_nothing)
