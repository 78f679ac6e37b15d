r"""Sets of real numbers written three ways (issue 23): set-builder ``\{x \mid -2 < x \le 5\}``, intervals
``(-2, 5]`` and their unions, and conditions ``-2 < x \le 5``, ``b \ge 3 \text{ or } b = 0``.

Each side is read into a sympy set (a union of intervals and points) and the two sets are compared exactly.
The reading refuses whatever it cannot read without guessing: a top-level comma, ``and`` or ``;`` between
conditions (``x > 1, x < 3`` may mean either), two variables, an endpoint that is not a real constant, a
chain whose relations point both ways. A side that is refused leaves the comparison to the ordinary path.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from reward_server.verifiers.math.forms import closing_bracket, split_top_level

_SPACES = re.compile(r"\\[,;:! ]|~|\\q?quad(?![A-Za-z])|\\(?:left|right)(?![A-Za-z])\s*")
_OR = re.compile(r"\\text(?:rm|bf)?\s*\{\s*or\s*\}|\\mbox\s*\{\s*or\s*\}|\\(?:lor|vee)(?![A-Za-z])|\bor\b")
_AND = re.compile(r"\band\b|\\(?:land|wedge)(?![A-Za-z])|\\text\s*\{\s*and\s*\}")
_BUILDER = re.compile(
    r"^\\\{\s*([A-Za-z])\s*(?:\\in\s*\\mathbb\s*\{?R\}?\s*)?(?:\\mid|\\vert|\||:)\s*(.+?)\s*\\\}$", re.DOTALL
)
_RELATION = re.compile(r"(\\(?:leqslant|geqslant|leq|geq|le|ge|lt|gt|neq|ne)(?![A-Za-z])|<=|>=|!=|<|>|=)")
_REL = {
    "<": "<", "\\lt": "<", ">": ">", "\\gt": ">",
    "<=": "<=", "\\le": "<=", "\\leq": "<=", "\\leqslant": "<=",
    ">=": ">=", "\\ge": ">=", "\\geq": ">=", "\\geqslant": ">=",
    "=": "=", "\\ne": "!=", "\\neq": "!=", "!=": "!=",
}  # fmt: skip
_IN = re.compile(r"^([A-Za-z])\s*\\in\s*(.+)$", re.DOTALL)
_REALS = re.compile(r"^(?:\\mathbb\s*\{?\s*R\s*\}?|\(\s*-\s*\\infty\s*,\s*\+?\s*\\infty\s*\))$")
_EMPTY = re.compile(r"^(?:\\emptyset|\\varnothing|\\\{\s*\\\})$")

Parse = Callable[[str], Any]


class _Unreadable(Exception):
    pass


def _endpoint(s: str, parse: Parse) -> Any:
    from sympy import oo

    s = s.strip()
    if re.fullmatch(r"\+?\s*\\infty", s):
        return oo
    if re.fullmatch(r"-\s*\\infty", s):
        return -oo
    value = parse(s)
    if value is None or getattr(value, "free_symbols", True) or not getattr(value, "is_real", False):
        raise _Unreadable
    return value


def _interval(s: str, parse: Parse) -> Any:
    from sympy import FiniteSet, Interval

    s = s.strip()
    if s.startswith("\\{") and s.endswith("\\}"):
        return FiniteSet(*(_endpoint(p, parse) for p in split_top_level(s[2:-2], ",")))
    if len(s) < 5 or s[0] not in "([" or s[-1] not in ")]" or closing_bracket(s) != len(s) - 1:
        raise _Unreadable
    parts = split_top_level(s[1:-1], ",")
    if len(parts) != 2:
        raise _Unreadable
    low, high = _endpoint(parts[0], parse), _endpoint(parts[1], parse)
    if bool(low == high) and s[0] == "[" and s[-1] == "]":
        return FiniteSet(low)  # "[0, 0]"
    if not bool(low < high):
        raise _Unreadable  # "(5, 2)" is no interval
    return Interval(low, high, s[0] == "(", s[-1] == ")")


def _condition(s: str, parse: Parse) -> tuple[Any, str]:
    """A chain of relations in one variable (``-2 < x \\le 5``, ``b = 0``, ``x \\ne 3``) as (set, variable)."""
    from sympy import Complement, FiniteSet, Interval, Reals, oo

    pieces = [p.strip() for p in _RELATION.split(s)]
    terms, ops = pieces[::2], [_REL[o] for o in pieces[1::2]]
    if len(terms) not in (2, 3) or not all(terms):
        raise _Unreadable
    names = [i for i, t in enumerate(terms) if re.fullmatch(r"[A-Za-z]", t)]
    if len(names) != 1:
        raise _Unreadable
    var = terms[names[0]]
    if len(terms) == 3:
        if names != [1] or not (set(ops) <= {"<", "<="} or set(ops) <= {">", ">="}):
            raise _Unreadable
        if ops[0] in (">", ">="):
            terms, ops = terms[::-1], [o.replace(">", "<") for o in ops[::-1]]
        low, high = _endpoint(terms[0], parse), _endpoint(terms[2], parse)
        return Interval(low, high, ops[0] == "<", ops[1] == "<"), var
    op = ops[0]
    value = _endpoint(terms[1 - names[0]], parse)
    if names[0] == 1 and op in ("<", "<=", ">", ">="):
        op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]  # "3 < x" is "x > 3"
    if op == "=":
        return FiniteSet(value), var
    if op == "!=":
        return Complement(Reals, FiniteSet(value)), var
    if op in ("<", "<="):
        return Interval(-oo, value, True, op == "<"), var
    return Interval(value, oo, op == ">", True), var


def _piece(s: str, parse: Parse) -> tuple[Any, str | None, bool]:
    from sympy import EmptySet, Reals

    s = s.strip()
    if m := _IN.match(s):
        found, var, _ = _piece(m.group(2), parse)
        return found, m.group(1), True
    if _REALS.match(s):
        return Reals, None, False
    if _EMPTY.match(s):
        return EmptySet, None, False
    if _RELATION.search(s):
        found, var = _condition(s, parse)
        return found, var, True
    return _interval(s, parse), None, False


def _conjunction(s: str, parse: Parse) -> tuple[Any, str | None, bool]:
    """Conditions joined by ``and`` (``x > 1 \text{ and } x < 3``): the intersection of their sets."""
    from sympy import FiniteSet, Intersection

    pieces = [_piece(p, parse) for p in _AND.split(s)]
    if len(pieces) == 1:
        return pieces[0]
    names = {v for _, v, _ in pieces if v is not None}
    if len(names) > 1 or any(isinstance(found, FiniteSet) for found, _, _ in pieces):
        raise _Unreadable  # "p = -1 and p = 2" lists two values, it does not intersect them
    both = Intersection(*(found for found, _, _ in pieces))
    if both.is_empty:
        raise _Unreadable
    return both, (names.pop() if names else None), True


# A list of overlapping conditions (``x > 1, x < 3``): a union or an intersection, the text cannot say which.
AMBIGUOUS = "ambiguous"


def _listed_conditions(listed: list[str], parse: Parse) -> tuple[Any, str | None, bool] | None:
    """Conditions in a comma list: their union when they are disjoint (``x < 2, x > 3``), ``AMBIGUOUS`` when
    they overlap, ``None`` when they are not all conditions in one variable (a list of values, a system)."""
    from sympy import Intersection, Union

    if not all(_RELATION.search(p) for p in listed):
        return None
    try:
        read = [_conjunction(p, parse) for p in listed]
    except (_Unreadable, TypeError, ValueError):
        return None
    names = {v for _, v, _ in read}
    if len(names) != 1 or None in names:
        return None
    sets = [found for found, _, _ in read]
    overlap = any(not Intersection(a, b).is_empty for i, a in enumerate(sets) for b in sets[i + 1 :])
    return (AMBIGUOUS if overlap else Union(*sets)), names.pop(), True


def real_set(s: str, parse: Parse) -> tuple[Any, str | None, bool] | None:
    """A set of real numbers as (sympy set, its variable or ``None``, whether it was written with conditions
    or as a union), or ``None`` when ``s`` is not read as one."""
    from sympy import Union

    s = _SPACES.sub(" ", s).strip().rstrip(".").strip()
    var: str | None = None
    builder = _BUILDER.match(s)
    if builder:
        var, s = builder.group(1), builder.group(2)
    s = _OR.sub(lambda _: " \\cup ", s)
    listed = split_top_level(s, ",;")
    if len(listed) > 1:
        return _listed_conditions(listed, parse)
    parts = [p for p in re.split(r"\\cup(?![A-Za-z])", s) if p.strip()]
    if not parts:
        return None
    try:
        read = [_conjunction(p, parse) for p in parts]
    except (_Unreadable, TypeError, ValueError):
        return None
    names = {v for _, v, _ in read if v is not None} | ({var} if var else set())
    if len(names) > 1:
        return None
    described = bool(builder) or len(read) > 1 or any(cond for _, _, cond in read)
    return Union(*(found for found, _, _ in read)), (names.pop() if names else None), described


# What a set written with conditions or as a union must contain, on one side at least: a cheap filter.
_DESCRIBED = re.compile(r"[<>]|\\(?:leq?|geq?|leqslant|geqslant|lt|gt|neq?|cup|mid|vert|in|lor|vee)(?![A-Za-z])|\bor\b")


@functools.lru_cache(maxsize=8192)
def _read(s: str, parse: Parse) -> tuple[Any, str | None, bool] | None:
    return real_set(s, parse)


def sets_match(gold: str, ans: str, parse: Parse) -> bool | None:
    """The verdict when both sides are sets of real numbers and one of them is written with conditions or
    as a union, and they are not both finite (roots are compared as lists); else ``None``."""
    from sympy import FiniteSet

    if not (_DESCRIBED.search(gold) or _DESCRIBED.search(ans)):
        return None
    g = _read(gold, parse)
    if g is None:
        return None
    a = _read(ans, parse)
    if a is None or not (g[2] or a[2]) or g[0] is AMBIGUOUS:
        return None
    if a[0] is AMBIGUOUS:
        return None if isinstance(g[0], FiniteSet) else False
    if isinstance(g[0], FiniteSet) and isinstance(a[0], FiniteSet):
        return None
    if g[1] is not None and a[1] is not None and g[1] != a[1]:
        return False
    return bool(g[0] == a[0]) or bool(g[0].symmetric_difference(a[0]).is_empty)
