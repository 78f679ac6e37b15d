"""Answers written in other forms than LaTeX, read as LaTeX: numbers in English words ("three hundred and five")
and expressions in code syntax (sympy's and Python's printing: ``sqrt(5)``, ``3*sqrt(2)``, ``pi/6``, ``x**2``,
``Matrix([[3, 4]])``). Both are pure string functions, linear in the length of the answer."""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = [
    "NUMBER_WORD",
    "closing_bracket",
    "code_to_latex",
    "looks_like_code",
    "read_number_words",
    "split_top_level",
]

_UNITS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
}
_TEENS = {
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
# "three quarters", "two thirds", "one half": the denominator words of a simple fraction.
_DENOMINATORS = {
    "half": 2,
    "halves": 2,
    "third": 3,
    "thirds": 3,
    "quarter": 4,
    "quarters": 4,
    "fourth": 4,
    "fourths": 4,
    "fifth": 5,
    "fifths": 5,
    "sixth": 6,
    "sixths": 6,
    "seventh": 7,
    "sevenths": 7,
    "eighth": 8,
    "eighths": 8,
    "ninth": 9,
    "ninths": 9,
    "tenth": 10,
    "tenths": 10,
    "hundredth": 100,
    "hundredths": 100,
}
_CARDINAL_WORDS = {*_UNITS, *_TEENS, *_TENS, *_SCALES, "hundred", "dozen"}
# A word that can only be part of a number (not "a", "and", "point", which also occur in prose).
NUMBER_WORD = re.compile(r"\b(?:" + "|".join(sorted(_CARDINAL_WORDS, key=len, reverse=True)) + r")\b", re.IGNORECASE)
_TOKEN = re.compile(r"[A-Za-z]+")


class _NotANumber(Exception):
    pass


def _cardinal(words: list[str]) -> int:
    """An English cardinal ("three hundred and five", "twenty-one", "a thousand") as an int; raises
    :class:`_NotANumber` for a sequence that is not one ("twenty twelve", "five three")."""
    total, group, last = 0, 0, ""  # last: the kind of the previous word, for the grammar
    last_scale = 10**18
    for i, w in enumerate(words):
        if w == "a" and i + 1 < len(words) and words[i + 1] in ("hundred", "dozen", *_SCALES):
            group, last = 1, "unit"
        elif w == "and":
            if last not in ("hundred", "scale") or i + 1 == len(words):
                raise _NotANumber(w)
        elif w in _UNITS or w in _TEENS:
            if last in ("unit", "teen"):
                raise _NotANumber(w)
            if last == "tens" and w in _TEENS:
                raise _NotANumber(w)
            group += _UNITS.get(w, _TEENS.get(w, 0))
            last = "unit" if w in _UNITS else "teen"
        elif w in _TENS:
            if last in ("unit", "teen", "tens"):
                raise _NotANumber(w)
            group += _TENS[w]
            last = "tens"
        elif w == "hundred":
            if not 1 <= group <= 9 or last == "hundred":
                raise _NotANumber(w)
            group *= 100
            last = "hundred"
        elif w == "dozen":
            group = (group or 1) * 12
            last = "scale"
        elif w in _SCALES:
            scale = _SCALES[w]
            if group == 0 or scale >= last_scale:
                raise _NotANumber(w)
            total += group * scale
            group, last, last_scale = 0, "scale", scale
        else:
            raise _NotANumber(w)
    if last == "":
        raise _NotANumber("empty")
    return total + group


def read_number_words(s: str) -> tuple[Fraction, str] | None:
    """Read a number written in English words at the start of ``s``: (its value, the rest of ``s``).

    ``"three hundred and five"`` -> 305, ``"twenty-one apples"`` -> (21, ``" apples"``), ``"minus four"`` -> -4,
    ``"two thirds"`` -> 2/3, ``"one and a half"`` -> 3/2, ``"three point five"`` -> 7/2. ``None`` when ``s`` does
    not start with a number word.

    Raises:
        ValueError: ``s`` starts with number words that form no number ("twenty twelve", "one thirds"); the
            caller decides what an unreadable number means.
    """
    tokens = [(m.group().lower(), m.start(), m.end()) for m in _TOKEN.finditer(s)]
    if not tokens or not re.fullmatch(r"[\s\-]*", s[: tokens[0][1]]):
        return None
    first, sign = 0, 1
    if tokens[0][0] in ("minus", "negative"):
        first, sign = 1, -1
    # The number's words: cardinal words, "a" and "and", joined only by spaces, hyphens and commas.
    last = first
    while last < len(tokens):
        word, word_start, _ = tokens[last]
        if last > 0 and not re.fullmatch(r"[\s,\-]*", s[tokens[last - 1][2] : word_start]):
            break
        if word not in _CARDINAL_WORDS and word not in ("a", "and"):
            break
        last += 1
    while last > first and tokens[last - 1][0] in ("a", "and"):
        last -= 1
    words = [w for w, _, _ in tokens[first:last]]
    if not words or (words[0] not in _CARDINAL_WORDS and words[0] != "a"):
        return None
    if not any(w in _CARDINAL_WORDS for w in words):
        return None
    try:
        value = Fraction(_cardinal(words))
    except _NotANumber as exc:
        raise ValueError(f"number words that form no number: {' '.join(words)!r}") from exc
    end = tokens[last - 1][2]
    rest_tokens = tokens[last:]
    joined = bool(rest_tokens) and re.fullmatch(r"[\s\-]*", s[end : rest_tokens[0][1]]) is not None
    if joined and rest_tokens[0][0] in _DENOMINATORS:
        # "two thirds", "one half": a fraction; "one thirds" and "two third" are no number.
        word, _, word_end = rest_tokens[0]
        if (value == 1) == word.endswith("s"):
            raise ValueError(f"number words that form no number: {s[:word_end]!r}")
        return sign * value / _DENOMINATORS[word], s[word_end:]
    and_a = joined and [t[0] for t in rest_tokens[:2]] == ["and", "a"] and len(rest_tokens) > 2
    if and_a and rest_tokens[2][0] in ("half", "third", "quarter"):  # "one and a half"
        return sign * (value + Fraction(1, _DENOMINATORS[rest_tokens[2][0]])), s[rest_tokens[2][2] :]
    if joined and rest_tokens[0][0] == "point":  # "three point five"
        digits, rest = "", s[rest_tokens[0][2] :]
        for word, _, word_end in rest_tokens[1:]:
            if word not in _UNITS:
                break
            digits += str(_UNITS[word])
            rest = s[word_end:]
        if not digits:
            raise ValueError("number words that form no number: 'point' without digits")
        return sign * (value + Fraction(int(digits), 10 ** len(digits))), rest
    return sign * value, s[end:]


# ============================================================================ code syntax

# Function calls and operators that only code writes: sympy's str() and Python's math.
_CODE_MARK = re.compile(
    r"\b(?:sqrt|cbrt|exp|log|ln|sin|cos|tan|asin|acos|atan|arcsin|arccos|arctan|abs|Abs|Matrix|Rational)\s*\("
    r"|\bpi\b|\*\*|\[\s*\["
)
_FUNCTIONS = {
    "sin": r"\sin",
    "cos": r"\cos",
    "tan": r"\tan",
    "asin": r"\arcsin",
    "acos": r"\arccos",
    "atan": r"\arctan",
    "arcsin": r"\arcsin",
    "arccos": r"\arccos",
    "arctan": r"\arctan",
    # sympy's and Python's log is the natural logarithm; LaTeX's \log is read as base 10.
    "log": r"\ln",
    "ln": r"\ln",
}
_CALL = re.compile(r"\b(sqrt|cbrt|exp|abs|Abs|Matrix|Rational|" + "|".join(_FUNCTIONS) + r")\s*\(")


def looks_like_code(s: str) -> bool:
    """Is ``s`` an expression in code syntax (``sqrt(5)``, ``pi/6``, ``x**2``), with no LaTeX command in it?"""
    return "\\" not in s and bool(_CODE_MARK.search(s))


def closing_bracket(s: str, open_pos: int = 0) -> int:
    """Index of the bracket that closes the one at ``open_pos`` (brackets ``([{`` nest alike), or -1."""
    depth = 0
    for i in range(open_pos, len(s)):
        if s[i] in "([{":
            depth += 1
        elif s[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_top_level(s: str, seps: str = ",;") -> list[str]:
    """Split on separators that are outside every bracket: ``1, (2,3)`` -> ``1``, ``(2,3)``. An escaped brace
    (``\\{``, a set) nests like a bracket; empty parts are dropped."""
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


def _matrix(rows_text: str) -> str | None:
    """``[[1, 2], [3, 4]]`` -> a pmatrix; ``None`` if it is not a list of equal-length rows."""
    rows_text = rows_text.strip()
    if not (rows_text.startswith("[") and closing_bracket(rows_text, 0) == len(rows_text) - 1):
        return None
    rows = []
    for row in split_top_level(rows_text[1:-1], ","):
        if not (row.startswith("[") and closing_bracket(row, 0) == len(row) - 1):
            return None
        rows.append([code_to_latex(cell) for cell in split_top_level(row[1:-1], ",")])
    if not rows or len({len(r) for r in rows}) != 1:
        return None
    return "\\begin{pmatrix}" + " \\\\ ".join(" & ".join(r) for r in rows) + "\\end{pmatrix}"


def code_to_latex(s: str) -> str:
    r"""An expression in code syntax as LaTeX: ``3*sqrt(2)`` -> ``3 \cdot \sqrt{2}``, ``pi/6`` -> ``\pi/6``,
    ``x**2`` -> ``x^{2}``, ``exp(-2)`` -> ``e^{-2}``, ``log(3)`` -> ``\ln(3)`` (natural, as in sympy),
    ``Matrix([[3, 4]])`` and ``[[3, 4]]`` -> a ``pmatrix``, ``Rational(1, 3)`` -> ``\frac{1}{3}``. Text that is
    not code (any backslash, no code mark) is returned unchanged."""
    if "\\" in s:
        return s
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        if s.startswith("[[", i) or (s[i] == "[" and re.match(r"\[\s*\[", s[i:])):
            close = closing_bracket(s, i)
            matrix = _matrix(s[i : close + 1]) if close > 0 else None
            if matrix is not None:
                out.append(matrix)
                i = close + 1
                continue
        m = _CALL.match(s, i) if (i == 0 or not (s[i - 1].isalnum() or s[i - 1] == "_")) else None
        if m:
            name, open_pos = m.group(1), m.end() - 1
            close = closing_bracket(s, open_pos)
            if close < 0:
                out.append(s[i:])
                break
            inner = s[open_pos + 1 : close]
            arg = code_to_latex(inner)
            if name == "sqrt":
                out.append(f"\\sqrt{{{arg}}}")
            elif name == "cbrt":
                out.append(f"\\sqrt[3]{{{arg}}}")
            elif name == "exp":
                out.append(f"e^{{{arg}}}")
            elif name in ("abs", "Abs"):
                out.append(f"\\left|{arg}\\right|")
            elif name == "Matrix":
                out.append(_matrix(inner) or s[i : close + 1])
            elif name == "Rational":
                args = split_top_level(inner, ",")
                out.append(f"\\frac{{{code_to_latex(args[0])}}}{{{code_to_latex(args[1])}}}" if len(args) == 2 else arg)
            else:
                out.append(f"{_FUNCTIONS[name]}\\left({arg}\\right)")
            i = close + 1
            continue
        if s.startswith("**", i):
            j = i + 2
            while j < n and s[j] == " ":
                j += 1
            if j < n and s[j] == "(":
                close = closing_bracket(s, j)
                if close > 0:
                    out.append(f"^{{{code_to_latex(s[j + 1 : close])}}}")
                    i = close + 1
                    continue
            exp = re.match(r"-?\s*(?:\d+(?:\.\d+)?|[A-Za-z_]\w*)", s[j:])
            if exp:
                out.append(f"^{{{code_to_latex(exp.group())}}}")
                i = j + exp.end()
                continue
            out.append("^")
            i += 2
            continue
        if s[i] == "*":
            out.append(" \\cdot ")
            i += 1
            continue
        word = re.match(r"[A-Za-z_]\w*", s[i:]) if (i == 0 or not (s[i - 1].isalnum() or s[i - 1] == "_")) else None
        if word:
            out.append("\\pi " if word.group() == "pi" else word.group())
            i += word.end()
            continue
        out.append(s[i])
        i += 1
    return "".join(out)
