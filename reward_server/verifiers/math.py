"""Math answer equivalence: does a completion's final answer equal the reference answer?

Built on math-verify (latex2sympy + sympy) for the symbolic comparison; this module owns the *policy*
around it, decided once and applied to every input of the kind:

Extraction (:func:`extract_final_answer`), from the text after the last ``</think>`` if there is one:

1. the last ``\\boxed{...}`` / ``\\fbox{...}`` (also ``\\boxed 5``). An empty or unterminated last box is
   *no answer*: an earlier box is never credited. Boxes joined to the last one only by separators
   (``,``, ``and``, ``or``) belong to the same final answer (``\\boxed{2}, \\boxed{5}``);
2. else the last ``<answer>...</answer>`` tag (an unterminated last tag is no answer);
3. else the last "final answer is ...", "answer is ...", "Answer: ..." or ``#### ...`` line;
4. else (fallback, on by default, ``options.fallback``) the last number or LaTeX math span of the text.

Comparison (:func:`answers_match`):

* The last final answer decides. A final answer that gives several different values (``3 or 5``) for a
  single-valued reference is wrong, even if one of them is right.
* A ``±`` reference needs both values; a list or set reference needs all its members, in any order, and
  nothing else.
* Numbers are exact rationals where they can be: ``2 2/3`` and ``2\\frac{2}{3}`` are 8/3; ``007`` is 7;
  thousands separators, currency signs, units, ``\\text{}``, ``^\\circ``, ``\\left``/``\\right`` and
  ``\\dfrac`` do not change the value; unicode ``√ − × ÷ ° π ±`` mean what they say; ``35%`` equals 35
  and 0.35.
* **The reference sets the precision.** A reference written as a decimal with *d* places (``0.67``,
  ``14.3``, ``1.5\\times10^{-10}``) stands for every value that rounds to it, so an answer is accepted
  when its exact value lies within half a unit of the reference's last place (``\\frac{2}{3}`` for 0.67,
  ``\\frac{100}{7}`` for 14.3), unless the answer is itself a decimal *less* precise than the reference.
  An exact reference (integer, fraction, radical, π ...) accepts a decimal answer only within a relative
  ``rel_tol`` (1e-6). So ``37.7`` is not accepted for ``12\\pi``. All numeric tolerances are relative:
  ``10^{-20}`` never equals ``2\\cdot10^{-20}``.
* Multiple-choice references (a single letter A-J, ``(B)``, ``\\text{(C)}``) compare as letters.
* Equations compare as equations (``3x+6y-4=0`` equals ``y=-\\frac12x+\\frac23``), through math-verify.

A reference that yields no value (prose, empty) is ``invalid_ground_truth``: the item must not train.

This module knows nothing of HTTP or processes; :func:`verify_payload` is the entry point that the
server's worker pool calls, with a soft in-process deadline (the pool adds a hard one).
"""

from __future__ import annotations

import enum
import functools
import logging
import math
import re
import signal
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from reward_server.verifiers.latex_value import SAMPLE_POINTS, latex_value

logger = logging.getLogger(__name__)

__all__ = [
    "MathOptions",
    "MathStatus",
    "MathVerdict",
    "Reference",
    "extract_final_answer",
    "init_worker",
    "parse_reference",
    "verify_math",
    "verify_payload",
]


# ============================================================================ public types


class MathStatus(enum.StrEnum):
    """Outcome of one math verification."""

    OK = "ok"  # a verdict was reached
    NO_ANSWER = "no_answer"  # the response has no final answer: correct is False
    INVALID_GROUND_TRUTH = "invalid_ground_truth"  # the reference has no value: no verdict, do not train
    TIMEOUT = "timeout"  # no verdict within the time limit
    ERROR = "error"  # the verifier failed: no verdict


@dataclass(frozen=True, slots=True)
class MathOptions:
    """How to verify. Every field has a safe default; see the module docstring for the policy.

    Attributes:
        fallback: when the response has no box, tag or "answer is" line, take its last number or LaTeX span.
        strict: variables matter (``x+1`` differs from ``y+1``); passed to math-verify.
        rel_tol: relative tolerance when an exact reference meets a decimal answer (or two floats meet).
    """

    fallback: bool = True
    strict: bool = True
    rel_tol: float = 1e-6

    def __post_init__(self) -> None:
        if not (0.0 <= self.rel_tol < 1.0):
            raise ValueError(f"rel_tol must be in [0, 1), got {self.rel_tol}")


@dataclass(frozen=True, slots=True)
class MathVerdict:
    """The verdict for one response. ``correct`` and ``reward`` are ``None`` unless status is ok/no_answer."""

    status: MathStatus
    correct: bool | None
    extracted_answer: str | None = None
    ground_truth_parsed: str | None = None
    detail: str | None = None

    @property
    def reward(self) -> float | None:
        """1.0 if correct, 0.0 if wrong or unanswered, ``None`` if no verdict could be reached."""
        return None if self.correct is None else float(self.correct)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = str(self.status)
        d["reward"] = self.reward
        return d


# ============================================================================ text utilities

# Characters whose meaning we keep by spelling them in LaTeX before anything else looks at the text.
_UNICODE_MATH = {
    "\u2212": "-",  # minus sign
    "\u2013": "-",  # en dash used as minus
    "\u2012": "-",
    "\ufe63": "-",
    "\uff0d": "-",
    "\u00d7": r"\times ",
    "\u22c5": r"\cdot ",
    "\u00b7": r"\cdot ",
    "\u2219": r"\cdot ",
    "\u00f7": r"\div ",
    "\u00b1": r"\pm ",
    "\u2213": r"\mp ",
    "\u03c0": r"\pi ",
    "\u221e": r"\infty ",
    "\u2264": r"\le ",
    "\u2265": r"\ge ",
    "\u2260": r"\ne ",
    "\u2248": r"\approx ",
    "\u00b0": r"^\circ ",
    "\u2218": r"^\circ ",
    "\u2032": "'",
    "\u00a0": " ",
    "\u2009": " ",
    "\u202f": " ",
    "\u2005": " ",
    "\u3000": " ",
    "\u00bd": r"\frac{1}{2}",
    "\u2153": r"\frac{1}{3}",
    "\u2154": r"\frac{2}{3}",
    "\u00bc": r"\frac{1}{4}",
    "\u00be": r"\frac{3}{4}",
    "\u2155": r"\frac{1}{5}",
    "\u2159": r"\frac{1}{6}",
    "\u215b": r"\frac{1}{8}",
}
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_SUPERSCRIPT_RUN = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+")
_SQRT_UNICODE = re.compile(r"[√∛∜]")


def _match_brace(text: str, open_pos: int) -> int | None:
    """Index of the brace closing the one at ``open_pos``, or ``None`` if it is never closed."""
    depth = 0
    i = open_pos
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in "{}":
            i += 2  # an escaped brace \{ or \} does not nest
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _replace_unicode_sqrt(text: str) -> str:
    """``√2`` -> ``\\sqrt{2}``, ``√(x+1)`` -> ``\\sqrt{x+1}``, ``∛8`` -> ``\\sqrt[3]{8}``."""
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c not in "√∛∜":
            out.append(c)
            i += 1
            continue
        root = {"√": "", "∛": "[3]", "∜": "[4]"}[c]
        i += 1
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] in "({":
            close = {"(": ")", "{": "}"}[text[i]]
            depth, j = 0, i
            while j < n:
                if text[j] == text[i]:
                    depth += 1
                elif text[j] == close:
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            arg = text[i + 1 : j]
            i = j + 1
        else:
            m = re.match(r"\d+(?:\.\d+)?|[A-Za-z]|\\[A-Za-z]+", text[i:])
            arg = m.group(0) if m else ""
            i += len(arg)
        out.append(rf"\sqrt{root}{{{arg}}}")
    return "".join(out)


def normalize_unicode(text: str) -> str:
    """Spell unicode math (``−``, ``×``, ``√``, ``°``, ``π``, ``±``, superscripts ...) in LaTeX/ASCII."""
    if text.isascii():
        return text
    text = _SUPERSCRIPT_RUN.sub(lambda m: "^{" + m.group(0).translate(_SUPERSCRIPTS) + "}", text)
    for k, v in _UNICODE_MATH.items():
        if k in text:
            text = text.replace(k, v)
    if _SQRT_UNICODE.search(text):
        text = _replace_unicode_sqrt(text)
    # Full-width digits and letters (common in CJK output) to ASCII; NFKC is safe now that superscripts
    # and vulgar fractions have been spelled out.
    return unicodedata.normalize("NFKC", text)


# ============================================================================ extraction

_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
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


def _find_boxes(text: str) -> list[tuple[int, int, str | None]]:
    """Every outermost ``\\boxed``/``\\fbox`` as (start, end, content); content is ``None`` if unterminated."""
    boxes: list[tuple[int, int, str | None]] = []
    for m in _BOX_CMD.finditer(text):
        if boxes and m.start() < boxes[-1][1]:
            continue  # a box inside another box's content is not a separate answer
        i = m.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            close = _match_brace(text, i)
            if close is None:
                boxes.append((m.start(), len(text), None))
            else:
                boxes.append((m.start(), close + 1, text[i + 1 : close]))
        else:
            # "\boxed 5": the argument is the next token.
            tok = re.match(r"[^\s$\\]+|\\[A-Za-z]+", text[i:])
            content = tok.group(0) if tok else ""
            boxes.append((m.start(), i + len(content), content))
    return boxes


def _strip_outer_boxes(s: str) -> str:
    while True:
        boxes = _find_boxes(s)
        if (
            len(boxes) == 1
            and boxes[0][2] is not None
            and not s[: boxes[0][0]].strip()
            and not s[boxes[0][1] :].strip()
        ):
            s = boxes[0][2]
            continue
        return s


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


# ============================================================================ normalisation

# A row break "\\\\" is kept (group 1); spacing commands become a space.
_SPACING = re.compile(r"(\\\\)|\\[,;:!> ]|\\(?:q?quad|hspace\{[^}]*\}|thinspace|medspace|thickspace|enspace)|~")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big|biggl|biggr)(?![A-Za-z])\s*")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|operatorname|textnormal)\s*\{")
_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\degree|\^\s*\{\s*\\text\{\s*o\s*\}\s*\}|\\circ")
_PERCENT = re.compile(r"\s*(?:\\%|%|\\text\{\s*percent\s*\}|\bpercent\b|\\text\{\s*\\%\s*\})")
_CURRENCY = re.compile(r"\\\$|\$|\\(?:pounds|euro|yen)\b|[€£¥₹]|\b(?:USD|EUR|Rs\.?)\s*")
# Not inside brackets: "(12,102)" is a pair, "15,600" a number.
_THOUSANDS = re.compile(r"(?<![\d.,(\[])([1-9]\d{0,2}(?:(?:,|\{,\})\d{3})+)(?![\d,)\]]|\{,\})")
_SPACE_THOUSANDS = re.compile(r"(?<![\d.])([1-9]\d{0,2}(?: \d{3})+)(?![\d.])")
_MIXED_LATEX = re.compile(r"(?<![\d.}^_])(-?)(\d+)\s*\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_MIXED_PLAIN = re.compile(r"(?<![\d./^])(-?)(\d+)\s+(\d+)\s*/\s*(\d+)(?![\d./])")
_FRAC_SHORT = re.compile(r"\\frac\s*(\d)\s*(\d)")
# TeX takes one token as the argument: "\sqrt3" is \sqrt{3}, "\sqrt 23" is \sqrt{2}3.
_SQRT_SHORT = re.compile(r"\\sqrt\s*([0-9A-Za-z])")
_SINGLE_LETTER_TEXT = re.compile(r"\\(?:mathrm|mathit|text|operatorname|mathbf)\s*\{\s*([A-Za-z])\s*\}")
_FRAC_HALF_SHORT = re.compile(r"\\frac\s*(\d)\s*(\{)|\\frac\s*(\{[^{}]*\})\s*(\d)")
_DFRAC = re.compile(r"\\[dtc]frac")
_TEXT_NO_LETTERS = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}A-Za-z]*)\}")
_LEADING_VAR = re.compile(r"^\s*(?:[A-Za-z](?:_\{?\w+\}?)?|\\[A-Za-z]+)\s*(?:=|\\in)\s*(?=[^=]+$)")
_MC_LETTER = re.compile(
    r"^\s*(?:\\text(?:bf)?\{\s*)?(?:\(\s*([A-J])\s*\)|([A-J])\s*[).:]?)(?:\s*\})?(?:\s.*)?$", re.DOTALL
)
_TRAILING_WORDS = re.compile(r"(?<=[\d}a-zA-Z)])\s+(?:[A-Za-z]{2,}\.?)(?:\s+[A-Za-z]+\.?)*\s*$")


def _unwrap_text_commands(s: str) -> str:
    """``\\text{abc}`` -> ``abc`` (the command only; braces matched properly)."""
    while True:
        m = _TEXT_CMD.search(s)
        if not m:
            return s
        close = _match_brace(s, m.end() - 1)
        if close is None:
            return s[: m.start()] + s[m.end() :]
        s = s[: m.start()] + s[m.end() : close] + s[close + 1 :]


def _strip_math_delimiters(s: str) -> str:
    s = s.strip()
    for left, right in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left) : len(s) - len(right)].strip()
    return s


def normalize_answer(s: str) -> str:
    """Normalise one answer string (LaTeX or plain) so that equal values are written alike where cheap.

    Removes what does not change the value: math delimiters, ``\\displaystyle``, ``\\left``/``\\right``,
    spacing commands, currency signs, degree marks, units after a value, thousands separators; spells
    unicode math; rewrites ``\\dfrac`` and ``\\frac34``; turns mixed numbers into fractions. The result is
    still LaTeX for latex2sympy.
    """
    s = normalize_unicode(s)
    s = _strip_outer_boxes(_strip_math_delimiters(s))
    s = _strip_math_delimiters(s)
    s = s.replace("\\displaystyle", "").replace("\\mathdollar", "")
    s = _TEXT_NO_LETTERS.sub(r"\1", s)
    if _SINGLE_LETTER_TEXT.search(s) and not _SINGLE_LETTER_TEXT.fullmatch(s.strip()):
        s = _SINGLE_LETTER_TEXT.sub(r"\1", s)  # "1 - \frac{1}{\mathrm{e}}": a constant, not a word
    s = _DFRAC.sub(r"\\frac", s)
    s = _LEFT_RIGHT.sub("", s)
    # "11,\! 111,\! 100": a comma followed by a negative thin space is a thousands separator.
    s = re.sub(r"(?<=\d),\s*\\!\s*(?=\d{3}(?!\d))", "", s)
    s = re.sub(r"(?<!\\)\\!", "", s)
    s = _SPACING.sub(lambda m: m.group(1) or " ", s)
    s = _DEGREE.sub("", s)
    s = _CURRENCY.sub("", s)
    s = re.sub(r"\\text\{\s*(?:and|or)\s*\}|\s+(?:and|or)\s+", ", ", s)
    s = s.replace("{,}", ",")
    s = _THOUSANDS.sub(lambda m: m.group(1).replace("{,}", "").replace(",", ""), s)
    s = _SPACE_THOUSANDS.sub(lambda m: m.group(1).replace(" ", ""), s)
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s = _FRAC_HALF_SHORT.sub(
        lambda m: rf"\frac{{{m.group(1)}}}{{" if m.group(1) else rf"\frac{m.group(3)}{{{m.group(4)}}}", s
    )
    s = _MIXED_LATEX.sub(_mixed_to_frac, s)
    s = _MIXED_PLAIN.sub(_mixed_to_frac, s)
    s = s.strip().rstrip(".").strip()
    # A unit after a value ("15600 dollars", "18 \text{cm}^2", "5 apples") does not change it.
    s = _strip_units(s)
    return re.sub(r"\s+", " ", s).strip()


def _brace_frac_args(m: re.Match[str]) -> str:
    """``\\frac1{x}`` -> ``\\frac{1}{x}``; ``\\frac{x}2`` -> ``\\frac{x}{2}`` (TeX reads one token)."""
    if m.group(1):
        return rf"\frac{{{m.group(1)}}}{{"
    return rf"\frac{m.group(3)}{{{m.group(4)}}}"


def _mixed_to_frac(m: re.Match[str]) -> str:
    sign, whole, num, den = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
    if den == 0 or num >= den:
        return m.group(0)  # "2\frac{5}{3}" is a product, not a mixed number
    value = Fraction(whole * den + num, den)
    return f"{sign}\\frac{{{value.numerator}}}{{{value.denominator}}}"


_UNIT_TEXT = re.compile(r"\s*\\(?:text|mbox|mathrm|textrm)\s*\{\s*[A-Za-z][A-Za-z .\-/]*\}(?:\s*\^\s*\{?\d\}?)?\s*$")


def _strip_units(s: str) -> str:
    for _ in range(3):
        t = _UNIT_TEXT.sub("", s)
        t = _TRAILING_WORDS.sub("", t) if re.search(r"\d", t) else t
        t = t.strip()
        if not t or t == s:
            break
        s = t
    return s


# ============================================================================ numbers

_PLAIN_NUMBER = re.compile(r"^([-+]?)(\d+)?(?:\.(\d+))?$")
_SCI = re.compile(
    r"^([-+]?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?$|^([-+]?\d+(?:\.\d+)?)[eE]([-+]?\d+)$"
)
_LATEX_FRAC = re.compile(r"^([-+]?)\\frac\{\s*([-+]?\d+)\s*\}\{\s*([-+]?\d+)\s*\}$")
_SLASH_FRAC = re.compile(r"^([-+]?)(\d+)\s*/\s*(\d+)$")


@dataclass(frozen=True, slots=True)
class Num:
    """An exact rational read from text, with the precision it was written at.

    ``quantum`` is the unit of the last written decimal place (``0.67`` -> 1/100), ``None`` when exact.
    """

    value: Fraction
    quantum: Fraction | None = None
    percent: bool = False


def parse_number(s: str) -> Num | None:
    """Read ``s`` as a plain number (integer, decimal, fraction, scientific, percent), else ``None``."""
    s = s.strip().replace(" ", "")
    percent = False
    m = _PERCENT.search(s)
    if m and m.end() == len(s):
        s = s[: m.start()]
        percent = True
    if not s or len(s) > 400:
        return None
    if s[0] == "(" and s[-1] == ")" and s.count("(") == 1:
        s = s[1:-1]
    if s.startswith("{") and s.endswith("}") and s.count("{") == 1:
        s = s[1:-1]
    m = _PLAIN_NUMBER.match(s)
    if m and (m.group(2) or m.group(3)):
        sign = -1 if m.group(1) == "-" else 1
        frac_digits = m.group(3) or ""
        value = Fraction(int((m.group(2) or "0") + frac_digits), 10 ** len(frac_digits))
        quantum = Fraction(1, 10 ** len(frac_digits)) if frac_digits else None
        return Num(sign * value, quantum, percent)
    m = _LATEX_FRAC.match(s) or _SLASH_FRAC.match(s)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        den = int(m.group(3))
        if den == 0:
            return None
        return Num(sign * Fraction(int(m.group(2)), den), None, percent)
    m = _SCI.match(s)
    if m:
        mantissa, exp = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        exp_i = int(exp)
        if abs(exp_i) > 400:
            return None
        mant = parse_number(mantissa)
        if mant is None:
            return None
        scale = Fraction(10) ** exp_i
        return Num(mant.value * scale, (mant.quantum or Fraction(1)) * scale, percent)
    return None


def _numbers_match(gold: Num, ans: Num, rel_tol: float) -> bool:
    """The numeric policy: the reference sets the precision (module docstring)."""
    g_vals = [gold.value] + ([gold.value / 100] if gold.percent else [])
    a_vals = [ans.value] + ([ans.value / 100] if ans.percent and not gold.percent else [])
    for g in g_vals:
        for a in a_vals:
            if a == g:
                return True
            if gold.quantum is not None:
                # The answer must be at least as precise as the reference, and round to it.
                if ans.quantum is not None and ans.quantum > gold.quantum:
                    continue
                if abs(a - g) * 2 <= gold.quantum:
                    return True
            elif ans.quantum is not None and g != 0 and abs(a - g) <= Fraction(rel_tol) * abs(g):
                return True
    return False


# ============================================================================ the reference


@dataclass(frozen=True)
class Reference:
    """A parsed reference answer (cached per worker: a group parses its reference once).

    Attributes:
        raw: the reference as given.
        answer: the final answer text taken out of it (``#### 42`` -> ``42``; last box of a solution).
        kind: ``choice`` (a multiple-choice letter), ``text`` (a word answer), or ``math``.
        members: the values a complete answer must give: one, or several for a list/set/``±`` reference.
        norm: the normalised answer as a whole (tuples, intervals, sets compare as one object).
        letter: the letter of a ``choice`` reference.
        invalid: why the reference has no value, or ``None``.
    """

    raw: str
    answer: str
    kind: str
    members: tuple[str, ...]
    norm: str = ""
    letter: str | None = None
    invalid: str | None = None

    @property
    def shown(self) -> str:
        if self.kind == "choice":
            return str(self.letter)
        return ", ".join(self.members) if len(self.members) > 1 else (self.members[0] if self.members else "")


_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def _reference_answer_text(raw: str) -> str:
    """The answer inside a reference: bare, ``$...$``, ``\\boxed{}`` (last), or GSM8K ``#### 42``."""
    text = raw.strip()
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip()
        return text.splitlines()[0].strip() if text else ""
    boxes = _find_boxes(text)
    if boxes and boxes[-1][2] is not None:
        # A worked solution (MATH): its answer is the last box, plus boxes joined to it.
        ext = _box_answer(text, boxes, liberal=True)
        if ext.parts:
            return ", ".join(ext.parts)
    return text


def _split_top_level(s: str, seps: str = ",;") -> list[str]:
    """Split on separators that are outside every bracket: ``1, (2,3)`` -> ``1``, ``(2,3)``."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s) and s[i + 1] in "{}":
            cur.append(s[i : i + 2])
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c in seps and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_pm(s: str) -> list[str]:
    r"""``\pm 17`` -> ``17``, ``-17``; ``1 \pm \sqrt{2}`` -> ``1 + \sqrt{2}``, ``1 - \sqrt{2}``."""
    m = re.search(r"\\(?:pm|mp)(?![A-Za-z])", s)
    if not m:
        return [s]
    head, tail = s[: m.start()].rstrip(), s[m.end() :].lstrip()
    if not head or head.endswith(("=", "(", ",")):
        plus, minus = head + tail, head + "-" + tail
    else:
        plus, minus = head + "+" + tail, head + "-" + tail
    return _expand_pm(plus) + _expand_pm(minus)


def _members(answer: str) -> list[str]:
    """The values an answer gives: split a bare list, unwrap a set ``\\{...\\}``, expand ``±``."""
    s = answer.strip()
    if s.startswith("\\{") and s.endswith("\\}"):
        s = s[2:-2]
    parts = _split_top_level(s)
    out: list[str] = []
    for p in parts:
        # "x = 5" gives the value 5; "y = 2x + 3" is an equation and stays one.
        m = _LEADING_VAR.match(p)
        if m and not re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", p[m.end() :])):
            p = p[m.end() :]
        p = p.strip()
        out.extend(x.strip() for x in _expand_pm(p))
    return [p for p in out if p]


def _choice_letter(s: str) -> str | None:
    s = _unwrap_text_commands(s.strip()).strip().strip("*").strip()
    m = _MC_LETTER.match(s)
    if not m:
        return None
    letter = m.group(1) or m.group(2)
    rest = s[m.end(1) if m.group(1) else m.end(2) :]
    # "A" alone, "(B)", "C)", "(D) 12" are letters; "A = 5" or "B^2" are not.
    if re.match(r"^\s*\)?\s*[.:]?\s*$", rest) or re.match(r"^\s*\)\s", rest):
        return letter
    return None


def _looks_like_prose(s: str) -> bool:
    words = re.findall(r"[A-Za-z]{2,}", _unwrap_text_commands(s))
    latex_cmds = re.findall(r"\\[A-Za-z]+", s)
    return len(words) >= 4 and len(latex_cmds) <= len(words) // 4


def parse_reference(raw: str, options: MathOptions | None = None) -> Reference:
    """Parse a reference answer once: extract its answer, classify it, and parse its members.

    Accepts a bare answer (``42``, ``\\frac{1}{2}``), one in ``$...$``, in ``\\boxed{}``, a worked
    solution ending in a box, or a GSM8K solution ending in ``#### 42``. Never raises: a reference without
    a value is returned with ``invalid`` set.
    """
    options = options or MathOptions()
    answer_text = _reference_answer_text(raw)
    if not answer_text.strip():
        return Reference(raw, "", "math", (), invalid="the reference answer is empty")
    letter = _choice_letter(normalize_unicode(_strip_math_delimiters(answer_text)))
    if letter is not None:
        return Reference(raw, answer_text, "choice", (letter,), letter=letter)
    norm = normalize_answer(answer_text)
    if not norm:
        return Reference(raw, answer_text, "math", (), invalid="the reference answer is empty")
    if _looks_like_prose(norm):
        return Reference(raw, answer_text, "math", (), invalid="the reference is prose, not an answer")
    members = _members(norm)
    if _is_word_answer(norm):
        return Reference(raw, answer_text, "text", (_unwrap_text_commands(norm).strip().lower(),), norm)
    if not _has_a_value(members, norm):
        plain = _unwrap_text_commands(norm).strip()
        if re.fullmatch(r"[A-Za-z][A-Za-z '\-]{0,40}", plain) and len(plain.split()) <= 3:
            return Reference(raw, answer_text, "text", (plain.lower(),), norm)
        return Reference(raw, answer_text, "math", (), invalid=f"the reference {answer_text[:80]!r} cannot be parsed")
    return Reference(raw, answer_text, "math", tuple(members), norm)


_MATHY = re.compile(r"\d|\\(?:frac|sqrt|pi|infty|begin|cup|cap|le|ge|ne|pm|sin|cos|tan|log|ln)(?![A-Za-z])|[=^_<>]")


def _has_a_value(members: list[str], norm: str) -> bool:
    """Does the reference hold a value? Cheap checks first; sympy only for what they cannot read."""
    if any(parse_number(m) is not None or latex_value(m, SAMPLE_POINTS[0]) is not None for m in members):
        return True
    if _MATHY.search(norm):
        return True  # digits, operators or math commands: an expression, a set, an interval, a matrix
    if any(_has_value(_mv_parse(m, gold=True)) for m in members):
        return True
    return len(members) > 1 and _has_value(_mv_parse(norm, gold=True))


def _is_word_answer(norm: str) -> bool:
    plain = _unwrap_text_commands(norm).strip()
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z '\-]{2,40}", plain)) and "\\" not in plain and len(plain.split()) <= 3


# ============================================================================ math-verify glue


def _mv_configs() -> tuple[Any, Any]:
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig

    # Predictions: math-verify's README recommendation for rewards (a fully valid LaTeX answer);
    # references: its lenient default (malformed operators and nits fixed).
    pred = LatexExtractionConfig(
        boxed_match_priority=0,
        try_extract_without_anchor=False,
        normalization_config=NormalizationConfig(
            basic_latex=True, units=True, malformed_operators=False, nits=False, boxed="all", equations=False
        ),
    )
    gold = LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)
    return pred, gold


@functools.cache
def _configs() -> tuple[Any, Any]:
    return _mv_configs()


@functools.lru_cache(maxsize=8192)
def _mv_parse(s: str, *, gold: bool) -> Any:
    """math-verify's parse of one clean answer string: a sympy object, or ``None`` if it has no value."""
    from math_verify import parse

    pred_cfg, gold_cfg = _configs()
    # Wrapped in \boxed{} so that math-verify takes the whole string as the answer.
    result = parse("\\boxed{" + s + "}", [gold_cfg if gold else pred_cfg], parsing_timeout=None)
    for r in result:
        if not isinstance(r, str):
            return r
    return None


def _has_value(expr: Any) -> bool:
    if expr is None:
        return False
    from sympy import Symbol

    # Prose parsed as a product of many one-letter symbols ("See the solution") is not a value.
    free: set[Any] = getattr(expr, "free_symbols", set())
    return not (len(free) > 6 and all(isinstance(f, Symbol) for f in free))


def _mv_equal(gold: Any, pred: Any, options: MathOptions) -> bool:
    from math_verify import verify

    if gold is None or pred is None:
        return False
    numeric = _numeric_equal(gold, pred, options)
    if numeric is not None:
        return numeric
    return bool(verify(gold, pred, strict=options.strict, timeout_seconds=None, raise_on_error=False))


def _numeric_equal(gold: Any, pred: Any, options: MathOptions) -> bool | None:
    """Compare two constant expressions by value with a *relative* tolerance, or ``None`` to defer.

    math-verify's numeric path uses ``evalf(chop=True)`` and absolute rounding, under which 1e-20 equals
    2e-20; constants are compared here instead.
    """
    from sympy import Expr, Float, N

    if not isinstance(gold, Expr) or not isinstance(pred, Expr):
        return None
    if gold.free_symbols or pred.free_symbols:
        return None
    if not (gold.is_number and pred.is_number):
        return None
    try:
        g = complex(N(gold, 30))
        p = complex(N(pred, 30))
    except (TypeError, ValueError, OverflowError):
        return None
    if any(math.isnan(x) or math.isinf(x) for x in (g.real, g.imag, p.real, p.imag)):
        return None
    has_float = bool(gold.atoms(Float) or pred.atoms(Float))
    tol = options.rel_tol if has_float else 1e-12
    scale = max(abs(g), abs(p))
    if scale == 0:
        return True
    return abs(g - p) <= tol * scale


# ============================================================================ comparison


_BASE_NUMBER = re.compile(r"^([0-9A-Z]+)_\{?\s*(\d{1,2})\s*\}?$")


def _base_value(s: str, default_base: int | None = None) -> int | None:
    """``52_8`` -> 42 (52 read in base 8). A bare ``52`` is read in ``default_base`` when one is given."""
    m = _BASE_NUMBER.match(s.replace(" ", ""))
    digits, base = (m.group(1), int(m.group(2))) if m else (s.strip(), default_base)
    if base is None or not 2 <= base <= 36:
        return None
    try:
        return int(digits, base)
    except ValueError:
        return None


@functools.lru_cache(maxsize=16384)
def _member_match(gold: str, ans: str, options: MathOptions) -> bool:
    """Is the answer member ``ans`` equal to the reference member ``gold``? (Both normalised.)

    Cached: completions of one group often repeat an answer, so each distinct pair is compared once.
    """
    if gold == ans:
        return True
    gold_num = parse_number(gold)
    gold_base = _BASE_NUMBER.match(gold.replace(" ", ""))
    if gold_base or _BASE_NUMBER.match(ans.replace(" ", "")):
        # Numbers with a base subscript compare by value; a bare answer is read in the reference's base.
        g = (
            _base_value(gold)
            if gold_base
            else (int(gold_num.value) if gold_num and gold_num.value.denominator == 1 else None)
        )
        a = _base_value(ans, int(gold_base.group(2)) if gold_base else None)
        return g is not None and a is not None and g == a
    ans_num = parse_number(ans)
    if gold_num is not None and ans_num is not None:
        return _numbers_match(gold_num, ans_num, options.rel_tol)
    # Constants that a float tells apart skip sympy (~10 ms a parse): \frac{\sqrt{21}}{5} vs \frac{\sqrt{21}}{6}.
    fast_ans = complex(ans_num.value) if ans_num is not None else latex_value(ans)
    if gold_num is not None:
        # A numeric reference against a symbolic answer (\frac{100}{7}, \sqrt{2}, 2\pi): compare by value.
        if fast_ans is not None:
            return fast_ans.imag == 0 and _numbers_match(gold_num, Num(Fraction(fast_ans.real)), options.rel_tol)
        value = _constant_value(_mv_parse(ans, gold=False))
        return value is not None and _numbers_match(gold_num, value, options.rel_tol)
    fast_gold = latex_value(gold)
    if fast_gold is not None and fast_ans is not None:
        if ans_num is not None and fast_gold.imag == 0:
            # A decimal answer for an exact constant reference: the relative tolerance decides.
            return _numbers_match(Num(Fraction(fast_gold.real)), ans_num, options.rel_tol)
        if not _close(fast_gold, fast_ans):
            return False
        # Equal as floats: confirm exactly with sympy below.
    elif options.strict and (_differ_at_a_point(gold, ans) or _structures_differ(gold, ans)):
        # "15x - 80" vs "15x - 81", "(3, 5]" vs "(3, 4]": different at a point, so different.
        return False
    pred = _mv_parse(ans, gold=False)
    gold_parsed = _mv_parse(gold, gold=True)
    if ans_num is not None and gold_parsed is not None:
        gval = _constant_value(gold_parsed)
        if gval is not None:
            return _numbers_match(gval, ans_num, options.rel_tol)
    return _mv_equal(gold_parsed, pred, options)


def _close(a: complex, b: complex) -> bool:
    # Generous against float rounding; anything closer goes on to sympy, which decides exactly.
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1e-300)


def _differ_at_a_point(gold: str, ans: str) -> bool:
    for point in SAMPLE_POINTS:
        g, a = latex_value(gold, point), latex_value(ans, point)
        if g is None or a is None:
            return False
        if not _close(g, a):
            return True
    return False


_MATRIX = re.compile(r"\\begin\{([a-zA-Z]*matrix)\}(.*)\\end\{\1\}", re.DOTALL)


def _components(s: str) -> tuple[str, list[str]] | None:
    """A matrix, tuple or interval as (shape, entries); ``None`` for anything else."""
    s = s.strip()
    m = _MATRIX.fullmatch(s)
    if m:
        rows = [r for r in m.group(2).split("\\\\") if r.strip()]
        cells = [c.strip() for r in rows for c in r.split("&")]
        return f"{m.group(1)}:{len(rows)}x{len(cells) // max(1, len(rows))}", cells
    if len(s) >= 5 and s[0] in "([" and s[-1] in ")]" and _match_bracket(s) == len(s) - 1:
        parts = _split_top_level(s[1:-1], ",")
        if len(parts) >= 2:
            return f"{s[0]}{s[-1]}{len(parts)}", parts
    return None


def _match_bracket(s: str) -> int:
    depth = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _structures_differ(gold: str, ans: str) -> bool:
    """Two matrices/tuples/intervals of the same shape with an entry that differs at a point."""
    g, a = _components(gold), _components(ans)
    if g is None or a is None or g[0] != a[0]:
        return False
    return any(_differ_at_a_point(gc, ac) for gc, ac in zip(g[1], a[1], strict=True))


def _constant_value(expr: Any) -> Num | None:
    """An exact-or-float constant as a :class:`Num` (floats keep their precision), else ``None``."""
    from sympy import Expr, Float, N, Rational

    if not isinstance(expr, Expr) or expr.free_symbols or not expr.is_number:
        return None
    try:
        if isinstance(expr, Rational):
            return Num(Fraction(int(expr.p), int(expr.q)))
        if expr.atoms(Float):
            return None  # a float's written precision is lost in sympy; leave it to the symbolic path
        v = N(expr, 40)
        if not v.is_real:
            return None
        # An irrational constant, to 40 digits: exact for every comparison the policy makes.
        return Num(Fraction(str(v)))
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None


def _distinct(members: Sequence[str]) -> list[str]:
    """Drop repeats (the same number, or the same text up to spacing): "7, 007" is one value."""
    out: list[str] = []
    seen: set[object] = set()
    for m in members:
        n = parse_number(m)
        key: object = n.value if n is not None else re.sub(r"\s+", "", m)
        if key not in seen:
            seen.add(key)
            out.append(m)
    return out


def answers_match(ref: Reference, answer: str, options: MathOptions) -> tuple[bool, str | None]:
    """Does ``answer`` (an extracted final answer) equal the reference? Returns (verdict, detail)."""
    if ref.kind == "choice":
        letter = _choice_letter(normalize_unicode(_strip_math_delimiters(answer)))
        if letter is None:
            # "\boxed{12}" for a letter reference: not a letter, so not the choice.
            return False, "the reference is a multiple-choice letter; the answer is not a letter"
        return letter == ref.letter, None
    norm = normalize_answer(answer)
    if ref.kind == "text":
        plain = _unwrap_text_commands(norm).strip().lower()
        return plain == ref.members[0].lower(), None
    members = _distinct(_members(norm))
    if not members:
        return False, "the final answer is empty after normalisation"
    if len(ref.members) == 1:
        if len(members) == 1:
            return _member_match(ref.members[0], members[0], options), None
        # Several values for a single-valued reference: right only if the answer as a whole is one object
        # equal to it (a tuple or interval written with commas), never as a hedge.
        if _mv_equal(_mv_parse(ref.norm, gold=True), _mv_parse(norm, gold=False), options):
            return True, None
        return False, f"the final answer gives {len(members)} different values for a single-valued reference"
    # A list/set/± reference: all of its members, in any order, and nothing else.
    if len(members) != len(ref.members):
        if len(members) == 1 and _mv_equal(_mv_parse(ref.norm, gold=True), _mv_parse(norm, gold=False), options):
            return True, None
        return False, f"the reference has {len(ref.members)} values; the answer gives {len(members)}"
    return _perfect_matching(ref, members, options), None


def _perfect_matching(ref: Reference, members: list[str], options: MathOptions) -> bool:
    n = len(members)
    match_of: dict[int, int] = {}

    def ok(i: int, j: int) -> bool:
        return _member_match(ref.members[i], members[j], options)

    # Bipartite matching (Kuhn); lists are short.
    edges = [[j for j in range(n) if ok(i, j)] for i in range(n)]

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in match_of or augment(match_of[j], seen):
                match_of[j] = i
                return True
        return False

    return all(augment(i, set()) for i in range(n))


# ============================================================================ entry points


def verify_math(
    response: str,
    ground_truth: str | Reference,
    options: MathOptions | None = None,
) -> MathVerdict:
    """Verify one response against a reference answer.

    Args:
        response: the completion text.
        ground_truth: the reference answer (see :func:`parse_reference`), or an already parsed one.
        options: the comparison options.

    Returns:
        A :class:`MathVerdict`. Never raises for bad input: an unparsable reference gives
        ``invalid_ground_truth``, a response without a final answer ``no_answer``. This function has no
        time limit of its own; callers in a server run it under :func:`verify_payload`'s deadline.
    """
    options = options or MathOptions()
    ref = ground_truth if isinstance(ground_truth, Reference) else parse_reference(ground_truth, options)
    if ref.invalid:
        return MathVerdict(MathStatus.INVALID_GROUND_TRUTH, None, detail=ref.invalid)
    extraction = extract_final_answer(response, fallback=options.fallback)
    if not extraction.parts:
        return MathVerdict(MathStatus.NO_ANSWER, False, None, ref.shown, extraction.detail)
    answer = ", ".join(extraction.parts)
    correct, detail = answers_match(ref, answer, options)
    return MathVerdict(MathStatus.OK, correct, answer, ref.shown, detail)


# --- worker side --------------------------------------------------------------------------------

_cached_reference: Callable[[str, MathOptions], Reference] = functools.lru_cache(maxsize=4096)(parse_reference)


class _SoftDeadline(BaseException):
    """Raised by SIGALRM inside a worker. A BaseException, so no ``except Exception`` in sympy or
    math-verify swallows it and turns a timeout into a silent wrong answer."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _SoftDeadline


def init_worker(cache_size: int = 4096) -> None:
    """Per-process set-up, called once by each pool worker: size the reference cache, warm the parser."""
    global _cached_reference
    _cached_reference = functools.lru_cache(maxsize=cache_size)(parse_reference)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    signal.signal(signal.SIGALRM, _on_alarm)
    # Warm up antlr/sympy so the first real item does not pay for lazy imports.
    verify_math("\\boxed{\\frac{1}{2}}", "0.5")


def options_from_dict(d: dict[str, Any] | None) -> MathOptions:
    """Build :class:`MathOptions` from a JSON-like dict (unknown keys were rejected by the schema)."""
    if not d:
        return MathOptions()
    return MathOptions(**{k: v for k, v in d.items() if k in MathOptions.__dataclass_fields__})


def verify_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point: ``{"response", "ground_truth", "options"?, "timeout_s"?}`` -> verdict dict.

    ``timeout_s`` arms a soft deadline (SIGALRM) that turns a slow sympy call into ``timeout`` without
    killing the worker; code stuck in C ignores it, and the pool's hard deadline kills the worker instead.
    """
    options = options_from_dict(payload.get("options"))
    timeout_s = float(payload.get("timeout_s") or 0)
    if timeout_s > 0:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        ref = _cached_reference(payload["ground_truth"], options)
        verdict = verify_math(payload["response"], ref, options)
    except _SoftDeadline:
        verdict = MathVerdict(MathStatus.TIMEOUT, None, detail=f"no verdict within {timeout_s:g} s")
    except RecursionError:
        verdict = MathVerdict(MathStatus.ERROR, None, detail="expression too deeply nested")
    except MemoryError:
        verdict = MathVerdict(MathStatus.ERROR, None, detail="out of memory while verifying")
    finally:
        if timeout_s > 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return verdict.to_dict()
