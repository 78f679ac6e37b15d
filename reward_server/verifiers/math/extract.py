"""Finding the final answer of a completion: the last box, an <answer> tag, an "answer is" line, or the
fallback (the last number or math span)."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from reward_server.verifiers.math.text import (
    _find_boxes,
    _strip_math_delimiters,
    normalize_unicode,
)

# What may stand between two boxes of one final answer: "\boxed{2}, \boxed{5} and \boxed{11}", and the
# hedges "\boxed{3} (or maybe \boxed{4})", "\boxed{3}, possibly \boxed{4}": joined, they give two values,
# which is wrong for a single-valued reference. A correction ("\boxed{3}, no wait, \boxed{4}") has other
# words in between and is not joined.
_JOIN_WORDS = r"\b(?:and|or|maybe|perhaps|possibly|alternatively|either)\b"
_BOX_SEPARATOR = re.compile(
    rf"^(?:\s|[,;.$&()]|\\[()\[\]]|\\q?quad|\\text\{{(?:\s|,|{_JOIN_WORDS})*\}}|{_JOIN_WORDS})*$", re.IGNORECASE
)
_THINK_CLOSE = re.compile(r"</think\s*>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think\s*>", re.IGNORECASE)
_ANSWER_OPEN = re.compile(r"<answer\s*>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer\s*>", re.IGNORECASE)
# The answer line in the languages policies drift into (the text is NFKC-normalised first, so a full-width
# colon is ':'): "答案是 5", "最终答案：5", "答：12个苹果", "Ответ: 12", "ответ равен 12", "答えは 5", "정답: 5".
# What follows must start with a value (see _last_anchor_value): these words also occur in prose.
_FOREIGN_ANCHOR = (
    r"(?:最终答案|最後答案|答案|答え)\s*(?:应该?是|應該?是|应为|應為|为|為|是|は)?|(?<![^\W\d_])答\s*:"
    r"|\bответ(?:ом)?\s*(?::|—|–|-|равен|будет)|(?:정답|답)\s*(?:은|는)?\s*:"
)
# "final answer is", "the answer is", "Answer:", "answer =", "#### 42".
# Also "the correct option is B", "answer choice: (C)".
_ANCHOR = re.compile(
    r"(?:final\s+answers?\s*(?:is|are|:|=|-)?|\banswers?\s*(?:is|are|:|=)|^[ \t]*#{4}(?!#)"
    r"|\b(?:correct|right|best)\s+(?:option|choice)\s*(?:is|:)|\banswer\s+(?:choice|option)\s*(?:is|:)"
    rf"|{_FOREIGN_ANCHOR})\s*[:=]?",
    re.IGNORECASE | re.MULTILINE,
)
# A choice named as the right one, with the letter first: "Option B is correct", "(C) is the right answer".
_CHOICE_STATEMENT = re.compile(
    r"(?:\b(?:option|choice)\s+\(?([A-J])\)?|\(([A-J])\)|\b([A-J])\b(?=\s+is\s+the\s))\s+is\s+(?:the\s+)?"
    r"(?:correct|right)\b",
    re.IGNORECASE,
)
# Math delimiters, scanned once left to right (a lazy ".+?" per opener is quadratic on unclosed ones).
_DELIMITER = re.compile(r"\\\$|\$\$|\\\[|\\\]|\\\(|\\\)|\$")
_CLOSER = {"$$": "$$", "\\[": "\\]", "\\(": "\\)", "$": "$"}
# Not an exponent or subscript: "1,000.99 m^{2}" (also from "m²") ends in the value, not in 2.
_NOT_EXPONENT = r"(?<![\w.^_])(?<!\^\{)(?<!_\{)"
_NUMBER = re.compile(
    _NOT_EXPONENT + r"[-+]?(?:[1-9]\d{0,2}(?:,\d{3})+(?![\d,])|[1-9]\d{0,2}(?: \d{3})+(?![\d.])|\d+)(?:\.\d+)?"
    r"(?:\s*/\s*\d+)?(?:\s*(?:%|percent\b))?|" + _NOT_EXPONENT + r"[-+]?\.\d+"
)
_BARE_LATEX_VALUE = re.compile(
    r"-?\\[dt]?frac\s*\{[^{}]*\}\s*\{[^{}]*\}|-?(?:(?<!\d)\d+\s*)?\\sqrt\s*\{[^{}]*\}|-?(?<!\d)\d+(?:\.\d+)?\^\{[^{}]*\}"
    r"|-?(?<!\d)\d+\^-?\d+"
)
_MD_NOISE = re.compile(r"\*\*|__|`|^[>\s]+|^#{1,3}\s+")
_EQUALS = re.compile(r"(?<![<>!\\:])=(?!=)")
_SIMPLE_LHS = re.compile(r"^\s*(?:[A-Za-z](?:_\{?\w+\}?)?(?:\([^()]*\))?|\\[A-Za-z]+(?:_\{?\w+\}?)?)\s*$")
_VERB = re.compile(r"\s(?:is|are|equals|was|becomes)\s", re.IGNORECASE)
# A clause that states a value starts with one: a number, math, a letter choice, "x = ...".
_STARTS_WITH_VALUE = re.compile(
    r"^(?:[-+]?\s?\.?\d|\$|\\[\[(A-Za-z]|[(\[{]|[A-Za-z](?:_\w+)?\s*=|[A-J](?:[).:,]|\s*$|\s+(?:or|and)\s))"
)
_QUALIFIER = re.compile(
    r"^(?:(?:either|maybe|perhaps|possibly|probably|approximately|about|around|roughly|exactly|just|only)\s+)+",
    re.IGNORECASE,
)
# Longest clause read after an anchor: a line, not a book.
_MAX_CLAUSE_CHARS = 1000


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


_INVISIBLE = re.compile(r"\\(?:text|mathrm|mbox|textbf|mathbf)\s*\{\s*\}|\\[,;:! ]|\\q?quad(?![A-Za-z])|~|[{}\s]")


def _blank(content: str) -> bool:
    """Does a box show nothing? ``\\boxed{}``, ``\\boxed{\\text{}}``, ``\\boxed{\\quad}``, ``\\boxed{{}}``."""
    return not _INVISIBLE.sub("", content)


def _box_answer(text: str, boxes: list[tuple[int, int, str | None]], *, liberal: bool = False) -> Extraction:
    """The final answer given by the last box, with the boxes joined to it.

    ``liberal`` (used for references, which are trusted) also joins boxes separated by a short phrase
    ("\\boxed{1} papers and \\boxed{2} bins"); for responses only pure separators join, so a corrected
    earlier box ("\\boxed{5}, but ... \\boxed{8}") is not part of the final answer.
    """
    start, _end, content = boxes[-1]
    if content is None:
        return Extraction(detail="the last \\boxed{ is never closed")
    if _blank(content):
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
        if prev_content is None or _blank(prev_content) or not joined:
            break
        parts.append(prev_content.strip())
        start = prev_start
    return Extraction(parts=tuple(reversed(parts)), source="boxed")


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    content: str


def _math_spans(text: str) -> list[_Span]:
    """The ``$...$``, ``$$...$$``, ``\\(...\\)`` and ``\\[...\\]`` spans of ``text``, in one linear pass.

    An inline ``$`` does not cross a line; ``\\$`` is an escaped dollar; an opener never closed is no span.
    """
    spans: list[_Span] = []
    opener: re.Match[str] | None = None
    for m in _DELIMITER.finditer(text):
        tok = m.group()
        if tok == "\\$":
            continue
        if opener is not None:
            want = _CLOSER[opener.group()]
            if tok == want and not (want == "$" and "\n" in text[opener.end() : m.start()]):
                content = text[opener.end() : m.start()].strip()
                if content:
                    spans.append(_Span(opener.start(), m.end(), content))
                opener = None
                continue
            if opener.group() != "$" or "\n" not in text[opener.end() : m.start()]:
                continue  # inside a span: other delimiters are its content
        if tok in _CLOSER and not (tok == "$" and m.start() > 0 and (text[m.start() - 1].isalnum())):
            opener = m
    return spans


def _outside(spans: list[_Span], pos: int, starts: list[int] | None = None) -> bool:
    """Is ``pos`` outside every span? (Spans are sorted and disjoint; pass ``starts`` when asking often.)"""
    i = bisect.bisect_right(starts if starts is not None else [s.start for s in spans], pos) - 1
    return i < 0 or pos >= spans[i].end


def _without_spans(text: str, spans: list[_Span]) -> str:
    out, last = [], 0
    for sp in spans:
        out.append(text[last : sp.start])
        out.append(" ")
        last = sp.end
    out.append(text[last:])
    return "".join(out)


# A word: two Latin letters, or any run of letters of another script ("答案", "Ответ"), which a value never has.
_WORD = re.compile(r"[A-Za-z]{2,}|[^\W\d_A-Za-z]+")


def _word_count(s: str) -> int:
    without_latex = re.sub(r"\\[A-Za-z]+", " ", _without_spans(s, _math_spans(s)))
    return len(_WORD.findall(without_latex))


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


def _clean_clause(text: str, *, value_only: bool) -> str | None:
    """The value stated by an "answer is ..." clause, or ``None`` if it states none.

    The clause is the rest of the line (or the next non-empty line), up to the end of its first sentence;
    "The volume of $V$ is 120" gives what follows the last "is" outside math. It counts when it starts
    with a value (a number, math, a choice letter, "x = ..."); otherwise, unless ``value_only``, a short
    word answer ("Navin") counts too. Prose ("The answer is consistent with the 3 checks") states nothing.
    """
    text = text.lstrip(" :=\t")
    line = next((ln for ln in text.split("\n", 50) if ln.strip()), "")[:_MAX_CLAUSE_CHARS]
    line = _MD_NOISE.sub("", line).strip()
    line = re.split(r"</?[A-Za-z][\w-]*\s*>", line, maxsplit=1)[0]  # "42</answer>": a tag ends it
    spans = _math_spans(line)
    # The first sentence only: a period followed by a space or the end (not a decimal point), outside math.
    # A parenthetical remark ("25 (since 5*5=25)") ends it too, but not a hedge ("3 (or 4)").
    for m in re.finditer(
        r"\.(?:\s|$)|[!?;](?:\s|$)|[。！？；]|\s(?:because|since|which|as)\s"
        r"|\s\((?!\s*(?:or|and)\b)[A-Za-z]{2,}\b",
        line,
    ):
        if _outside(spans, m.start()):
            line = line[: m.start()]
            break
    verbs = [m for m in _VERB.finditer(line) if _outside(spans, m.start())]
    if verbs:
        line = line[verbs[-1].end() :]
    line = line.strip().rstrip(".").strip()
    # "either 42 or 43" is the hedge "42 or 43"; "approximately 42" states 42.
    line = _QUALIFIER.sub("", line)
    if not line:
        return None
    if not _STARTS_WITH_VALUE.match(line):
        plain = line.strip("*_ ")
        if value_only or _word_count(plain) > 3 or re.search(r"\d", plain):
            return None
        return plain
    spans = _math_spans(line)
    if spans:
        values = [_result_side(sp.content) for sp in spans]
        # A plain number joined to the math by "or", "and" or a comma is part of the answer: "5 or $7$" is a
        # hedge, not 7; "$x = 5$ or 7" is not 5.
        if before := _HEDGED_BEFORE.match(line[: spans[0].start]):
            values.insert(0, before.group(1))
        if after := _HEDGED_AFTER.match(line[spans[-1].end :]):
            values.append(after.group(1))
        return ", ".join(values) or None
    return _result_side(line) or None


_JOINED_NUMBER = r"([-+]?\d+(?:\.\d+)?(?:\s*/\s*\d+)?)"
_JOIN = r"\s*(?:,|;|\bor\b|\band\b)\s*(?:(?:or|and|maybe|perhaps|possibly)\s+)*"
_HEDGED_BEFORE = re.compile(rf"^\s*{_JOINED_NUMBER}{_JOIN}$", re.IGNORECASE)
_HEDGED_AFTER = re.compile(rf"^{_JOIN}{_JOINED_NUMBER}\s*\.?\s*$", re.IGNORECASE)


# What joins the fallback's last value to earlier ones into one answer: "3 or 4", "$x=2$ and $x=5$".
_VALUE_SEPARATOR = re.compile(r"^\s*(?:,|;|\bor\b|\band\b|,\s*(?:or|and)\b)\s*$", re.IGNORECASE)


# The fallback takes its values from the end of a text only: the value it takes is the last one, and a long
# reasoning without a final answer (a truncated rollout) cost tens of milliseconds to scan whole (issue 14).
_FALLBACK_CHARS = 4096


def _fallback(text: str, *, whole_if_short: bool = True) -> str | None:
    """The last number or LaTeX value of the text, whichever ends last (the longest, on a tie), with the
    values joined to it by ``,``/``or``/``and`` ("3 or 4" is a hedge, "$x=2$ and $x=5$" two roots); a
    short text with no words (``\\frac{10}{9}``) is the answer as a whole. Values are looked for in the
    last ``_FALLBACK_CHARS`` characters (math spans are paired over the whole text), so a long text without
    an answer costs little more than a short one."""
    stripped = _MD_NOISE.sub("", text).strip()
    if whole_if_short and len(stripped) <= 60 and "\n" not in stripped and _word_count(stripped) == 0:
        stripped = _strip_math_delimiters(stripped.rstrip(".").strip())
        if stripped and _has_math(stripped) and not _math_spans(stripped):
            return _result_side(stripped)
    spans = _math_spans(text)
    starts = [sp.start for sp in spans]
    # From a word boundary, so that the first number of the tail is whole.
    tail = max(0, len(text) - _FALLBACK_CHARS)
    tail = max(text.rfind(" ", 0, tail), text.rfind("\n", 0, tail)) + 1 if tail else 0
    first = bisect.bisect_left([sp.end for sp in spans], tail)
    # (end, -start, text) of each candidate
    cands: list[tuple[int, int, str]] = [(sp.end, -sp.start, sp.content) for sp in spans[first:]]
    for pattern in (_NUMBER, _BARE_LATEX_VALUE):
        for m in pattern.finditer(text, tail):
            if _outside(spans, m.start(), starts):  # inside a math span, the span is the candidate as a whole
                cands.append((m.end(), -m.start(), m.group(0)))
    if not cands:
        return None
    cands.sort()
    last = cands[-1]
    values = [_result_side(last[2])]
    for cand in reversed(cands[:-1]):
        if cand[0] > -last[1]:
            continue  # overlaps the value already taken ("2" inside "2^{10}")
        if not _VALUE_SEPARATOR.match(text[cand[0] : -last[1]]):
            break
        values.append(_result_side(cand[2]))
        last = cand
    return ", ".join(v for v in reversed(values) if v) or None


def _final_text(response: str) -> tuple[str, str | None]:
    """The part of the response that may hold the final answer, or a reason there is none."""
    closes = list(_THINK_CLOSE.finditer(response))
    if closes:
        return response[closes[-1].end() :], None
    if _THINK_OPEN.search(response):
        return "", "the reasoning (<think>) never ends, so there is no final answer"
    return response, None


def _last_answer_tag(text: str) -> tuple[int, int, Extraction] | None:
    """The last ``<answer>...</answer>``: (start, end, extraction). Its content is the answer as a whole
    when it is one ("\\begin{pmatrix}...", "\\frac{270}7 degrees"); an "answer is" sentence inside it
    gives its value; a longer text gives its last value."""
    opens = list(_ANSWER_OPEN.finditer(text))
    if not opens:
        return None
    last_open = opens[-1]
    close = _ANSWER_CLOSE.search(text, last_open.end())
    if close is None:
        return last_open.start(), len(text), Extraction(detail="the last <answer> tag is never closed")
    inner = text[last_open.end() : close.start()].strip()
    if not inner:
        return last_open.start(), close.end(), Extraction(detail="the last <answer></answer> is empty")
    value = _last_anchor_value(inner, value_only=False)
    if value is None:
        bare = _strip_math_delimiters(_MD_NOISE.sub("", inner).strip().rstrip(".").strip())
        value = bare if "\n" not in bare and _word_count(bare) < 3 else _fallback(inner)
    return last_open.start(), close.end(), Extraction(parts=(value or inner,), source="answer_tag")


def _last_anchor_value(text: str, *, value_only: bool) -> str | None:
    for m in reversed(list(_ANCHOR.finditer(text))):
        # A non-English anchor word also occurs in prose ("我们检查答案。"): only a value counts after it.
        clause = _clean_clause(
            text[m.end() : m.end() + _MAX_CLAUSE_CHARS + 200], value_only=value_only or not m.group().isascii()
        )
        if clause:
            return clause
    return None


def extract_final_answer(response: str, *, fallback: bool = True) -> Extraction:
    """Find the final answer of a response, by the rules in the module docstring.

    The last explicit final answer wins: the last box or ``<answer>`` tag, whichever comes later, unless an
    "answer is" line that *starts with a value* follows both ("\\boxed{255} ... Final answer: $10,455$").

    Args:
        response: the completion text.
        fallback: allow the last-number/last-span fallback when there is no explicit final answer.

    Returns:
        An :class:`Extraction`; ``parts`` is empty when there is no final answer.
    """
    text, why = _final_text(response)
    if why:
        return Extraction(detail=why)
    # Before anything reads the text: "The answer is −5" (U+2212) states -5, and the fallback's number
    # pattern only knows the ASCII minus, so an unnormalised sign would be silently dropped.
    text = normalize_unicode(text)

    boxes = _find_boxes(text)
    candidates: list[tuple[int, Extraction]] = []
    after = 0
    if boxes:
        candidates.append((boxes[-1][0], _box_answer(text, boxes)))
        after = boxes[-1][1]  # an unterminated box runs to the end of the text
    tag = _last_answer_tag(text[after:])
    if tag is not None:
        candidates.append((after + tag[0], tag[2]))
        after += tag[1]
    anchored = _last_anchor_value(text[after:], value_only=bool(candidates))
    if anchored:
        candidates.append((len(text), Extraction(parts=(anchored,), source="anchor")))
    if candidates:
        return max(candidates, key=lambda c: c[0])[1]
    statements = list(_CHOICE_STATEMENT.finditer(text))
    if statements:
        letter = next(g for g in statements[-1].groups() if g)
        return Extraction(parts=(letter.upper(),), source="anchor")
    if fallback:
        found = _fallback(text)
        if found:
            return Extraction(parts=(found,), source="fallback")
    return Extraction(detail="no \\boxed{}, <answer> tag, 'answer is' line or number found")
