"""The format reward: is a completion in R1's layout ``<think>…</think>`` then the answer?

The layout follows DeepSeek-R1 (arXiv 2501.12948, Table 1): one think block, then the answer, bare or in
``<answer>…</answer>``, then nothing but blanks and end-of-turn tokens. Peers' regexes fail it in known
ways (see ``/work/shared/cases/format.jsonl``): no DOTALL, a lazy match that swallows a duplicated
closing tag, no room for a pre-filled ``<think>``, tags inside code counted, text after the answer
accepted. Here the completion is checked tag by tag instead, outside code spans (see :mod:`.markup`).

Every check is named, so a ``soft`` score is the share of checks passed, and the report says which failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from reward_server.schemas.format import FormatParams
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.markup import Tag, code_spans, find_tags

__all__ = ["FormatReport", "check_format", "score_format"]


@dataclass(frozen=True, slots=True)
class FormatReport:
    """The outcome of checking one completion.

    Attributes:
        checks: each layout check, in order, and whether it passed.
        problems: one clause per failed check.
        answer: the extracted answer (stripped) when every check passed, else ``None``.
    """

    checks: dict[str, bool]
    problems: tuple[str, ...]
    answer: str | None

    @property
    def ok(self) -> bool:
        return all(self.checks.values())


def _strip_end_of_turn(text: str, tokens: tuple[str, ...]) -> str:
    """``text`` without any trailing run of blanks and end-of-turn tokens."""
    while True:
        text = text.rstrip()
        token = next((t for t in tokens if t and text.endswith(t)), None)
        if token is None:
            return text
        text = text[: -len(token)]


def _one(tags: list[Tag], closing: bool) -> Tag | None:
    """The tag of that kind if there is exactly one and it is canonical, else ``None``."""
    found = [t for t in tags if t.closing == closing]
    return found[0] if len(found) == 1 and found[0].canonical else None


def check_format(response: str, params: FormatParams) -> FormatReport:
    """Check ``response`` against the layout that ``params`` describes, check by check.

    The checks (all must pass for the layout to hold):
        ``think_open``: exactly one canonical ``<think>``, with nothing but blanks before it; with
            ``think_prefilled``, no ``<think>`` at all.
        ``think_close``: exactly one canonical ``</think>``, after the opening tag.
        ``think_nonempty``: at least ``min_think_chars`` non-blank characters of thinking.
        ``answer_open`` / ``answer_close`` (when the answer tag is used or required): exactly one canonical
            ``<answer>`` after ``</think>`` and one ``</answer>`` after it.
        ``answer_nonempty``: the answer has a non-blank character.
        ``nothing_else``: only blanks between ``</think>`` and ``<answer>``, and after the answer only
            blanks and ``end_of_turn_tokens``.
    Tags inside fenced or inline code are text, not tags.
    """
    spans = code_spans(response)
    think = find_tags(response, params.think_tag, spans)
    answer_tags = find_tags(response, params.answer_tag, spans)
    body = _strip_end_of_turn(response, params.end_of_turn_tokens)
    checks: dict[str, bool] = {}
    problems: list[str] = []

    def check(name: str, passed: bool, problem: str) -> None:
        checks[name] = passed
        if not passed:
            problems.append(problem)

    think_name, answer_name = f"<{params.think_tag}>", f"<{params.answer_tag}>"
    n_open = sum(not t.closing for t in think)
    n_close = sum(t.closing for t in think)
    opener = _one(think, closing=False)
    closer = _one(think, closing=True)
    if params.think_prefilled:
        start = 0
        check("think_open", n_open == 0, f"{think_name} is pre-filled but the completion opens it again")
    else:
        # Without a usable opening tag the thinking is read from the start, so a completion that only
        # forgot ``<think>`` loses that one check, not the others too.
        start = opener.end if opener else 0
        check(
            "think_open",
            opener is not None and not response[: opener.start].strip(),
            f"expected one {think_name} at the start, found {n_open} opening tag(s)"
            + (" after other text" if opener is not None else ""),
        )
    if closer is not None and closer.start < start:
        closer = None
    check("think_close", closer is not None, f"expected one </{params.think_tag}> after it, found {n_close}")
    thinking = response[start : closer.start] if closer is not None else ""
    check(
        "think_nonempty",
        len("".join(thinking.split())) >= params.min_think_chars,
        f"the thinking is empty (fewer than {params.min_think_chars} non-blank characters)",
    )

    answer: str | None = None
    after = closer.end if closer is not None else len(body)
    if answer_tags or params.require_answer_tag:
        a_open = _one(answer_tags, closing=False)
        a_close = _one(answer_tags, closing=True)
        a_open = a_open if a_open is not None and a_open.start >= after else None
        a_close = a_close if a_close is not None and a_open is not None and a_close.start >= a_open.end else None
        check(
            "answer_open",
            a_open is not None,
            f"expected one {answer_name} after the thinking, found {sum(not t.closing for t in answer_tags)}",
        )
        check(
            "answer_close",
            a_close is not None,
            f"expected one </{params.answer_tag}> after it, found {sum(t.closing for t in answer_tags)}",
        )
        if a_open is not None and a_close is not None:
            answer = response[a_open.end : a_close.start].strip()
            stray = response[after : a_open.start] + body[a_close.end :]
        else:
            stray = ""
        check("answer_nonempty", bool(answer), "the answer is empty")
        check("nothing_else", not stray.strip(), "text outside the answer tags after the thinking")
    else:
        answer = body[after:].strip() if closer is not None else None
        check("answer_nonempty", bool(answer), "no answer after the thinking")

    ok = all(checks.values())
    return FormatReport(checks=checks, problems=tuple(problems), answer=answer if ok else None)


def score_format(response: str, params: FormatParams) -> ComponentScore:
    """The format component: how well ``response`` follows R1's layout.

    Returns:
        ``score`` 1.0 when every check of :func:`check_format` passes. Otherwise 0.0 in ``strict`` mode,
        and the share of passed checks (< 1.0) in ``soft`` mode, so an empty think block always scores
        below real thinking. ``status`` is ``ok`` when the layout holds, else ``bad_format``; the score is
        never ``None``. ``info`` holds ``format_ok``, ``answer`` (the extracted answer, or ``None``) and
        ``checks``.
    """
    report = check_format(response, params)
    if report.ok:
        score = 1.0
    elif params.mode == "soft":
        score = sum(report.checks.values()) / len(report.checks)
    else:
        score = 0.0
    return ComponentScore(
        score=score,
        status="ok" if report.ok else "bad_format",
        detail="; ".join(report.problems) or None,
        info={"format_ok": report.ok, "answer": report.answer, "checks": report.checks},
    )
