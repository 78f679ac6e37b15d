"""Reading answers as text: unicode math, LaTeX delimiters and boxes, normalisation, plain numbers."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

from reward_server.verifiers.math.forms import NUMBER_WORD, code_to_latex, looks_like_code, read_number_words

# Characters whose meaning we keep by spelling them in LaTeX before anything else looks at the text.
_UNICODE_MATH = {
    "\u2212": "-",  # minus sign
    "\u2013": "-",  # en dash used as minus
    "\u2012": "-",
    "\u2010": "-",  # hyphen and non-breaking hyphen, written by some tokenizers for a minus
    "\u2011": "-",
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
# Control characters (NUL ...) and zero-width marks carry no meaning in an answer.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b-\u200d\u2060\ufeff]")


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
    text = _CONTROL.sub("", text)
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


# A row break "\\\\" is kept (group 1); spacing commands become a space.
_SPACING = re.compile(r"(\\\\)|\\[,;:!> ]|\\(?:q?quad|hspace\{[^}]*\}|thinspace|medspace|thickspace|enspace)|~")
# "\left." and "\right." are invisible delimiters: the dot goes with them.
_LEFT_RIGHT = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big|biggl|biggr)(?![A-Za-z])\s*\.?")
_TEXT_CMD = re.compile(
    r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|operatorname|textnormal"
    r"|mathcal|mathscr|mathfrak|mathsf|mathtt|boldsymbol|bm)\s*\{"
)
# "\textcirc" (and "^\textcirc") is a common typo for "\circ"; "\textdegree" is textcomp's degree sign.
_DEGREE = re.compile(
    r"\^\s*\{?\s*\\(?:text)?circ\s*\}?|\\(?:text)?degree|\^\s*\{\s*\\text\{\s*o\s*\}\s*\}|\\(?:text)?circ(?![A-Za-z])"
)
_PERCENT = re.compile(r"\s*(?:\\%|%|\\text\{\s*percent\s*\}|\bpercent\b|\\text\{\s*\\%\s*\})")
_CURRENCY = re.compile(r"\\\$|\$|\\(?:pounds|euro|yen)\b|[€£¥₹]|\b(?:USD|EUR|Rs\.?)\s*")
# Not inside brackets: "(12,102)" is a pair, "15,600" a number.
_THOUSANDS = re.compile(r"(?<![\d.,(\[])([1-9]\d{0,2}(?:(?:,|\{,\})\d{3})+)(?![\d,)\]]|\{,\})")
_SPACE_THOUSANDS = re.compile(r"(?<![\d.])([1-9]\d{0,2}(?: \d{3})+)(?![\d.])")
_MIXED_LATEX = re.compile(r"(?<![\d.}^_])(-?)(\d+)\s*\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_MIXED_PLAIN = re.compile(r"(?<![\d./^])(-?)(\d+)\s+(\d+)\s*/\s*(\d+)(?![\d./])")
_FRAC_SHORT = re.compile(r"\\frac\s*(\d)\s*(\d)")
# TeX takes one token as a missing-brace denominator too: "\frac{2+x}y" is \frac{2+x}{y}.
_FRAC_SHORT_DENOMINATOR = re.compile(r"\\frac\s*(\{[^{}]*\})\s*([0-9A-Za-z])")
# TeX takes one token as the argument: "\sqrt3" is \sqrt{3}, "\sqrt 23" is \sqrt{2}3.
_SQRT_SHORT = re.compile(r"\\sqrt\s*([0-9A-Za-z])")
_SINGLE_LETTER_TEXT = re.compile(r"\\(?:mathrm|mathit|text|operatorname|mathbf)\s*\{(\s*)([A-Za-z])\s*\}")
# A letter in a calligraphic, script, blackboard or other math font is the letter, as with \mathrm: "\mathcal{C}"
# is C. Blackboard N, Z, Q, R, C name the number sets (math-verify reads "\mathbb{R}" as the reals) and stay.
FONT_LETTER = re.compile(
    r"\\(?:mathcal|mathscr|mathfrak|mathsf|mathtt|boldsymbol|bm|mathbb(?=\s*\{\s*[^NZQRC\s]))\s*\{\s*([A-Za-z])\s*\}"
)
# A prime written as a command is a prime: "B^{\prime}", "B^\prime", "B\prime" are B'.
_PRIME_CMD = re.compile(r"\^\s*\{\s*((?:\\prime\s*)+)\}|\^\s*\\prime(?![A-Za-z])|\\prime(?![A-Za-z])")
# Indian digit grouping: "12,34,567" (lakh and crore: groups of two, then the last three digits).
_INDIAN_GROUPING = re.compile(
    r"(?<![\d.,(\[])([1-9]\d?(?:(?:,|\{,\}|,\\!)\d{2})+(?:,|\{,\}|,\\!)\d{3})(?![\d,)\]]|\{,\})"
)
# "\text{5 apples}", "\text{12 cm}": a value written inside a text command as a whole.
_TEXT_WITH_VALUE = re.compile(r"^\\(?:text|textbf|textrm|mbox|mathrm)\s*\{\s*([-+]?\s*[\d.][^{}]*)\}$")
_FRAC_HALF_SHORT = re.compile(r"\\frac\s*(\d)\s*(\{)|\\frac\s*(\{[^{}]*\})\s*(\d)")
_DFRAC = re.compile(r"\\[dtc]frac")
# "2 and 1/2", "2 \text{ and } \frac{1}{2}": a mixed number said in words, not the two values 2 and 1/2.
_MIXED_AND = re.compile(
    r"(?<![\d./^])(-?)(\d+)\s*(?:\\text\{\s*and\s*\}|\s+and\s+)\s*"
    r"(?:(\d+)\s*/\s*(\d+)|\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\})(?![\d./])"
)
# Repeating decimals: "0.\overline{3}", "0.1\overline{6}", "0.\dot{3}", and a digit block written out until
# "...": "0.333...", "0.1666\ldots", "0.272727...".
_REPEATING_MARK = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\(?:overline|dot|bar)\s*\{\s*(\d+)\s*\}")
_REPEATING_DOTS = re.compile(r"(?<![\d.])(\d*)\.(\d+)\s*(?:\.{3}|…|\\[lc]?dots(?![A-Za-z]))")
# "3rd", "21^{\text{st}}": an ordinal states its number.
_ORDINAL = re.compile(
    r"(?<=\d)(?:\s*\^\s*\{\s*(?:\\(?:text|mathrm|textrm)\s*\{\s*)?(?:st|nd|rd|th)\s*\}?\s*\}|(?:st|nd|rd|th))(?![A-Za-z])"
)
# Infinity spelled as sympy prints it or in words.
_INFINITY_WORD = re.compile(r"(?<![A-Za-z\\])(?:oo|infinity|\\text\s*\{\s*infinity\s*\})(?![A-Za-z])", re.IGNORECASE)
# A vector written with angle brackets is the tuple of its components: "\langle 1, 2 \rangle" is (1, 2).
_ANGLE_VECTOR = re.compile(r"\\langle\s*([^{}]*?)\s*\\rangle")
_EMPTY_SET = re.compile(r"\\varnothing|\\\{\s*\\\}|\\O(?![A-Za-z])")
# Colour and invisible spacing change how an answer looks, not its value: "\color{red}42", "\textcolor{red}{42}".
# So do font sizes ("\large C") and an underline.
_COSMETIC = re.compile(
    r"\\color\s*\{[^{}]*\}|\\textcolor\s*\{[^{}]*\}|\\[hv]?phantom\s*\{[^{}]*\}|\\(?:bf|rm|it|sf|tt)(?![A-Za-z])\s*"
    r"|\\(?:tiny|small|normalsize|large|Large|LARGE|huge|Huge|displaystyle|textstyle|scriptstyle|mathdollar)"
    r"(?![A-Za-z])\s*"
)
# siunitx: "\num{1.5e3}" is the number, "\SI{5}{\meter}" and "\qty{5}{cm}" the number with a unit.
_SIUNITX = re.compile(r"\\(?:num|SI|qty)\s*\{([^{}]*)\}(?:\s*\{(?:[^{}]|\{[^{}]*\})*\})?")
# A scale word multiplies ("1.5 million" is 1500000); it is not a unit to drop.
_SCALE_WORD = re.compile(
    r"(?<![\d.])(\d+(?:\.\d+)?)\s*(?:\\text\s*\{\s*)?(hundred|thousand|million|billion|trillion|dozen)s?\b\s*\}?",
    re.IGNORECASE,
)
_SCALE = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12, "dozen": 12}
_UNDERLINE = re.compile(r"\\underline\s*\{([^{}]*)\}")
# A label inside the box: "\boxed{\text{Answer: } 42}", "\boxed{Final answer: 42}".
_ANSWER_LABEL = re.compile(
    r"^\s*(?:\\text(?:bf)?\s*\{\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*:?\s*\}"
    r"|(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:))\s*",
    re.IGNORECASE,
)
# "\approx 42" as a whole answer states 42.
_LEADING_APPROX = re.compile(r"^\s*(?:\\approx|\\sim|\\simeq|\\thickapprox)\s*")
_TEXT_NO_LETTERS = re.compile(
    r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|underline|boldsymbol|bm|pmb|emph)\s*\{([^{}A-Za-z]*)\}"
)
_LEADING_VAR = re.compile(r"^\s*(?:[A-Za-z](?:_\{?\w+\}?)?|\\[A-Za-z]+)\s*(?:=|\\in)\s*(?=[^=]+$)")
_MC_LETTER = re.compile(
    r"^\s*(?:\\text(?:bf)?\{\s*)?(?:\(\s*([A-J])\s*\)|([A-J])\s*[).:]?)(?:\s*\})?(?:\s.*)?$", re.DOTALL
)
_TRAILING_WORDS = re.compile(
    r"(?<=[\d}a-zA-Z)])\s+(?:[A-Za-z]{2,}\.?)(?:\s+[A-Za-z]+\.?)*\s*$"
    # A unit in another script, glued or not: "12个苹果", "12 яблок", "5 см". (Greek letters are variables.)
    r"|(?<=[\d}])\s*[^\W\d_A-Za-z\u0370-\u03ff][^\W\d_]*(?:\s+[^\W\d_]+)*\.?\s*$"
)


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


def strip_presentation(s: str) -> str:
    """What only changes how an answer looks: unicode spellings, math delimiters, outer boxes, colour, font
    size, ``\\displaystyle``, an underline, a label ("Answer: "). Applied to every answer, letters included."""
    s = normalize_unicode(s)
    s = _strip_outer_boxes(_strip_math_delimiters(s))
    s = _strip_math_delimiters(s)
    s = _COSMETIC.sub("", s)
    s = _SIUNITX.sub(r"\1", s)
    s = _UNDERLINE.sub(r"\1", s)
    return _ANSWER_LABEL.sub("", s)


def normalize_answer(s: str, *, mixed_and: bool = False) -> str:
    """Normalise one answer string (LaTeX or plain) so that equal values are written alike where cheap.

    Removes what does not change the value: math delimiters, ``\\displaystyle``, ``\\left``/``\\right``,
    spacing commands, currency signs, degree marks, units after a value, thousands separators; spells
    unicode math; rewrites ``\\dfrac`` and ``\\frac34``; turns mixed numbers into fractions; reads repeating
    decimals (``0.\\overline{3}``, ``0.333...``) exactly. The result is still LaTeX for latex2sympy.

    ``mixed_and`` reads "2 and 1/2" as the mixed number 5/2 (an answer to a single-valued reference);
    otherwise it is the two values 2 and 1/2 (a reference, or an answer to a list).
    """
    s = strip_presentation(s)
    if looks_like_code(s):
        s = code_to_latex(s)  # "3*sqrt(2)", "pi/6", "Matrix([[3, 4]])": sympy's and Python's printing
    s = _spelled_number(s)
    s = _PRIME_CMD.sub(lambda m: "'" * max(1, (m.group(1) or "").count("\\prime")), s)
    s = FONT_LETTER.sub(r"\1", s)
    s = _EMPTY_SET.sub(r"\\emptyset", s)
    s = _LEADING_APPROX.sub("", s)
    s = _TEXT_NO_LETTERS.sub(r"\1", s)
    s = _TEXT_WITH_VALUE.sub(r"\1", s.strip())
    if _SINGLE_LETTER_TEXT.search(s) and not _SINGLE_LETTER_TEXT.fullmatch(s.strip()):
        # "1 - \frac{1}{\mathrm{e}}": a constant, not a word. A space before it stays, so "5\text{ m}" is
        # the unit m after 5, not the product 5m.
        s = _SINGLE_LETTER_TEXT.sub(lambda m: (" " if m.group(1) else "") + m.group(2), s)
    s = _DFRAC.sub(r"\\frac", s)
    s = _SCALE_WORD.sub(_scaled, s)
    s = _LEFT_RIGHT.sub("", s)
    s = _ANGLE_VECTOR.sub(r"(\1)", s)
    s = _ORDINAL.sub("", s)
    s = _INFINITY_WORD.sub(r"\\infty", s)
    # "12,\!34,\!567": Indian grouping when the commas say so (a thin space or braces), or when the answer is
    # for a single value (a reference "12,34,567" stays the list it may be).
    s = _INDIAN_GROUPING.sub(lambda m: _indian_number(m, plain_commas=mixed_and), s)
    # "11,\! 111,\! 100": a comma followed by a negative thin space is a thousands separator.
    s = re.sub(r"(?<=\d),\s*\\!\s*(?=\d{3}(?!\d))", "", s)
    s = re.sub(r"(?<!\\)\\!", "", s)
    s = _SPACING.sub(lambda m: m.group(1) or " ", s)
    s = _DEGREE.sub("", s)
    s = _CURRENCY.sub("", s)
    if mixed_and and "," not in s:
        s = _MIXED_AND.sub(_mixed_and_to_frac, s)
    s = re.sub(r"\\text\{\s*(?:and|or)\s*\}|\s+(?:and|or)\s+", ", ", s)
    s = s.replace("{,}", ",")
    s = _THOUSANDS.sub(lambda m: m.group(1).replace("{,}", "").replace(",", ""), s)
    s = _SPACE_THOUSANDS.sub(lambda m: m.group(1).replace(" ", ""), s)
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_SHORT_DENOMINATOR.sub(r"\\frac\1{\2}", s)
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s = _FRAC_HALF_SHORT.sub(
        lambda m: rf"\frac{{{m.group(1)}}}{{" if m.group(1) else rf"\frac{m.group(3)}{{{m.group(4)}}}", s
    )
    s = _REPEATING_MARK.sub(lambda m: _repeating_frac(m.group(1), m.group(2), m.group(3)), s)
    s = _REPEATING_DOTS.sub(_repeating_dots, s)
    s = _MIXED_LATEX.sub(_mixed_to_frac, s)
    s = _MIXED_PLAIN.sub(_mixed_to_frac, s)
    s = s.strip().rstrip(".").strip()
    # A unit after a value ("15600 dollars", "18 \text{cm}^2", "5 apples") does not change it.
    s = _strip_units(s)
    return re.sub(r"\s+", " ", s).strip()


def _indian_number(m: re.Match[str], *, plain_commas: bool) -> str:
    text = m.group(1)
    if not plain_commas and not re.search(r"\{,\}|,\\!", text):
        return text
    return re.sub(r"\{,\}|,\\!|,", "", text)


def spelled_number_fault(s: str) -> str | None:
    """Why ``s`` (an answer as a whole) starts with number words that form no number, or ``None``."""
    plain = _unwrap_text_commands(s).strip()
    if not NUMBER_WORD.search(plain):
        return None
    try:
        read = read_number_words(plain)
    except ValueError as exc:
        return str(exc)
    if read is not None and _VAGUE_NUMBER.match(read[1]):
        return f"a vague number in words: {plain[:40]!r}"
    return None


# "forty something", "twenty-odd", "thirty or so": a number in words that names no one value.
_VAGUE_NUMBER = re.compile(r"^\s*-?(?:something|odd|ish|plus|or\s+so|or\s+more|or\s+less|some)\b", re.IGNORECASE)


def _spelled_number(s: str) -> str:
    """An answer that starts with a number in words, with that number in digits: "three hundred and five" is
    305, "\\text{forty-two}" 42, "seven apples" 7 apples, "two thirds" \\frac{2}{3}. Anything else unchanged."""
    plain = _unwrap_text_commands(s).strip()
    if not NUMBER_WORD.search(plain):
        return s
    try:
        read = read_number_words(plain)
    except ValueError:
        return s
    if read is None:
        return s
    value, rest = read
    if value.denominator == 1:
        digits = str(value.numerator)
    else:
        sign = "-" if value < 0 else ""
        digits = f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"
    return digits + rest


def _repeating_frac(whole: str, fixed: str, period: str) -> str:
    """``whole.fixed(period repeated)`` as an exact ``\\frac``: 0.1(6) -> \\frac{1}{6}."""
    value = int(whole or "0") + Fraction(
        int(fixed + period) - int(fixed or "0"), 10 ** len(fixed) * (10 ** len(period) - 1)
    )
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _repeating_dots(m: re.Match[str]) -> str:
    """ "0.1666..." -> 1/6 when the digits end in a block written out again and again (a 1-digit block three
    times, a longer one twice); otherwise the decimal as written, without the dots."""
    whole, digits = m.group(1), m.group(2)
    for p in range(1, 7):
        times = 3 if p == 1 else 2
        block = digits[-p:]
        if len(digits) >= p * times and digits.endswith(block * times):
            fixed = digits[: len(digits) - p * times]
            # The shortest repeating start: "0.1666..." is 0.1(6), not 0.16(6); the value is the same.
            return _repeating_frac(whole, fixed, block)
    return f"{whole}.{digits}"


def _brace_frac_args(m: re.Match[str]) -> str:
    """``\\frac1{x}`` -> ``\\frac{1}{x}``; ``\\frac{x}2`` -> ``\\frac{x}{2}`` (TeX reads one token)."""
    if m.group(1):
        return rf"\frac{{{m.group(1)}}}{{"
    return rf"\frac{m.group(3)}{{{m.group(4)}}}"


def _scaled(m: re.Match[str]) -> str:
    value = Fraction(m.group(1)) * _SCALE[m.group(2).lower()]
    return str(value.numerator) if value.denominator == 1 else f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _mixed_and_to_frac(m: re.Match[str]) -> str:
    num, den = (m.group(3), m.group(4)) if m.group(3) else (m.group(5), m.group(6))
    if int(den) == 0 or int(num) >= int(den):
        return m.group(0)  # "2 and 5/3" is not a mixed number: two values
    value = Fraction(int(m.group(2)) * int(den) + int(num), int(den))
    return f"{m.group(1)}\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _mixed_to_frac(m: re.Match[str]) -> str:
    sign, whole, num, den = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
    if den == 0 or num >= den:
        return m.group(0)  # "2\frac{5}{3}" is a product, not a mixed number
    value = Fraction(whole * den + num, den)
    return f"{sign}\\frac{{{value.numerator}}}{{{value.denominator}}}"


# A unit in a text command, also in parentheses: "18 \text{cm}^2", "5 (\text{apples})", "5\ (\text{approx.})".
_UNIT_TEXT = re.compile(
    r"\s*(?:\\(?:text|mbox|mathrm|textrm)\s*\{\s*[A-Za-z][A-Za-z .\-/]*\}(?:\s*\^\s*\{?\d\}?)?"
    r"|\(\s*\\(?:text|mbox|mathrm|textrm)\s*\{\s*[A-Za-z][A-Za-z .\-/]*\}\s*\))\s*$"
)


# Unit symbols, also one-letter ones and their products, quotients and powers ("m/s^2", "cm^{3}", "kg*m").
# Only known symbols: "3 x^2" is an expression, "3 m^2" an area. A one-letter unit must be set apart by a
# space ("5 m"; "5m" may be the product 5m).
_UNIT_SYMBOL = (
    r"(?:[kcmμnd]?m|[km]?g|m?s|min|h|hr|hrs|[mk]?L|ml|[kM]?N|[kM]?J|[kM]?W|V|m?A|K|[kM]?Pa|[kMG]?Hz|mph|kph|km/h"
    r"|ft|in|yd|mi|lbs?|oz|sec|cal|kcal|mol|cc)"
)
_UNIT_POWER = rf"{_UNIT_SYMBOL}(?:\s*\^\s*(?:\{{\s*-?\d\s*\}}|-?\d))?"
_TRAILING_UNIT = re.compile(
    rf"(?<=[\d}}.])(?P<gap>(?:\s|\\[,;: ]|~)*)(?P<unit>{_UNIT_POWER}(?:\s*(?:/|\\cdot|\*)\s*{_UNIT_POWER})*)\s*$"
)


def _drop_unit_symbol(s: str) -> str:
    m = _TRAILING_UNIT.search(s)
    if m is None or (not m.group("gap") and re.fullmatch(r"[A-Za-z]", m.group("unit"))):
        return s
    return s[: m.start()]


def _strip_units(s: str) -> str:
    for _ in range(3):
        t = _UNIT_TEXT.sub("", s)
        t = _TRAILING_WORDS.sub("", t) if re.search(r"\d", t) else t
        t = _drop_unit_symbol(t)
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
    ``approx`` marks an irrational constant held to 40 digits (``\\sqrt{2}``): two of those are compared
    symbolically, never digit by digit.
    """

    value: Fraction
    quantum: Fraction | None = None
    percent: bool = False
    approx: bool = False


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
        # "1.5\times10^{-10}" is rounded at its mantissa's last place; "3\times10^{8}" has an integer
        # mantissa and is exact, like the integer 300000000 (so 3.1\times10^8 is not it).
        return Num(mant.value * scale, mant.quantum * scale if mant.quantum else None, percent)
    return None


# A decimal with this many significant figures that is the reference correctly rounded is right, however many
# more places the reference has: 0.0666668 for 0.066666793, 1.41421 for \sqrt{2}, 3.14159 for \pi.
PRECISION_FLOOR_DIGITS = 6


def significant_digits(num: Num) -> int:
    """How many significant figures a decimal is written with (``0.0666668`` has 6), or 0 for an exact number."""
    if num.quantum is None or num.value == 0:
        return 0
    magnitude = 0
    value = abs(num.value)
    while value >= 10:
        value /= 10
        magnitude += 1
    while value < 1:
        value *= 10
        magnitude -= 1
    places = 0
    quantum = num.quantum
    while quantum < 1:
        quantum *= 10
        places += 1
    while quantum > 1:
        quantum /= 10
        places -= 1
    return magnitude + places + 1


def _numbers_match(gold: Num, ans: Num, rel_tol: float) -> bool:
    """The numeric policy: the reference sets the precision (module docstring)."""
    g_vals = [gold.value] + ([gold.value / 100] if gold.percent else [])
    a_vals = [ans.value] + ([ans.value / 100] if ans.percent and not gold.percent else [])
    floor = ans.quantum is not None and significant_digits(ans) >= PRECISION_FLOOR_DIGITS
    for g in g_vals:
        for a in a_vals:
            if a == g:
                return True
            if floor and ans.quantum is not None and abs(a - g) * 2 <= ans.quantum:
                return True  # the reference rounded to the answer's (at least six) significant figures
            if gold.quantum is not None:
                # The answer must be at least as precise as the reference, and round to it.
                if ans.quantum is not None and ans.quantum > gold.quantum:
                    continue
                if abs(a - g) * 2 <= gold.quantum:
                    return True
            elif ans.quantum is not None and g != 0 and abs(a - g) <= Fraction(rel_tol) * abs(g):
                return True
    return False


_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


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
