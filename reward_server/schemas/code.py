"""Request/result models of ``POST /v1/code/run`` and ``POST /v1/code/test`` (and code items' ``tests``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from sandbox import (
    AssertTests,
    CallCase,
    CallTests,
    RunResult,
    StdioCase,
    StdioTests,
    TestReport,
    TestSpec,
    get_language,
    utf8,
)

_STATUS_DOC = (
    "`ok` (run only), `passed`, `wrong_answer`, `runtime_error`, `timeout`, `memory_limit`, `output_limit`, "
    "`compile_error`, `skipped`, `sandbox_error` (our fault: never a wrong answer) or `grader_error` "
    "(the tests cannot be graded)."
)


LanguageName = Annotated[str, AfterValidator(lambda value: get_language(value).name)]
"""A supported language (aliases allowed), stored under its canonical name; unknown ones are a 422."""


class CodeLimits(BaseModel):
    """Per-request limits. Each is capped by the server's maximum (``RLVR_SANDBOX_MAX_*``)."""

    model_config = ConfigDict(extra="forbid")

    time_s: float | None = Field(
        None,
        gt=0,
        # 600 s is the most any server allows (RLVR_SANDBOX_MAX_TIME_S's bound): past it, a 422 rather than a
        # silent cap (1e12 is a mistake, not a wish to wait the server's maximum).
        le=600,
        allow_inf_nan=False,  # NaN would read as "should be greater than 0"; infinity is no limit at all
        description="CPU-time limit per run / test case, in seconds (all the program's processes), at most 600 "
        "(else 422), then capped by the server's `RLVR_SANDBOX_MAX_TIME_S` (30 s by default). A run that "
        "uses no CPU (asleep, blocked) ends after this + 0.5 s of wall-clock time not spent waiting for a CPU.",
    )
    memory_mb: int | None = Field(None, gt=0, description="Memory (address space) limit, in MiB.")
    max_processes: int | None = Field(None, gt=0, description="Processes and threads at once.")
    output_bytes: int | None = Field(None, gt=0, description="stdout (and stderr) kept per run; more is output_limit.")
    stack_mb: int | None = Field(None, gt=0, description="Stack size, in MiB (deep recursion needs more).")


class CodeAccuracyParams(BaseModel):
    """Options of the ``accuracy`` component for ``task: "code"`` items of ``POST /v1/rewards``."""

    model_config = ConfigDict(extra="forbid")

    language: LanguageName | None = Field(
        None,
        description="Language of the program and of the fenced block to take. Unset: `python`, or, for stdio "
        "tests, the language of the completion's fenced blocks when all of them are fenced as one other "
        "supported language (```` ```cpp ````).",
    )
    code_block: Literal["last", "first", "none"] = Field(
        "last", description="Which fenced block is the program (`none`: the whole completion)."
    )
    after_think: bool = Field(True, description="Look for the block only after the last `</think>`.")
    all_or_nothing: bool = Field(False, description="Reward 1 only if every case passes (default: fraction).")
    early_stop: bool = Field(False, description="Stop at the first failing case.")
    limits: CodeLimits | None = Field(None, description="Per-item limits, capped by the server's maxima.")


class _Program(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelled field (`stdinn`) is a 422, never a silent default

    language: LanguageName = Field(
        description="`python` or `cpp` (aliases: python3, py, c++, cxx, cc).", examples=["python"]
    )
    code: str = Field(description="The program's source.", examples=["print(sum(map(int, input().split())))"])
    limits: CodeLimits | None = Field(None, description="Per-request limits, capped by the server's maxima.")


class CodeRunRequest(_Program):
    """One program, run once."""

    stdin: str = Field("", description="Standard input.", examples=["3 4\n"])


class CodeRunResult(BaseModel):
    status: str = Field(description=_STATUS_DOC, examples=["ok"])
    stdout: str = Field(description="Standard output (the first `limits.output_bytes`).")
    stderr: str = Field(
        description="The end of standard error (or the compiler's messages), at most the server's "
        "`RLVR_SANDBOX_TAIL_BYTES` (1024 at least for the compiler's)."
    )
    stdout_truncated: bool = Field(False, description="The program wrote more stdout than `stdout` holds.")
    stderr_truncated: bool = Field(
        False, description="The program (or the compiler) wrote more to stderr than `stderr` holds: its start is cut."
    )
    exit_code: int | None = Field(None, description="Exit code; null when killed by a signal or not run.")
    signal: int | None = Field(None, description="The signal that ended the program, if any.")
    time_s: float = Field(0.0, description="Wall-clock run time, in seconds (queueing excluded).")
    cpu_s: float = Field(0.0, description="CPU time of the program's processes, in seconds (what `time_s` limits).")
    cpu_wait_s: float = Field(0.0, description="Time the run waited for a CPU taken by other work, in seconds.")
    memory_mb: float = Field(0.0, description="Peak resident memory, in MiB.")
    detail: str | None = Field(None, description="Why, in words, when status is not `ok`.")

    @classmethod
    def from_result(cls, result: RunResult, tail_bytes: int) -> CodeRunResult:
        run = result.run
        if run is None:  # the compile stage failed: its messages are the useful output
            stage = result.compile
            stderr, cut = _tail(stage.stderr, max(tail_bytes, 1024)) if stage is not None else (b"", False)
            return cls(
                status=str(result.status),
                stdout="",
                stderr=stderr.decode("utf-8", "replace"),
                stderr_truncated=cut or (stage is not None and stage.stderr_truncated),
                detail=result.detail or "compilation failed",
            )
        stderr, cut = _tail(run.stderr, tail_bytes)
        return cls(
            status=str(result.status),
            stdout=run.stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            stdout_truncated=run.stdout_truncated,
            stderr_truncated=cut or run.stderr_truncated,
            exit_code=run.exit_code,
            signal=run.signal,
            time_s=run.time_s,
            cpu_s=run.cpu_s,
            cpu_wait_s=run.cpu_wait_s,
            memory_mb=run.memory_mb,
            detail=run.detail,
        )


def _tail(data: bytes, limit: int) -> tuple[bytes, bool]:
    """The last ``limit`` bytes of ``data``, and whether that cut anything."""
    return (data[-limit:] if limit else b""), len(data) > limit


class StdioCaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str = Field("", description="Standard input of the case.")
    output: str = Field(description="Expected standard output.")


class StdioTestsIn(BaseModel):
    """stdin/stdout cases (APPS, CodeContests, LiveCodeBench, Codeforces)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["stdio"]
    cases: list[StdioCaseIn]
    comparator: Literal["exact", "whitespace", "float"] = Field(
        "float",
        description="`float` (default, what competitive-programming judges and LiveCodeBench's fixed grader "
        "accept): lines normalised as for `whitespace`, then token by token, integers equal and other "
        "numbers within `abs_tol` or `rel_tol`; `whitespace`: CRLF, trailing spaces and trailing newlines "
        "normalised, same line count, lines equal; `exact`: bytes.",
    )
    abs_tol: float = Field(1e-6, ge=0, allow_inf_nan=False)
    rel_tol: float = Field(1e-6, ge=0, allow_inf_nan=False)

    def to_spec(self) -> StdioTests:
        cases = tuple(StdioCase(utf8(c.input), utf8(c.output)) for c in self.cases)
        return StdioTests(cases, self.comparator, abs_tol=self.abs_tol, rel_tol=self.rel_tol)


class AssertTestsIn(BaseModel):
    """Assert-based tests: HumanEval (`test` defining `check`, with `entry_point`) or MBPP (`test_list`)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["assert"]
    test: str | None = Field(None, description="Test code; with `entry_point`, `check(entry_point)` is called.")
    entry_point: str | None = Field(None, description="The function under test (HumanEval).")
    test_list: list[str] = Field(default_factory=list, description="Assert statements, one case each (MBPP).")
    setup_code: str = Field("", description="Code run after the program, before the tests (MBPP test_setup_code).")

    def to_spec(self) -> AssertTests:
        return AssertTests(self.test, self.entry_point, tuple(self.test_list), self.setup_code)


class CallCaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: list[Any] = Field(description="Positional arguments, as JSON.")
    output: Any = Field(description="Expected return value, as JSON (a tuple equals a list).")


class CallTestsIn(BaseModel):
    """Call-based tests (APPS/TACO call-based, LiveCodeBench functional)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["call"]
    fn_name: str = Field(description="Function to call (a top-level function or a method of `Solution`).")
    cases: list[CallCaseIn]
    abs_tol: float = Field(0.0, ge=0, allow_inf_nan=False)
    rel_tol: float = Field(1e-9, ge=0, allow_inf_nan=False)

    def to_spec(self) -> CallTests:
        cases = tuple(CallCase(tuple(c.input), c.output) for c in self.cases)
        return CallTests(self.fn_name, cases, abs_tol=self.abs_tol, rel_tol=self.rel_tol)


def _tests_not_a_list(value: Any) -> Any:
    """A list where the test object belongs gets a 422 that shows the object's shape (pydantic's own message
    only says "a valid dictionary")."""
    if isinstance(value, list):
        raise ValueError(
            "tests must be an object with a 'type', not a list: {'type': 'assert', 'test_list': ['assert f(1) == "
            "2']}, {'type': 'stdio', 'cases': [{'input': '1 2', 'output': '3'}]} or {'type': 'call', 'fn_name': "
            "'f', 'cases': [{'input': [1], 'output': 2}]}"
        )
    return value


CodeTests = Annotated[
    StdioTestsIn | AssertTestsIn | CallTestsIn, Field(discriminator="type"), BeforeValidator(_tests_not_a_list)
]


class CodeTestRequest(_Program):
    """One program against a test list."""

    tests: CodeTests
    early_stop: bool = Field(False, description="Stop at the first failing case; the rest are `skipped`.")
    all_or_nothing: bool = Field(False, description="Reward 1 only if every case passes (default: fraction).")

    def spec(self) -> TestSpec:
        return self.tests.to_spec()


class CaseOut(BaseModel):
    index: int
    status: str = Field(description=_STATUS_DOC)
    time_s: float = Field(description="Wall-clock time of the case, in seconds.")
    cpu_s: float = Field(0.0, description="CPU time of the program during the case, in seconds (what `time_s` limits).")
    cpu_wait_s: float = Field(0.0, description="Time the case waited for a CPU taken by other work, in seconds.")
    memory_mb: float = Field(description="Peak resident memory, in MiB.")
    exit_code: int | None = None
    stdout: str = Field("", description="The end of stdout, cut to the server's tail limit.")
    stderr: str = Field("", description="The end of stderr, cut to the server's tail limit.")
    detail: str | None = Field(None, description="What differed or failed.")


class CodeTestResult(BaseModel):
    status: str = Field(description="`passed`, the status of the first failing case, or " + _STATUS_DOC)
    passed: int
    total: int
    reward: float | None = Field(description="Fraction passed (or 1/0 with all_or_nothing); null: not scoreable.")
    cases: list[CaseOut]
    detail: str | None = None

    @classmethod
    def from_report(cls, report: TestReport, *, all_or_nothing: bool) -> CodeTestResult:
        return cls(
            status=str(report.status),
            passed=report.passed,
            total=report.total,
            reward=report.reward(all_or_nothing=all_or_nothing),
            cases=[CaseOut.model_validate(c, from_attributes=True) for c in report.cases],
            detail=report.detail,
        )
