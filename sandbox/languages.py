"""The languages the sandbox compiles and runs. Adding one is one table entry.

A language has a source file name, an optional compile stage and a run stage, each an argv run in the
job's work directory inside the sandbox (so both need only what the sandbox image holds). A compile stage
that fails is reported as ``compile_error``, never as a wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass

PYTHON = "@python"
"""argv[0] for "``python3 SCRIPT ARGS``, in an interpreter forked from a warm one": a Python job then costs
a fork instead of an interpreter start (~10 ms, as much as a typical test itself). See ``_launcher.py``."""
PYTHON_SYNTAX_CHECK = "@python-syntax"
"""argv[0] of Python's compile stage: ``compile()`` the script in a forked warm interpreter and report
a syntax error as a compile error, running nothing."""


@dataclass(frozen=True, slots=True)
class Language:
    """One language.

    Attributes:
        name: the canonical name used in requests (``python``, ``cpp``).
        source_file: the file the program's source is written to, in the job's work directory.
        run: argv of the run stage.
        compile: argv of the compile stage, or ``None``.
        aliases: other names accepted in requests and as Markdown fence tags (```` ```py ````).
        harness: whether assert- and call-based tests (which need an in-language harness) are supported.
    """

    name: str
    source_file: str
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    aliases: tuple[str, ...] = ()
    harness: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        Language(
            name="python",
            source_file="main.py",
            compile=(PYTHON_SYNTAX_CHECK, "main.py"),
            run=(PYTHON, "main.py"),
            aliases=("python3", "py"),
            harness=True,
        ),
        Language(
            name="cpp",
            source_file="main.cpp",
            # ONLINE_JUDGE is defined as on Codeforces: competitive code often reads files without it.
            compile=("g++", "-std=c++17", "-O2", "-pipe", "-DONLINE_JUDGE", "-o", "main", "main.cpp"),
            run=("./main",),
            aliases=("c++", "cxx", "cc", "cpp17"),
        ),
    )
}

_BY_NAME = {name: lang for lang in LANGUAGES.values() for name in lang.names}


def get_language(name: str) -> Language:
    """The language called ``name`` (case-insensitive, aliases allowed).

    Raises:
        ValueError: unknown language; the message lists the supported names.
    """
    lang = _BY_NAME.get(name.strip().lower())
    if lang is None:
        raise ValueError(f"unsupported language {name!r}; supported: {', '.join(sorted(_BY_NAME))}")
    return lang
