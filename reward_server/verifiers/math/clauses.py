"""Reading a value out of free text: the math spans of a text, the clause after an answer anchor cut down to its
value, and the fallback (the last number or math span of a completion). :mod:`.extract` finds where the answer
is; this reads it."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from reward_server.verifiers.math.forms import closing_bracket, read_number_words
from reward_server.verifiers.math.text import (
    _strip_math_delimiters,
)

# Math delimiters, scanned once left to right (a lazy ".+?" per opener is quadratic on unclosed ones).
_DELIMITER = re.compile(r"\\\$|\$\$|\\\[|\\\]|\\\(|\\\)|\$")
_CLOSER = {"$$": "$$", "\\[": "\\]", "\\(": "\\)", "$": "$"}
# Not an exponent or subscript: "1,000.99 m^{2}" (also from "m²") ends in the value, not in 2. Only a Latin
# letter or digit makes a number part of a name ("x2"); one glued to CJK text is a number ("比例为13/28").
_NOT_EXPONENT = r"(?<![A-Za-z0-9_.^])(?<!\^\{)(?<!_\{)"
_NUMBER = re.compile(
    _NOT_EXPONENT + r"[-+]?(?:[1-9]\d{0,2}(?:,\d{3})+(?![\d,])|[1-9]\d?(?:,\d{2})+,\d{3}(?![\d,])"
    r"|[1-9]\d{0,2}(?: \d{3})+(?![\d.])|\d+)(?:\.\d+)?"
    r"(?:\s*/\s*\d+)?(?:\s*(?:%|percent\b))?|" + _NOT_EXPONENT + r"[-+]?\.\d+"
)
_BARE_LATEX_VALUE = re.compile(
    r"-?\\[dt]?frac\s*\{[^{}]*\}\s*\{[^{}]*\}|-?(?:(?<!\d)\d+\s*)?\\sqrt\s*\{[^{}]*\}|-?(?<!\d)\d+(?:\.\d+)?\^\{[^{}]*\}"
    r"|-?(?<!\d)\d+\^-?\d+"
)
_MD_NOISE = re.compile(r"\*\*|__|`|^[>\s]+|^#{1,3}\s+")
_SIMPLE_LHS = re.compile(r"^\s*(?:[A-Za-z]'*(?:_\{?\w+\}?)?(?:\([^()]*\))?|\\[A-Za-z]+(?:_\{?\w+\}?)?)\s*$")
_VERB = re.compile(r"\s(?:is|are|equals|was|becomes)\s", re.IGNORECASE)
# Words that say another choice is *not* the answer: "C, not A or D", "C rather than A", "it can't be A", "B et
# non D", "C, nicht A", "D, no B", "B, а не D", "C，不是A". (Used by the comparison to drop those letters.)
NEGATION = (
    r"(?:\b(?:not|non|nicht|no|pas|nor|ni|cannot\s+be|can\s+not\s+be|rather\s+than|instead\s+of|other\s+than"
    r"|except|не)\b|n['’]t\s+be\b|不是|而非|并非|並非|ではなく|じゃなく)"
)
# A clause that states a value starts with one: a number, math, a letter choice, "x = ...", code ("sqrt(2)").
_STARTS_WITH_VALUE = re.compile(
    r"^(?:[-+]?\s?\.?\d|\$|\\[\[(A-Za-z]|[(\[{]|[A-Za-z](?:_\w+)?\s*=|(?:sqrt|cbrt|exp|ln|log|pi)\b"
    rf"|[A-J](?:[).:,]|\s*$|\s+(?:or|and)\s|\s*(?:(?:et|and|y|und|e|mais|but|а|и)\s+)?{NEGATION}"
    r"|\s+[A-Z][\w'’-]*\s*$))"
)
_QUALIFIER = re.compile(
    r"^(?:(?:either|maybe|perhaps|possibly|probably|approximately|about|around|roughly|exactly|just|only|for\s+sure"
    r"|definitely|clearly|certainly|surely|indeed|simply)\s+)+",
    re.IGNORECASE,
)
_NEGATED_VALUE = re.compile(rf"\s*[,;]?\s*(?:(?:and|et|und|y|e|mais|but|а|и)\s+)?{NEGATION}")
# After a value, a new clause ("17 and then we check it", "12 but let me double check", "5 so she has five"):
# its words are not the answer. A unit ("17 apples"), a hedge ("3 or 4") or more values ("x = 5 and y = 3") are.
_PROSE_TAIL = re.compile(
    r"(?:\s*[,;]\s*|\s+)(?:(?:and|but|so|then|thus|hence|therefore)\s+)*"
    r"(?:we|i|it|this|that|these|those|they|he|she|you|let|let's|there|here|then|so|but|thus|hence|therefore|now"
    r"|next|which|because|since|while|whereas|as|if|when|where|check|note|double|verify|depending)\b",
    re.IGNORECASE,
)
# Longest clause read after an anchor: a line, not a book.
_MAX_CLAUSE_CHARS = 1000


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    content: str


def _pair_math_delimiters(text: str) -> tuple[list[tuple[re.Match[str], re.Match[str]]], re.Match[str] | None]:
    """One linear pass over ``text``'s math delimiters: the (opener, closer) pairs in order, and the opener left
    open at the end (``None`` when every span closes).

    An inline ``$`` does not cross a line (an opener whose line ended is replaced by the next one); ``\\$`` is an
    escaped dollar; a ``$`` glued to a letter or digit before it opens nothing; inside a span, other delimiters are
    its content.
    """
    pairs: list[tuple[re.Match[str], re.Match[str]]] = []
    opener: re.Match[str] | None = None
    for m in _DELIMITER.finditer(text):
        tok = m.group()
        if tok == "\\$":
            continue
        if opener is not None:
            want = _CLOSER[opener.group()]
            if tok == want and not (want == "$" and "\n" in text[opener.end() : m.start()]):
                pairs.append((opener, m))
                opener = None
                continue
            if opener.group() != "$" or "\n" not in text[opener.end() : m.start()]:
                continue  # inside a span: other delimiters are its content
        if tok in _CLOSER and not (tok == "$" and m.start() > 0 and (text[m.start() - 1].isalnum())):
            opener = m
    return pairs, opener


def _math_spans(text: str) -> list[_Span]:
    """The ``$...$``, ``$$...$$``, ``\\(...\\)`` and ``\\[...\\]`` spans of ``text``, in one linear pass
    (:func:`_pair_math_delimiters`); an opener never closed is no span, nor is an empty one."""
    spans: list[_Span] = []
    for opener, closer in _pair_math_delimiters(text)[0]:
        content = text[opener.end() : closer.start()].strip()
        if content:
            spans.append(_Span(opener.start(), closer.end(), content))
    return spans


# What leaves a chain of working open: "= ", "+", "\\cdot" after the last value (also past a LaTeX line break
# and an align "&": "\\frac{5+10i}{5} \\\\ &= "). The value before it is an intermediate, not a result.
_UNFINISHED_GAP = re.compile(
    r"(?:\s|\\\\|&)*(?:[\^_]\{?[\w.]+\}?\s*)?(?:=|[-+*/×÷·]|\\cdot|\\times|\\div|\\pm|\\approx)"
)
# A "$" that opens a price ("$18 left", "$ 2.50 each"): digits, and nothing on the line that only math has.
_PRICE = re.compile(r"\s?\d")
_MATH_ONLY = re.compile(r"[=^_{\\]")


def _unclosed_math(text: str) -> int | None:
    """Where the text's last math span opens and is never closed (the completion stopped inside a formula:
    "$3^3=", "\\[ P(16) = "), or ``None``. Only an opener on the text's last line counts (a stray one higher up
    is a typo, not the point where the text stops), and not a ``$`` that opens a price ("$18 left")."""
    opener = _pair_math_delimiters(text)[1]
    if opener is None:
        return None
    rest = text[opener.end() :].rstrip()
    if "\n" in rest or (opener.group() == "$" and _PRICE.match(rest) and not _MATH_ONLY.search(rest)):
        return None  # a stray opener lines above the end ("= $$<<16+27=43>>43", GSM8K), or a price
    return opener.start()


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


def _variables(s: str) -> bool:
    """Has ``s`` an unknown to solve for? Not when its letters are e, i or bound by a sum, product, integral or
    limit: "e^{i\\pi} = -1" and "\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}" state their right side."""
    if re.search(r"\\(?:sum|prod|int|oint|lim|binom|det)(?![A-Za-z])", s):
        return False
    return _letters(re.sub(r"(?<![A-Za-z\\])[ei](?![A-Za-z])", "", s))


def _letters(s: str) -> bool:
    """Does ``s`` have variables (letters outside LaTeX commands)?"""
    return bool(re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", s)))


def _result_side(expr: str) -> str:
    """The value of an equation chain: ``x = 3 + 4 = 7`` -> ``7``; ``a = \\frac{1}{3} \\approx 0.33`` -> the
    exact side; ``x \\approx 11`` -> ``11``. A real equation (``y = 2x + 3``, ``x^2/16 + y^2/12 = 1/4``)
    is kept whole."""
    inner = expr.strip()
    bracketed = inner[:1] in "([" and inner[-1:] in ")]" and closing_bracket(inner) == len(inner) - 1
    if bracketed and "," not in inner and len(_split_top_level_equals(inner[1:-1])) > 1:
        expr = inner[1:-1]  # "(35 + 70 = 105)", "[ 56 + 11 = 67 ]": an equation in brackets is not a tuple
    sides = _split_top_level_equals(expr)
    if len(sides) > 1 and "," not in expr:
        lhs, rhs = sides[0], sides[-1]
        if len(sides) > 2 or not _variables(lhs) or (_SIMPLE_LHS.match(lhs) and not _letters(rhs)):
            expr = rhs
    approx = re.split(r"\\approx|\\simeq|≈", expr)
    if len(approx) > 1:
        expr = approx[-1] if (not approx[0].strip() or _SIMPLE_LHS.match(approx[0])) else approx[0]
    return expr.strip()


def _clean_clause(text: str, *, value_only: bool, nearest: bool = False) -> str | None:
    """The value stated by an "answer is ..." clause, or ``None`` if it states none.

    The clause is the rest of the line (or the next non-empty line), up to the end of its first sentence.
    It counts when it starts with a value (a number, math, a choice letter, "x = ...", code), and then ends
    where a new clause starts ("The answer is 17 and then we check it" is 17); "The volume of $V$ is 120"
    gives what follows the last "is" outside math. Otherwise, with ``nearest`` (an answer phrase of another
    language), the first value after the phrase counts ("Réponse : il reste 35 pommes après 3 jours" is 35);
    else, unless ``value_only``, a short word answer ("Navin") counts too. Prose ("The answer is consistent
    with the 3 checks") states nothing.
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
    line = _QUALIFIER.sub("", line.strip())
    starts = bool(_STARTS_WITH_VALUE.match(line))
    if starts:
        spans = _math_spans(line)
        for m in _PROSE_TAIL.finditer(line):
            if m.start() > 0 and _outside(spans, m.start()):
                line = line[: m.start()]
                break
        # "12, not 13", "12, pas 13": what the answer is not is no second value. (A choice letter keeps its
        # negations: the comparison reads them, "C, not A or D".)
        negated = _NEGATED_VALUE.search(line)
        if negated and negated.start() > 0 and _outside(spans, negated.start()) and re.match(r"[-+.\d$\\]", line):
            line = line[: negated.start()]
    verbs = [m for m in _VERB.finditer(line) if _outside(_math_spans(line), m.start())]
    if verbs:
        after = _QUALIFIER.sub("", line[verbs[-1].end() :].strip())
        # "$x$ is 5" states 5; "17 so the total is large" states 17, not "large".
        if not starts or _STARTS_WITH_VALUE.match(after):
            line = after
    line = line.strip().rstrip(".").strip()
    # "either 42 or 43" is the hedge "42 or 43"; "approximately 42" states 42.
    line = _QUALIFIER.sub("", line)
    if not line:
        return None
    if not _STARTS_WITH_VALUE.match(line):
        if (spelled := _spelled_clause(line)) is not None:
            return spelled
        if nearest:
            return _first_value(line)
        plain = line.strip("*_ ")
        # A word answer is a few words ("Navin", "the red one"), not a run of 500 letters.
        if value_only or _word_count(plain) > 3 or len(plain.split()) > 4 or re.search(r"\d", plain):
            return None
        return plain
    spans = _math_spans(line)
    if spans:
        values = [_result_side(sp.content) for sp in spans]
        # A plain number joined to the math by "or", "and" or a comma is part of the answer: "5 or $7$" is a
        # hedge, not 7; "$x = 5$ or 7" is not 5.
        if before := _HEDGED_BEFORE.match(line[: spans[0].start]):
            values.insert(0, before.group(1))
        if after_math := _HEDGED_AFTER.match(line[spans[-1].end :]):
            values.append(after_math.group(1))
        return ", ".join(values) or None
    return _assignments_side(line) or None


# What may follow a number in words in an answer clause: a unit ("forty two apples"), not prose ("one of them").
_NOT_A_UNIT = re.compile(
    r"\b(?:of|the|a|an|that|which|who|is|are|was|more|less|than|way|ways|time|times|thing|things|another|other)\b",
    re.IGNORECASE,
)


def _spelled_clause(line: str) -> str | None:
    """A clause that states a number in words ("forty two", "three hundred and five apples"), or ``None``."""
    try:
        read = read_number_words(line)
    except ValueError:
        return None
    if read is None:
        return None
    rest = read[1].strip(" .")
    if len(rest.split()) > 2 or _NOT_A_UNIT.search(rest) or re.search(r"\d", rest):
        return None
    return line.strip(" .")


# "y = 2 or y = -2", "x = 1, y = 3": where a list of assignments splits (before the next "name =").
_BEFORE_ASSIGNMENT = re.compile(r"\s*(?:,|;|\bor\b|\band\b)\s*(?=[A-Za-z](?:_\{?\w+\}?)?\s*=(?!=))", re.IGNORECASE)


def _assignments_side(line: str) -> str:
    """:func:`_result_side` of each assignment of a list: "y = 2 or y = -2" is the two values "y = 2, y = -2"
    (a hedge for a single value), never the last side "-2"; "x = 3 + 4 = 7" is 7."""
    pieces = _BEFORE_ASSIGNMENT.split(line)
    if len(pieces) == 1:
        return _result_side(line)
    out = []
    for piece in pieces:
        sides = _split_top_level_equals(piece)
        out.append(f"{sides[0].strip()} = {sides[-1].strip()}" if len(sides) > 1 else piece.strip())
    return ", ".join(out)


_JOINED_NUMBER = r"([-+]?\d+(?:\.\d+)?(?:\s*/\s*\d+)?)"
_JOIN = r"\s*(?:,|;|\bor\b|\band\b)\s*(?:(?:or|and|maybe|perhaps|possibly)\s+)*(?:[A-Za-z](?:_\w+)?\s*=\s*)?"
_HEDGED_BEFORE = re.compile(rf"^\s*{_JOINED_NUMBER}{_JOIN}$", re.IGNORECASE)
_HEDGED_AFTER = re.compile(rf"^{_JOIN}{_JOINED_NUMBER}\s*\.?\s*$", re.IGNORECASE)


# What joins the fallback's last value to earlier ones into one answer: "3 or 4", "$x=2$ and $x=5$",
# "y = 2 or y = -2" (two assignments of one variable: a hedge, not the last value).
_VALUE_SEPARATOR = re.compile(
    r"^\s*(?:,|;|\bor\b|\band\b|,\s*(?:or|and)\b)\s*(?:[A-Za-z](?:_\{?\w+\}?)?\s*=(?!=)\s*)?$", re.IGNORECASE
)
# What joins two values into one expression: "3 + √7", "4 - \sqrt{3}", "2 \cdot 5".
_OPERATOR_GAP = re.compile(r"^\s*(?:[-+*/×÷]|\\cdot|\\times|\\div|\\pm)\s*$")
_APPROX_GAP = re.compile(r"^\s*(?:\\approx|\\simeq|≈|~)\s*$")
# A numbered list item ("1. **Compute** ...", "2. **结论**：...") is not a value: its number, when bold follows
# it, or when it starts a line of a list that counts up from 1.
_BOLD_ITEM = re.compile(r"(?:^|(?<=\s))\d{1,2}\.(?=[ \t]*(?:\*\*|__))", re.MULTILINE)
_LINE_ITEM = re.compile(r"^[ \t>]*(\d{1,2})\.[ \t]+(?=[^\d\s])", re.MULTILINE)
_STATING_WORD = re.compile(r"(?:=|\b(?:is|are|equals|be|was)|是|为|為)\s*$", re.IGNORECASE)


def _list_markers(text: str) -> set[int]:
    """Start positions of the numbers that mark list items."""
    markers = {
        m.start()
        for m in _BOLD_ITEM.finditer(text)
        if not _STATING_WORD.search(text[max(0, m.start() - 12) : m.start()])
    }
    seen: set[int] = set()
    for m in _LINE_ITEM.finditer(text):
        n = int(m.group(1))
        if n == 1 or n - 1 in seen:
            markers.add(m.start(1))
        seen.add(n)
    return markers


def _candidates(text: str, spans: list[_Span], start: int = 0) -> list[tuple[int, int, str]]:
    """The values of the text from ``start`` on, (start, end, text) sorted by position: its math spans (whole,
    also one that opens before ``start``), and its numbers and bare LaTeX values outside them (not list
    markers); one inside a longer one is part of it ("2^{10}")."""
    starts = [sp.start for sp in spans]
    first = bisect.bisect_right([sp.end for sp in spans], start)
    found: list[tuple[int, int, str]] = [(sp.start, sp.end, sp.content) for sp in spans[first:]]
    markers = _list_markers(text) if "." in text else set()
    for pattern in (_NUMBER, _BARE_LATEX_VALUE):
        for m in pattern.finditer(text, start):
            if _outside(spans, m.start(), starts) and m.start() not in markers:
                found.append((m.start(), m.end(), m.group(0)))
    found.sort(key=lambda c: (c[0], -c[1]))
    out: list[tuple[int, int, str]] = []
    for cand in found:
        if out and cand[0] < out[-1][1]:
            if cand[1] > out[-1][1] and cand[0] == out[-1][0]:
                out[-1] = cand
            continue
        out.append(cand)
    return out


def _runs(text: str, cands: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Values joined by arithmetic operators, as one expression each: "3 + √7" is one value, not two."""
    runs: list[tuple[int, int, str]] = []
    for start, end, content in cands:
        if runs and _OPERATOR_GAP.match(text[runs[-1][1] : start]):
            prev = runs[-1]
            runs[-1] = (prev[0], end, f"{prev[2]} {text[prev[1] : start].strip()} {content}")
        else:
            runs.append((start, end, content))
    return runs


def _first_value(line: str) -> str | None:
    """The first value of a clause, with the values chained to it ("3 + 4 = 7" is 7), or ``None``."""
    cands = _candidates(line, _math_spans(line))
    if not cands:
        return None
    runs = _runs(line, cands)
    chain = [runs[0]]
    for run in runs[1:]:
        if not re.fullmatch(r"\s*=\s*", line[chain[-1][1] : run[0]]):
            break
        chain.append(run)
    if _unfinished_after(line, chain[-1]):
        return None  # "2002 - 56 - 6 = ...": the working stops before its result
    return _result_side(" = ".join(r[2] for r in chain)) or None


def _unfinished_after(text: str, run: tuple[int, int, str]) -> bool:
    """Does the chain of working end open at ``run``: an ``=`` or an operator follows it, or its math span
    ends in one ("$3^7/3^3=3^4=$")?"""
    return bool(_UNFINISHED_GAP.match(text, run[1])) or bool(re.search(r"(?:=|[-+*/×÷·]|\\cdot|\\times)\s*$", run[2]))


# The fallback takes its values from the end of a text only: the value it takes is the last one, and a long
# reasoning without a final answer (a truncated rollout) cost tens of milliseconds to scan whole (issue 14).
_FALLBACK_CHARS = 4096


def _fallback(text: str, *, whole_if_short: bool = True) -> str | None:
    """The last value of the text (a number, LaTeX value or math span, with the values an arithmetic operator
    joins to it: "3 + √7"; the exact side of "1 + √2 ≈ 2.414"), with the values joined to it by
    ``,``/``or``/``and`` ("3 or 4" is a hedge, "$x=2$ and $x=5$" two roots); a short text with no words
    (``\\frac{10}{9}``) is the answer as a whole. Values are looked for in the last ``_FALLBACK_CHARS``
    characters (math spans and list markers are still found over the whole text), so a long text without an
    answer costs little more than a short one."""
    stripped = _MD_NOISE.sub("", text).strip()
    if whole_if_short and len(stripped) <= 60 and "\n" not in stripped and _word_count(stripped) == 0:
        stripped = _strip_math_delimiters(stripped.rstrip(".").strip())
        if stripped and _has_math(stripped) and not _math_spans(stripped):
            return _result_side(stripped)
    # From a word boundary, so that the first number of the window is whole.
    tail = max(0, len(text) - _FALLBACK_CHARS)
    tail = max(text.rfind(" ", 0, tail), text.rfind("\n", 0, tail)) + 1 if tail else 0
    if _unclosed_math(text) is not None:
        return None  # it stopped inside a formula: whatever value precedes it is working, not a result
    runs = _runs(text, _candidates(text, _math_spans(text), tail))
    if not runs or _unfinished_after(text, runs[-1]):
        return None
    i = len(runs) - 1
    if i > 0 and _APPROX_GAP.match(text[runs[i - 1][1] : runs[i][0]]):
        i -= 1  # "1 + √2 ≈ 2.414": the exact value, not its rounding
    last = runs[i][2]
    if i == len(runs) - 1 and text[runs[i][0]] == "$" and "\\" not in last and _word_count(last) >= 2:
        # "$? just about 1$": prose between two dollar signs (a price, a stray "$"), not math: its last value.
        inner = _fallback(last, whole_if_short=False)
        if inner:
            return inner
    values = [_result_side(runs[i][2])]
    while i > 0 and _VALUE_SEPARATOR.match(text[runs[i - 1][1] : runs[i][0]]):
        i -= 1
        values.append(_result_side(runs[i][2]))
    return ", ".join(v for v in reversed(values) if v) or None
