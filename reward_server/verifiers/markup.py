"""Where the code is in a completion, and where its layout tags are.

Shared by the format and language verifiers: both must ignore a tag that the model wrote inside code
(``print("</think>")`` is not the end of the thinking), and the language verifier also needs the chain of
thought (the ``<think>`` part).

Code, as recognised here (a deliberate subset of CommonMark):

- A fenced block opens on a line that starts with up to three spaces and then three or more backticks or
  tildes, and closes on a line of the same character, at least as long. An unclosed fence runs to the end
  of the text, as in CommonMark, so a model cannot open a fence and have its tags read as layout.
- An inline span is a run of N backticks closed by the next run of exactly N backticks *on the same line*.
  CommonMark lets a span cross lines within a paragraph; we do not, so one stray backtick in the thinking
  cannot hide the real ``</think>`` on a later line.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

__all__ = ["Tag", "chain_of_thought", "code_spans", "find_tags", "in_spans"]

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_BACKTICKS = re.compile(r"`+")


def code_spans(text: str) -> list[tuple[int, int]]:
    """Return the sorted, non-overlapping ``(start, end)`` character ranges of fenced and inline code."""
    spans: list[tuple[int, int]] = []
    fence: tuple[str, int, int] | None = None  # (char, length, start offset) of the open fence
    offset = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if fence is not None:
            char, length, start = fence
            stripped = body.strip()
            indent = len(body) - len(body.lstrip(" "))
            if indent <= 3 and stripped and set(stripped) == {char} and len(stripped) >= length:
                spans.append((start, offset + len(body)))
                fence = None
        else:
            match = _FENCE_OPEN.match(body)
            # CommonMark: a backtick fence's info string may not contain a backtick.
            if match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
                fence = (match.group(1)[0], len(match.group(1)), offset)
            else:
                spans.extend((offset + a, offset + b) for a, b in _inline_spans(body))
        offset += len(line)
    if fence is not None:
        spans.append((fence[2], len(text)))
    return spans


def _inline_spans(line: str) -> list[tuple[int, int]]:
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(line)]
    spans = []
    i = 0
    while i < len(runs):
        start, end = runs[i]
        width = end - start
        closer = next((j for j in range(i + 1, len(runs)) if runs[j][1] - runs[j][0] == width), None)
        if closer is None:
            i += 1  # an unmatched run is literal text
            continue
        spans.append((start, runs[closer][1]))
        i = closer + 1
    return spans


def in_spans(position: int, spans: list[tuple[int, int]]) -> bool:
    """Whether ``position`` falls inside one of ``spans`` (sorted, non-overlapping ``(start, end)``)."""
    i = bisect.bisect_right(spans, (position, float("inf"))) - 1
    return i >= 0 and spans[i][0] <= position < spans[i][1]


@dataclass(frozen=True, slots=True)
class Tag:
    """One occurrence of a layout tag outside code.

    Attributes:
        start, end: character offsets of the tag in the text.
        closing: ``</name>`` rather than ``<name>``.
        canonical: spelled exactly ``<name>`` / ``</name>``; variants such as ``<THINK>`` or ``< /think >``
            are still tags (so they count as duplicates) but never satisfy the layout.
    """

    start: int
    end: int
    closing: bool
    canonical: bool


def find_tags(text: str, name: str, spans: list[tuple[int, int]]) -> list[Tag]:
    """Every ``<name>`` and ``</name>`` in ``text`` outside the code ``spans``, in order.

    Matching ignores case and blanks inside the brackets, so ``<Think >`` is found (and reported as
    non-canonical) instead of passing as plain text.
    """
    pattern = re.compile(r"<\s*(/?)\s*" + re.escape(name) + r"\s*>", re.IGNORECASE)
    tags = []
    for match in pattern.finditer(text):
        if in_spans(match.start(), spans):
            continue
        closing = bool(match.group(1))
        tags.append(Tag(match.start(), match.end(), closing, match.group(0) == f"<{'/' if closing else ''}{name}>"))
    return tags


def chain_of_thought(text: str, think_tag: str = "think") -> str:
    """The chain of thought: the text inside the think blocks, or all of ``text`` when it has no think tag.

    A completion that starts inside the thinking (the chat template pre-filled ``<think>``) has a closing
    tag first: the thinking then runs from the start of the completion. An unclosed block runs to the end.
    Several blocks are joined with newlines. Tags inside code do not count.
    """
    tags = find_tags(text, think_tag, code_spans(text))
    if not tags:
        return text
    parts = []
    start: int | None = 0 if tags[0].closing else None
    for tag in tags:
        if tag.closing and start is not None:
            parts.append(text[start : tag.start])
            start = None
        elif not tag.closing and start is None:
            start = tag.end
    if start is not None:
        parts.append(text[start:])
    return "\n".join(parts)
