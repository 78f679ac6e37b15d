"""Where the code is in a completion, and where its layout tags are.

Shared by the format and language verifiers: both must ignore a tag that the model wrote inside code
(``print("</think>")`` is not the end of the thinking), and the language verifier also needs the chain of
thought (the ``<think>`` part).

Code, as recognised here (a deliberate subset of CommonMark):

- A fenced block opens on a line that starts with up to three spaces and then three or more backticks or
  tildes, and closes on a line of up to three spaces, then the same character, at least as many, then only
  blanks. An unclosed fence runs to the end of the text, as in CommonMark, so a model cannot open a fence
  and have its tags read as layout. (The language check reads an unclosed fence, and one labelled as prose
  such as ```` ```text ````, as unfenced text instead: see :func:`code_spans`.) Lines end at ``\n``,
  ``\r\n`` or ``\r``, as in CommonMark.
- An inline span is a run of N backticks closed by the next run of exactly N backticks *on the same line*.
  CommonMark lets a span cross lines within a paragraph; we do not, so one stray backtick in the thinking
  cannot hide the real ``</think>`` on a later line.

Every scan here is linear in the text's length (a completion may hold 200,000 characters of anything).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

__all__ = ["PROSE_FENCE_INFO", "Tag", "chain_of_thought", "code_spans", "find_tags", "in_spans"]

# Lines end at "\n", "\r\n" or "\r", as in CommonMark. Only lines that hold a backtick or a tilde can open
# or close a fence or hold inline code, so the scan visits those lines alone (in C, the rest are skipped):
# a completion of 200,000 newlines costs no Python step per line.
_FENCE_LINE = re.compile(r"(?:\A|(?<=[\r\n])) {0,3}(`{3,}|~{3,})([^\r\n]*)")
_BACKTICKS = re.compile(r"`+")
_LINE_END = re.compile(r"[\r\n]|\Z")


# Info strings that say a fenced block holds prose, not code.
PROSE_FENCE_INFO = frozenset({"text", "txt", "plaintext", "plain", "markdown", "md", "output", "console"})


def code_spans(text: str, *, prose_fences: bool = False) -> list[tuple[int, int]]:
    """Return the sorted, non-overlapping ``(start, end)`` character ranges of fenced and inline code.

    With ``prose_fences`` (the language check), a fence that is never closed or whose info string names
    prose (:data:`PROSE_FENCE_INFO`) is not code: only its fence lines are, and its body is read as
    unfenced text. Otherwise a model could hide a chain of thought from the language check by opening a
    fence. The format check keeps the CommonMark reading (an unclosed fence runs to the end), so no tag in
    it counts.
    """
    fences = _fence_spans(text, prose_fences)
    spans: list[tuple[int, int]] = []
    fence_index = 0
    line_end = -1
    line_runs: list[tuple[int, int]] = []  # backtick runs of the current line, outside fences
    for run in _BACKTICKS.finditer(text):
        position = run.start()
        while fence_index < len(fences) and fences[fence_index][1] <= position:
            spans.append(fences[fence_index])
            fence_index += 1
        if fence_index < len(fences) and fences[fence_index][0] <= position:
            continue  # inside a fenced block
        if position > line_end:
            spans.extend(_inline_spans(line_runs))
            line_runs = []
            line_end = _LINE_END.search(text, position).start()  # type: ignore[union-attr]  # \Z always matches
        line_runs.append(run.span())
    spans.extend(_inline_spans(line_runs))
    spans.extend(fences[fence_index:])
    spans.sort()
    return spans


def _fence_spans(text: str, prose_fences: bool = False) -> list[tuple[int, int]]:
    """Fenced blocks: from the opening line's start to the closing line's end (or the end of the text).

    With ``prose_fences``, an unclosed fence or one whose info string is in :data:`PROSE_FENCE_INFO`
    gives only its fence lines.
    """
    spans = []
    fence: tuple[str, int, int, int, bool] | None = None  # char, length, start, opening line's end, prose
    for line in _FENCE_LINE.finditer(text):
        run, rest = line.group(1), line.group(2)
        if fence is None:
            # CommonMark: a backtick fence's info string may not contain a backtick.
            if not (run[0] == "`" and "`" in rest):
                info = rest.strip().split(maxsplit=1)
                prose = prose_fences and bool(info) and info[0].lower() in PROSE_FENCE_INFO
                fence = (run[0], len(run), line.start(), line.end(), prose)
        elif run[0] == fence[0] and len(run) >= fence[1] and not rest.strip():
            if fence[4]:
                spans += [(fence[2], fence[3]), line.span()]
            else:
                spans.append((fence[2], line.end()))
            fence = None
    if fence is not None:
        spans.append((fence[2], fence[3] if prose_fences else len(text)))
    return spans


def _inline_spans(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inline code among one line's backtick ``runs``: each run is closed by the next run of its width."""
    if len(runs) < 2:
        return []
    # The next run of the same width, found in one backward pass: searching forward from every run would
    # be quadratic on a line of unmatched runs of distinct widths.
    next_same: list[int | None] = [None] * len(runs)
    last_of_width: dict[int, int] = {}
    for i in range(len(runs) - 1, -1, -1):
        width = runs[i][1] - runs[i][0]
        next_same[i] = last_of_width.get(width)
        last_of_width[width] = i
    spans = []
    i = 0
    while i < len(runs):
        closer = next_same[i]
        if closer is None:
            i += 1  # an unmatched run is literal text
            continue
        spans.append((runs[i][0], runs[closer][1]))
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

    Matching ignores case, blanks inside the brackets, attributes and a self-closing slash, so ``<Think >``,
    ``<think type="x">`` and ``<think/>`` are found (and reported as non-canonical) instead of passing as
    plain text.
    """
    # Possessive blanks: with plain ``\s*(/?)\s*`` a ``<`` followed by n blanks backtracks n^2/2 times.
    # Attributes are bounded (256 characters, no "<" or ">"), so each "<name" costs a bounded look-ahead.
    pattern = re.compile(r"<\s*+(/?)\s*+" + re.escape(name) + r"(?:[\s/][^<>]{0,256})?>", re.IGNORECASE)
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
