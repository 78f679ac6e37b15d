r"""Small rewrites of one side into the other side's form (issue 23): a column vector as a tuple, a labelled
expression as its expression, an angle in degrees and minutes as its degrees.

Each applies only where the other side is written in the form it rewrites into, so the comparison after the
rewrite is the ordinary one, with its near misses (one coordinate, a sign, a minute) still wrong.
"""

from __future__ import annotations

import re
from fractions import Fraction

from reward_server.verifiers.math.forms import closing_bracket
from reward_server.verifiers.math.renaming import letters

_VECTOR = re.compile(r"^\\begin\{([pb]?matrix)\}(.*)\\end\{\1\}$", re.DOTALL)


def _is_tuple(s: str) -> bool:
    s = s.strip()
    return len(s) >= 5 and s[0] == "(" and s[-1] == ")" and closing_bracket(s) == len(s) - 1 and "," in s


def vector_as_tuple(s: str) -> str | None:
    r"""``\begin{pmatrix} 3 \\ -1 \\ 4 \end{pmatrix}`` (a column or a row, ``bmatrix`` too) -> ``(3, -1, 4)``;
    ``None`` for anything else: a matrix of several rows and columns, a ``vmatrix`` (a determinant)."""
    m = _VECTOR.match(s.strip())
    if m is None:
        return None
    rows = [r.strip() for r in m.group(2).split("\\\\") if r.strip()]
    cells = [[c.strip() for c in r.split("&")] for r in rows]
    if len(rows) >= 2 and all(len(r) == 1 for r in cells):
        entries = [r[0] for r in cells]
    elif len(rows) == 1 and len(cells[0]) >= 2:
        entries = cells[0]
    else:
        return None
    if not all(entries):
        return None
    return "(" + ", ".join(entries) + ")"


def vector_pair(gold: str, ans: str) -> tuple[str, str] | None:
    """(gold, answer) with the vector side written as a tuple, when the other side is a tuple."""
    if _is_tuple(gold) and (t := vector_as_tuple(ans)) is not None:
        return gold, t
    if _is_tuple(ans) and (t := vector_as_tuple(gold)) is not None:
        return t, ans
    return None


# A label: a letter with a subscript (k_{\min}, S_n, a_{10}), a capital letter, or a short word in \text.
_LABEL = re.compile(r"^\s*([A-Za-z]_\{?[^{}=]+\}?|[A-Z]|\\text\{[A-Za-z ]{1,20}\})\s*=\s*([^=]+)$")


def unlabelled(s: str) -> str | None:
    r"""``k_{\min} = 2n + 3`` -> ``2n + 3``, ``S = \frac{1}{2}`` -> ``\frac{1}{2}``; ``None`` when ``s`` is no
    labelled expression. A lone small letter is an unknown, not a label (``y = 2x + 3`` is an equation), and
    a label whose letter occurs in the expression (``a_n = a_{n-1} + 2``) is an equation too."""
    m = _LABEL.match(s)
    if m is None:
        return None
    label, expr = m.group(1), m.group(2).strip()
    base = label[0] if not label.startswith("\\text") else ""
    if base and base in letters(expr):
        return None
    return expr


def label_pair(gold: str, ans: str) -> tuple[str, str] | None:
    """(gold, answer) without the label of the side that has one, when the other side has no ``=``."""
    if "=" not in ans and (g := unlabelled(gold)) is not None:
        return g, ans
    if "=" not in gold and (a := unlabelled(ans)) is not None:
        return gold, a
    return None


_DEG = r"(?:\^\s*\{?\s*\\(?:text)?circ\s*\}?|\\(?:text)?circ(?![A-Za-z])|\\(?:text)?degree|°)"
_MIN = r"(?:'|′|\^\s*\{?\s*\\prime\s*\}?|\\prime(?![A-Za-z]))"
_SEC = r"(?:''|\"|″|\^\s*\{?\s*\\prime\s*\\prime\s*\}?)"
_NUMBER = r"(\d+(?:\.\d+)?)"
_DMS = re.compile(rf"^\s*(-?)\s*{_NUMBER}\s*{_DEG}\s*(?:{_NUMBER}\s*{_MIN}\s*(?:{_NUMBER}\s*{_SEC})?)?\s*$")


def degrees(s: str) -> tuple[Fraction, bool] | None:
    """An angle in degrees (``35^\\circ 18'``, ``35°18'``, ``35.3^\\circ``) as (exact degrees, whether it has
    minutes), or ``None``. Minutes and seconds must be below 60."""
    s = re.sub(r"\\[,;:! ]|~|\\text\{\s*\}", " ", s.replace("{}", ""))
    m = _DMS.match(s)
    if m is None:
        return None
    minutes, seconds = Fraction(m.group(3) or 0), Fraction(m.group(4) or 0)
    if minutes >= 60 or seconds >= 60:
        return None
    value = Fraction(m.group(2)) + minutes / 60 + seconds / 3600
    return (-value if m.group(1) else value), m.group(3) is not None


def number_value(s: str) -> Fraction | None:
    """A plain decimal or integer (a bare angle without its mark)."""
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*", s)
    return Fraction(m.group(1)) if m else None


def degrees_match(gold: str, ans: str) -> bool | None:
    """The verdict when either side is an angle in degrees *and minutes*, else ``None``: both must be the same
    angle exactly (a bare number on the other side is read in degrees), never rounded."""
    if not any(mark in gold or mark in ans for mark in ("'", "prime", "′")):
        return None
    g, a = degrees(gold), degrees(ans)
    if not ((g is not None and g[1]) or (a is not None and a[1])):
        return None
    g_value = g[0] if g is not None else number_value(gold)
    a_value = a[0] if a is not None else number_value(ans)
    if g_value is None or a_value is None:
        return False
    return g_value == a_value
