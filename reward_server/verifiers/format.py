"""The format reward: is a completion in R1's layout ``<think>…</think>`` then the answer?

The layout follows DeepSeek-R1 (arXiv 2501.12948, Table 1): one think block, then the answer, bare or in
``<answer>…</answer>``, then nothing but blanks and end-of-turn tokens. Peers' regexes fail it in known
ways (see ``/work/shared/cases/format.jsonl``): no DOTALL, a lazy match that swallows a duplicated
closing tag, no room for a pre-filled ``<think>``, tags inside code counted, text after the answer
accepted. Here the completion is checked tag by tag instead, outside code spans (see :mod:`.markup`).

Every check is named, so a ``soft`` score is the share of checks passed, and the report says which failed.
The bare and the tagged layouts get the same seven checks, so their soft scores share one scale. Blank
means Unicode whitespace and the invisible characters (zero-width space, BOM ...), and every scan is linear
in the completion's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice

import regex

from reward_server.schemas.format import FormatParams
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.markup import Tag, code_spans, find_tags, in_spans

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


# Blank: Unicode whitespace, the default-ignorable code points (zero-width space and joiners, word joiner,
# BOM, soft hyphen, Hangul fillers, variation selectors...) and the Braille blank: all render as nothing,
# so a think block of "\u200b" is as empty as one of spaces.
_BLANK = r"\s\p{Default_Ignorable_Code_Point}\u2800"
_NON_BLANK = regex.compile(f"[^{_BLANK}]")
_LAST_NON_BLANK = regex.compile(f"(?r)[^{_BLANK}]")  # searched backwards from the end


def _is_blank(text: str) -> bool:
    return _NON_BLANK.search(text) is None


def _strip_blank(text: str) -> str:
    first = _NON_BLANK.search(text)
    if first is None:
        return ""
    last = _LAST_NON_BLANK.search(text)
    assert last is not None
    return text[first.start() : last.end()]


def _body_end(text: str, tokens: tuple[str, ...]) -> int:
    """Where the trailing run of blanks and end-of-turn ``tokens`` starts (``len(text)`` when none)."""
    end = len(text)
    while True:
        last = _LAST_NON_BLANK.search(text, 0, end)
        end = last.end() if last is not None else 0
        # An index, never a slice: trimming "<|im_end|>" * 20_000 by slices would copy the text each time.
        token = next((t for t in tokens if t and text.endswith(t, 0, end)), None)
        if token is None:
            return end
        end -= len(token)


def _end_of_turn_inside(text: str, start: int, end: int, tokens: tuple[str, ...], spans: list[tuple[int, int]]) -> bool:
    """Whether an end-of-turn token outside code occurs in ``text[start:end]``: what follows it is past the turn."""
    tokens = tuple(t for t in tokens if t)
    if not tokens:
        return False
    pattern = re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))
    return any(not in_spans(m.start(), spans) for m in pattern.finditer(text, start, end))


def _body_start(text: str, tokens: tuple[str, ...], think_tag: str) -> int:
    """Where the text starts after a leading run of blanks and start-of-turn ``tokens`` (role headers)."""
    # A token that is itself a think tag (think_tag "s" and "<s>") is the layout's, not a header.
    tokens = tuple(t for t in tokens if t and not find_tags(t, think_tag, []))
    start = 0
    while True:
        first = _NON_BLANK.search(text, start)
        if first is None:
            return len(text)
        token = next((t for t in tokens if text.startswith(t, first.start())), None)
        if token is None:
            return first.start()
        start = first.start() + len(token)


def _single(tags: list[Tag], closing: bool) -> Tag | None:
    """The tag of that kind if there is exactly one, canonical or not, else ``None``."""
    found = [t for t in tags if t.closing == closing]
    return found[0] if len(found) == 1 else None


def _one(tags: list[Tag], closing: bool) -> Tag | None:
    """The tag of that kind if there is exactly one and it is canonical, else ``None``."""
    tag = _single(tags, closing)
    return tag if tag is not None and tag.canonical else None


def _found(tags: list[Tag], closing: bool) -> str:
    """How many tags of that kind there are, and how many of them are misspelled (``<THINK>``, attributes)."""
    found = [t for t in tags if t.closing == closing]
    odd = sum(not t.canonical for t in found)
    return f"found {len(found)}" + (f" ({odd} misspelled: case, blanks, attributes or '/>')" if odd else "")


def check_format(response: str, params: FormatParams) -> FormatReport:
    """Check ``response`` against the layout that ``params`` describes, check by check.

    Every completion gets the same seven checks, in the bare layout as in the tagged one, so a soft score
    means the same in both (all must pass for the layout to hold):
        ``think_open``: exactly one canonical ``<think>``, with nothing but blanks and
            ``start_of_turn_tokens`` (role headers) before it; with ``think_prefilled``, no ``<think>`` at all.
        ``think_close``: exactly one canonical ``</think>``, after the opening tag. A single misspelled one
            (``</THINK>``) fails this check but still ends the thinking for the checks below.
        ``think_nonempty``: at least ``min_think_chars`` non-blank characters of thinking.
        ``answer_open`` / ``answer_close``: exactly one canonical ``<answer>`` after ``</think>`` and one
            ``</answer>`` after it; or, in the bare layout (no answer tag anywhere, allowed unless
            ``require_answer_tag``), a ``</think>`` for the bare answer to follow.
        ``answer_nonempty``: the answer has a non-blank character.
        ``nothing_else``: only blanks between ``</think>`` and ``<answer>``; after the answer only blanks and
            ``end_of_turn_tokens``; and no end-of-turn token before that trailing run (text after one is past
            the end of the turn).
    Blank means Unicode whitespace or an invisible character (zero-width space, BOM, ...). Tags and
    end-of-turn tokens inside fenced or inline code are text.
    """
    spans = code_spans(response)
    think = find_tags(response, params.think_tag, spans)
    answer_tags = find_tags(response, params.answer_tag, spans)
    body_end = _body_end(response, params.end_of_turn_tokens)
    checks: dict[str, bool] = {}
    problems: list[str] = []

    def check(name: str, passed: bool, problem: str) -> None:
        checks[name] = passed
        if not passed and problem not in problems:  # two checks failing for one reason share the clause
            problems.append(problem)

    think_name, answer_name = f"<{params.think_tag}>", f"<{params.answer_tag}>"
    n_open = sum(not t.closing for t in think)
    opener = _one(think, closing=False)
    if params.think_prefilled:
        start = 0
        check("think_open", n_open == 0, f"{think_name} is pre-filled but the completion opens it again")
    else:
        # Without an opening tag the thinking is read from the start, and a single misspelled one
        # (``<THINK>``) still ends the header, so a completion that only forgot or misspelled ``<think>`` loses
        # that one check, not the others too. Role headers (``<|im_start|>assistant``) may come first.
        any_opener = _single(think, closing=False)
        start = any_opener.end if any_opener else 0
        check(
            "think_open",
            opener is not None and opener.start == _body_start(response, params.start_of_turn_tokens, params.think_tag),
            f"expected one {think_name} at the start, "
            + ("found it after other text" if opener is not None else _found(think, closing=False)),
        )
    # The closing tag bounds the thinking even when misspelled (``</THINK>``, ``</think >``): that costs the
    # ``think_close`` check alone, so a soft score still tells the rest of the layout apart.
    bound = _single(think, closing=True)
    if bound is not None and bound.start < start:
        bound = None
    closer = bound if bound is not None and bound.canonical else None
    check("think_close", closer is not None, f"expected one </{params.think_tag}> after it, {_found(think, True)}")
    # Without one closing tag in place, where the thinking ends and the answer starts is unknown, so the
    # checks that need that boundary fail, all for that one reason (not "the thinking is empty" or "found no
    # answer tag" when there is thinking and an answer tag).
    unbounded = f"without one </{params.think_tag}> the thinking and the answer cannot be told apart"
    thinking = response[start : bound.start] if bound is not None else ""
    check(
        "think_nonempty",
        sum(1 for _ in islice(_NON_BLANK.finditer(thinking), params.min_think_chars)) >= params.min_think_chars,
        f"the thinking is empty (fewer than {params.min_think_chars} non-blank characters)" if bound else unbounded,
    )

    answer: str | None = None
    after = bound.end if bound is not None else body_end
    past_turn = _end_of_turn_inside(response, after, body_end, params.end_of_turn_tokens, spans)
    if answer_tags or params.require_answer_tag:
        a_open = _one(answer_tags, closing=False)
        a_close = _one(answer_tags, closing=True)
        a_open = a_open if a_open is not None and a_open.start >= after else None
        a_close = a_close if a_close is not None and a_open is not None and a_close.start >= a_open.end else None
        check(
            "answer_open",
            a_open is not None,
            f"expected one {answer_name} after the thinking, {_found(answer_tags, False)}" if bound else unbounded,
        )
        check(
            "answer_close",
            a_close is not None,
            f"expected one </{params.answer_tag}> after one {answer_name}, {_found(answer_tags, True)}"
            if bound
            else unbounded,
        )
        if a_open is not None and a_close is not None:
            answer = _strip_blank(response[a_open.end : a_close.start])
            stray = response[after : a_open.start] + response[a_close.end : max(body_end, a_close.end)]
        else:
            stray = ""
        check(
            "answer_nonempty",
            bool(answer),
            "the answer is empty" if a_open and a_close else "no answer tags in place" if bound else unbounded,
        )
        stray_blank = _is_blank(stray)
        check(
            "nothing_else",
            stray_blank and not past_turn,
            "text after an end-of-turn token" if stray_blank else "text outside the answer tags after the thinking",
        )
    else:
        # The bare layout: the answer is all that follows </think>, so the tag checks ask only for that.
        check("answer_open", bound is not None, unbounded)
        check("answer_close", bound is not None, unbounded)
        answer = _strip_blank(response[after:body_end]) if bound is not None else None
        check("answer_nonempty", bool(answer), "no answer after the thinking" if bound else unbounded)
        check("nothing_else", not past_turn, "text after an end-of-turn token")

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
