"""Finding the final answer of a completion: the last box, an <answer> tag, an "answer is" line, or the
fallback (the last number or math span)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from reward_server.verifiers.math.text import (
    _find_boxes,
    _strip_math_delimiters,
)

# What may stand between two boxes of one final answer: "\boxed{2}, \boxed{5} and \boxed{11}".
_BOX_SEPARATOR = re.compile(
    r"^(?:\s|[,;.$&]|\\[()\[\]]|\\q?quad|\\text\{\s*(?:and|or|,)?\s*\}|\b(?:and|or)\b)*$", re.IGNORECASE
)
_THINK_CLOSE = re.compile(r"</think\s*>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think\s*>", re.IGNORECASE)
_ANSWER_OPEN = re.compile(r"<answer\s*>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer\s*>", re.IGNORECASE)
# "final answer is", "the answer is", "Answer:", "answer =", "#### 42".
_ANCHOR = re.compile(
    r"(?:final\s+answers?\s*(?:is|are|:|=|-)?|\banswers?\s*(?:is|are|:|=)|^\s*#{4}(?!#))\s*[:=]?",
    re.IGNORECASE | re.MULTILINE,
)
_MATH_SPAN = re.compile(
    r"\$\$(?P<dd>.+?)\$\$|\\\[(?P<db>.+?)\\\]|\\\((?P<ip>.+?)\\\)|(?<![\\\w])\$(?P<id>(?:\\\$|[^$\n])+?)(?<!\\)\$",
    re.DOTALL,
)
_NUMBER = re.compile(
    r"(?<![\w.])[-+]?(?:[1-9]\d{0,2}(?:,\d{3})+(?![\d,])|[1-9]\d{0,2}(?: \d{3})+(?![\d.])|\d+)(?:\.\d+)?"
    r"(?:\s*/\s*\d+)?(?:\s*(?:%|percent\b))?|(?<![\w.])[-+]?\.\d+"
)
_BARE_LATEX_VALUE = re.compile(r"-?\\[dt]?frac\s*\{[^{}]*\}\s*\{[^{}]*\}|-?\d*\s*\\sqrt\s*\{[^{}]*\}")
_MD_NOISE = re.compile(r"\*\*|__|`|^[>\s]+")
_EQUALS = re.compile(r"(?<![<>!\\:])=(?!=)")
_SIMPLE_LHS = re.compile(r"^\s*(?:[A-Za-z](?:_\{?\w+\}?)?(?:\([^()]*\))?|\\[A-Za-z]+(?:_\{?\w+\}?)?)\s*$")
_VERB_SPLIT = re.compile(r"\s(?:is|are|equals|was|becomes)\s(?![^$]*\$[^$]*$)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Extraction:
    """The final answer found in a response.

    Attributes:
        parts: the answer's pieces as written (one per box joined into the final answer; usually one).
        source: ``boxed``, ``answer_tag``, ``anchor``, ``fallback``, or ``None`` when there is no answer.
        detail: why there is no answer, when there is none.
    """

    parts: tuple[str, ...] = ()
    source: str | None = None
    detail: str | None = None

    @property
    def text(self) -> str | None:
        return ", ".join(self.parts) if self.parts else None


def _box_answer(text: str, boxes: list[tuple[int, int, str | None]], *, liberal: bool = False) -> Extraction:
    """The final answer given by the last box, with the boxes joined to it.

    ``liberal`` (used for references, which are trusted) also joins boxes separated by a short phrase
    ("\\boxed{1} papers and \\boxed{2} bins"); for responses only pure separators join, so a corrected
    earlier box ("\\boxed{5}, but ... \\boxed{8}") is not part of the final answer.
    """
    start, _end, content = boxes[-1]
    if content is None:
        return Extraction(detail="the last \\boxed{ is never closed")
    if not content.strip():
        return Extraction(detail="the last \\boxed{} is empty")
    parts = [content.strip()]
    for prev_start, prev_end, prev_content in reversed(boxes[:-1]):
        between = text[prev_end:start]
        joined = _BOX_SEPARATOR.match(between) or (
            liberal
            and len(between) < 70
            and re.search(r",|;|\b(?:and|or)\b", between)
            and not re.search(r"[.!?]\s|\n\s*\n", between)
        )
        if prev_content is None or not prev_content.strip() or not joined:
            break
        parts.append(prev_content.strip())
        start = prev_start
    return Extraction(parts=tuple(reversed(parts)), source="boxed")


def _span_content(m: re.Match[str]) -> str:
    return next(g for g in m.groups() if g is not None).strip()


def _word_count(s: str) -> int:
    without_latex = re.sub(r"\\[A-Za-z]+", " ", _MATH_SPAN.sub(" ", s))
    return len(re.findall(r"[A-Za-z]{2,}", without_latex))


def _has_math(s: str) -> bool:
    return bool(re.search(r"\d|\\[A-Za-z]|\$", s))


def _split_top_level_equals(expr: str) -> list[str]:
    """Split on ``=`` outside braces/brackets: ``F_n = \\sum_{k=0}^{n}`` splits once, not at ``k=0``."""
    sides, depth, last = [], 0, 0
    for i, c in enumerate(expr):
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        elif c == "=" and depth == 0:
            prev, nxt = expr[i - 1 : i], expr[i + 1 : i + 2]
            if prev not in ("<", ">", "!", "\\", ":", "=") and nxt != "=":
                sides.append(expr[last:i])
                last = i + 1
    sides.append(expr[last:])
    return sides


def _letters(s: str) -> bool:
    """Does ``s`` have variables (letters outside LaTeX commands)?"""
    return bool(re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", s)))


def _result_side(expr: str) -> str:
    """The value of an equation chain: ``x = 3 + 4 = 7`` -> ``7``; ``a = \\frac{1}{3} \\approx 0.33`` -> the
    exact side; ``x \\approx 11`` -> ``11``. A real equation (``y = 2x + 3``, ``x^2/16 + y^2/12 = 1/4``)
    is kept whole."""
    sides = _split_top_level_equals(expr)
    if len(sides) > 1 and "," not in expr:
        lhs, rhs = sides[0], sides[-1]
        if len(sides) > 2 or not _letters(lhs) or (_SIMPLE_LHS.match(lhs) and not _letters(rhs)):
            expr = rhs
    approx = re.split(r"\\approx|\\simeq|≈", expr)
    if len(approx) > 1:
        expr = approx[-1] if (not approx[0].strip() or _SIMPLE_LHS.match(approx[0])) else approx[0]
    return expr.strip()


def _clean_clause(text: str) -> str | None:
    """The value in an "answer is ..." clause: its math, or its last number if it is prose."""
    text = text.lstrip(" :=\t")
    # If the rest of the line is empty, the answer is on the next non-empty line.
    line = next((ln for ln in text.split("\n") if ln.strip()), "")
    line = _MD_NOISE.sub("", line).strip()
    # The first sentence only: a period followed by a space or the end (not a decimal point), outside math.
    end = None
    for m in re.finditer(r"\.(?:\s|$)|[!?;](?:\s|$)", line):
        if not any(s.start() < m.start() < s.end() for s in _MATH_SPAN.finditer(line)):
            end = m.start()
            break
    if end is not None:
        line = line[:end]
    # "The volume of $V$ is 120": the value follows the last "is" outside math.
    verbs = list(_VERB_SPLIT.finditer(line))
    if verbs:
        line = line[verbs[-1].end() :]
    line = line.strip().rstrip(".").strip()
    if not line:
        return None
    spans = [_span_content(m) for m in _MATH_SPAN.finditer(line)]
    if spans:
        return ", ".join(_result_side(s) for s in spans if s) or None
    if _word_count(line) >= 3:
        # Prose ("Jane started growing it 3 hours ago"): its last value.
        return _fallback(line, whole_if_short=False)
    return _result_side(line) or None


def _fallback(text: str, *, whole_if_short: bool = True) -> str | None:
    """The last number or LaTeX value of the text, whichever ends last; a short non-prose text is whole."""
    stripped = _MD_NOISE.sub("", text).strip()
    if whole_if_short and len(stripped) <= 60 and "\n" not in stripped and _word_count(stripped) == 0:
        # A bare answer with no delimiters ("\\frac{10}{9}", "x = 5") is the answer as a whole.
        stripped = _strip_math_delimiters(stripped.rstrip(".").strip())
        if stripped and _has_math(stripped) and not _MATH_SPAN.search(stripped):
            return _result_side(stripped)
    best: tuple[int, str] | None = None
    spans = list(_MATH_SPAN.finditer(text))
    for m in spans:
        content = _span_content(m)
        if content and (best is None or m.end() >= best[0]):
            best = (m.end(), content)
    for pattern in (_NUMBER, _BARE_LATEX_VALUE):
        for m in pattern.finditer(text):
            if any(s.start() <= m.start() < s.end() for s in spans):
                continue  # inside a math span, which is a candidate as a whole
            if best is None or m.end() > best[0]:
                best = (m.end(), m.group(0))
    if best is None:
        return None
    return _result_side(best[1]) or None


def _final_text(response: str) -> tuple[str, str | None]:
    """The part of the response that may hold the final answer, or a reason there is none."""
    closes = list(_THINK_CLOSE.finditer(response))
    if closes:
        return response[closes[-1].end() :], None
    if _THINK_OPEN.search(response):
        return "", "the reasoning (<think>) never ends, so there is no final answer"
    return response, None


def _last_answer_tag(text: str) -> tuple[int, Extraction] | None:
    opens = list(_ANSWER_OPEN.finditer(text))
    if not opens:
        return None
    last_open = opens[-1]
    close = _ANSWER_CLOSE.search(text, last_open.end())
    if close is None:
        return last_open.start(), Extraction(detail="the last <answer> tag is never closed")
    inner = text[last_open.end() : close.start()].strip()
    if not inner:
        return last_open.start(), Extraction(detail="the last <answer></answer> is empty")
    value = _last_anchor_value(inner)
    if value is None:
        value = _fallback(inner)
    return last_open.start(), Extraction(parts=(value or inner,), source="answer_tag")


def _last_anchor_value(text: str, *, need_math: bool = False) -> str | None:
    for m in reversed(list(_ANCHOR.finditer(text))):
        clause = _clean_clause(text[m.end() :])
        if clause and (_has_math(clause) or not need_math):
            return clause
    return None


def extract_final_answer(response: str, *, fallback: bool = True) -> Extraction:
    """Find the final answer of a response, by the rules in the module docstring.

    The last explicit final answer wins: the last box, unless an ``<answer>`` tag or an "answer is" line
    *with a value* comes after it (an intermediate box followed by "Final answer: $10,455$").

    Args:
        response: the completion text.
        fallback: allow the last-number/last-span fallback when there is no explicit final answer.

    Returns:
        An :class:`Extraction`; ``parts`` is empty when there is no final answer.
    """
    text, why = _final_text(response)
    if why:
        return Extraction(detail=why)

    boxes = _find_boxes(text)
    candidates: list[tuple[int, Extraction]] = []
    if boxes:
        candidates.append((boxes[-1][0], _box_answer(text, boxes)))
    # Tags and anchors count only outside boxes (an unterminated box runs to the end of the text).
    after = boxes[-1][1] if boxes else 0
    tail = text[after:]
    tag = _last_answer_tag(tail)
    if tag is not None:
        candidates.append((after + tag[0], tag[1]))
    if not candidates or tail.strip():
        anchored = _last_anchor_value(tail, need_math=bool(candidates))
        if anchored:
            candidates.append((len(text), Extraction(parts=(anchored,), source="anchor")))
    if candidates:
        return max(candidates, key=lambda c: c[0])[1]
    if fallback:
        found = _fallback(text)
        if found:
            return Extraction(parts=(found,), source="fallback")
    return Extraction(detail="no \\boxed{}, <answer> tag, 'answer is' line or number found")
