"""One member of an answer against one member of the reference: math-verify and sympy equality, with the fast
value checks around them (numbers, bases, inequalities as intervals, matrices, constants too large to evaluate).
:mod:`reward_server.verifiers.math.compare` splits answers into members and calls :func:`member_match` on pairs."""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Any

from reward_server.verifiers.math.clauses import _letters
from reward_server.verifiers.math.forms import closing_bracket, split_top_level
from reward_server.verifiers.math.latex_value import SAMPLE_POINTS, latex_value
from reward_server.verifiers.math.text import (
    Num,
    _numbers_match,
    parse_number,
)
from reward_server.verifiers.math.types import MathOptions


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
def mv_parse(s: str, *, gold: bool) -> Any:
    """math-verify's parse of one clean answer string: a sympy object, or ``None`` if it has no value."""
    from math_verify import parse

    pred_cfg, gold_cfg = _configs()
    # Wrapped in \boxed{} so that math-verify takes the whole string as the answer.
    result = parse("\\boxed{" + s + "}", [gold_cfg if gold else pred_cfg], parsing_timeout=None)
    for r in result:
        if not isinstance(r, str):
            return r
    return None


def _imaginary_unit(expr: Any) -> Any:
    """latex2sympy reads ``i`` as a variable: ``2i`` never equalled ``\\sqrt{-4}``, nor ``e^{i\\pi}`` -1. A free
    ``i`` in a final answer is the imaginary unit (an index variable is bound, or written ``a_i``)."""
    from sympy import Basic, I

    if not isinstance(expr, Basic):
        return expr
    unit = {s: I for s in expr.free_symbols if getattr(s, "name", None) == "i"}
    return expr.xreplace(unit) if unit else expr


def has_value(expr: Any) -> bool:
    if expr is None:
        return False
    from sympy import Symbol

    # Prose parsed as a product of many one-letter symbols ("See the solution") is not a value.
    free: set[Any] = getattr(expr, "free_symbols", set())
    return not (len(free) > 6 and all(isinstance(f, Symbol) for f in free))


def mv_equal(gold: Any, pred: Any, options: MathOptions) -> bool:
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


_INEQUALITY = re.compile(r"(\\(?:leqslant|geqslant|leq|geq|le|ge|lt|gt)(?![A-Za-z])|<=|>=|<|>)")
_LESS = {"<": "<", "\\lt": "<", "<=": "<=", "\\le": "<=", "\\leq": "<=", "\\leqslant": "<="}
_GREATER = {">": "<", "\\gt": "<", ">=": "<=", "\\ge": "<=", "\\geq": "<=", "\\geqslant": "<="}


def is_interval(s: str) -> bool:
    s = s.strip()
    return len(s) >= 5 and s[0] in "([" and s[-1] in ")]" and ("," in s or "\\cup" in s)


def inequality_as_interval(s: str) -> str | None:
    r"""A one-variable inequality as the interval it describes: ``x \le 3`` -> ``(-\infty, 3]``,
    ``-1 < x \le 2`` -> ``(-1, 2]``, ``x > 0`` -> ``(0, \infty)``; ``None`` for anything else."""
    parts = [p.strip() for p in _INEQUALITY.split(s)]
    if len(parts) not in (3, 5) or not all(parts[::2]):
        return None
    ops = parts[1::2]
    if all(op in _GREATER for op in ops):  # "3 > x" is "x < 3": read it right to left
        parts, ops = parts[::-1], [_GREATER[op] for op in ops[::-1]]
    elif all(op in _LESS for op in ops):
        ops = [_LESS[op] for op in ops]
    else:
        return None
    terms = parts[::2]
    var = [i for i, t in enumerate(terms) if re.fullmatch(r"[A-Za-z]", t)]
    if len(var) != 1 or any(_letters(t) for i, t in enumerate(terms) if i != var[0]):
        return None
    if len(terms) == 3 and var[0] != 1:
        return None
    low = "(-\\infty" if var[0] == 0 else ("[" if ops[0] == "<=" else "(") + terms[0]
    high = "\\infty)" if var[0] == len(terms) - 1 else terms[-1] + ("]" if ops[-1] == "<=" else ")")
    return f"{low}, {high}"


_PRIMED = re.compile(r"[A-Za-z]'+")


@functools.lru_cache(maxsize=16384)
def member_match(gold: str, ans: str, options: MathOptions) -> bool:
    """Is the answer member ``ans`` equal to the reference member ``gold``? (Both normalised.)

    Cached: completions of one group often repeat an answer, so each distinct pair is compared once.
    """
    if gold == ans:
        return True
    if "=" not in gold + ans and sorted(_PRIMED.findall(gold)) != sorted(_PRIMED.findall(ans)):
        # P' is another point than P (math-verify drops the prime): primed names must match, in any order.
        # (An equation's left side may name a derivative: "f'(x) = 2x".)
        return False
    # An inequality and an interval state the same set: "x \le 3" is "(-\infty, 3]", either way round.
    if is_interval(gold) and (interval := inequality_as_interval(ans)) is not None:
        ans = interval
    elif is_interval(ans) and (interval := inequality_as_interval(gold)) is not None:
        gold = interval
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
    if _clearly_different(gold, gold_num, ans, ans_num, options):
        return False
    # Maybe equal: decide exactly. Constants compare by value under the precision policy; the rest
    # (expressions, sets, intervals, matrices, equations) through math-verify.
    gold_parsed = _imaginary_unit(mv_parse(gold, gold=True))
    pred = _imaginary_unit(mv_parse(ans, gold=False))
    g_huge, a_huge = _astronomical(gold_parsed), _astronomical(pred)
    if g_huge is not None or a_huge is not None:
        # One side has more than 10,000 digits: compare 40-digit approximations. Equal to 40 digits, only
        # exact arithmetic can tell (and may run out of time); otherwise they differ.
        if g_huge is None or a_huge is None:
            return False
        if _BEYOND_EVALF not in (g_huge, a_huge) and abs(g_huge - a_huge) > abs(g_huge) * Fraction(1, 10**30):
            return False
        return mv_equal(gold_parsed, pred, options)
    g_val = gold_num or _constant_value(gold_parsed)
    a_val = ans_num or _constant_value(pred)
    if g_val is not None and a_val is not None and not (g_val.approx and a_val.approx):
        # An irrational-looking value within 40 digits of a rational one may be that rational unsimplified
        # (sin^2 + cos^2): only sympy can say.
        digits_apart = abs(g_val.value - a_val.value) <= Fraction(1, 10**25) * max(abs(g_val.value), Fraction(1))
        if not ((g_val.approx or a_val.approx) and digits_apart):
            return _numbers_match(g_val, a_val, options.rel_tol)
    return mv_equal(gold_parsed, pred, options)


def _clearly_different(gold: str, gold_num: Num | None, ans: str, ans_num: Num | None, options: MathOptions) -> bool:
    """A cheap *rejection* (sympy's parse costs ~10 ms): values that a float tells apart beyond any
    tolerance the policy could grant, or expressions that differ at a sample point. Never an acceptance:
    floats cannot tell ``10^{16}+1`` from ``10^{16}``, so "close" always goes on to the exact check."""
    try:
        g = complex(gold_num.value) if gold_num is not None else latex_value(gold)
        a = complex(ans_num.value) if ans_num is not None else latex_value(ans)
    except OverflowError:
        return False
    if g is not None and a is not None:
        scale = max(abs(g), abs(a))
        allowed = 1e-9 * scale + options.rel_tol * scale
        if gold_num is not None and gold_num.quantum is not None:
            allowed += float(gold_num.quantum) / 2
        if ans_num is not None and ans_num.quantum is not None:
            allowed += float(ans_num.quantum) / 2  # the precision floor: a correctly rounded answer
        if gold_num is not None and gold_num.percent:
            return abs(g - a) > allowed and abs(g / 100 - a) > allowed + float(gold_num.quantum or 0) / 200
        return abs(g - a) > allowed
    if options.strict:
        # "15x - 80" vs "15x - 81", "(3, 5]" vs "(3, 4]": different at a point, so different.
        return _differ_at_a_point(gold, ans) or _structures_differ(gold, ans)
    return False


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


def components(s: str) -> tuple[str, list[str]] | None:
    """A matrix, tuple or interval as (shape, entries); ``None`` for anything else."""
    s = s.strip()
    m = _MATRIX.fullmatch(s)
    if m:
        rows = [r for r in m.group(2).split("\\\\") if r.strip()]
        cells = [c.strip() for r in rows for c in r.split("&")]
        return f"{m.group(1)}:{len(rows)}x{len(cells) // max(1, len(rows))}", cells
    if len(s) >= 5 and s[0] in "([" and s[-1] in ")]" and closing_bracket(s) == len(s) - 1:
        parts = split_top_level(s[1:-1], ",")
        if len(parts) >= 2:
            return f"{s[0]}{s[-1]}{len(parts)}", parts
    return None


def _structures_differ(gold: str, ans: str) -> bool:
    """Two matrices/tuples/intervals of the same shape with an entry that differs at a point."""
    g, a = components(gold), components(ans)
    if g is None or a is None or g[0] != a[0]:
        return False
    return any(_differ_at_a_point(gc, ac) for gc, ac in zip(g[1], a[1], strict=True))


def _constant_value(expr: Any) -> Num | None:
    """An exact-or-float constant as a :class:`Num` (floats keep their precision), else ``None``."""
    from sympy import Expr, Float, N, Rational

    if not isinstance(expr, Expr) or expr.free_symbols or not expr.is_number:
        return None
    try:
        if expr.atoms(Float):
            return None  # a float's written precision is lost in sympy; leave it to the symbolic path
        value = expr.doit()  # latex2sympy keeps "1 - \frac{1}{3}" unevaluated
        if isinstance(value, Rational):
            return Num(Fraction(int(value.p), int(value.q)))
        v = N(value, 40)
        if not v.is_real:
            return None
        # An irrational constant, to 40 digits: enough for every comparison against a rational or a decimal.
        return Num(Fraction(str(v)), approx=True)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None


# Beyond this many digits (either way) a constant is not evaluated exactly: doit() on 10^{10^{10}}, (10^{10})!
# or \binom{10^8}{5\cdot10^7} builds the integer itself and never returns.
_MAX_EXACT_DIGITS = 10_000


# The marker for a constant too large even for evalf: an exponent (or factorial) with more than 15 digits.
_BEYOND_EVALF = "beyond evalf"


def _astronomical(expr: Any) -> Any:
    """An astronomically large or small real constant as a 40-digit sympy Float (or ``_BEYOND_EVALF`` when
    even its exponent is astronomical), else ``None``: not a constant, or of ordinary size.

    mpmath's evalf keeps a number as a mantissa and a binary exponent, so ``10^{10^{10}}`` costs microseconds
    where exact evaluation would not finish; ``10^{10^{10^{10}}}`` needs a 10^10-digit exponent, so exponents
    are checked from the inside out first.
    """
    from sympy import Expr, Float, N, Pow, factorial, gamma, postorder_traversal

    if not isinstance(expr, Expr) or expr.free_symbols or not expr.is_number:
        return None
    try:
        beyond: set[Any] = set()
        for node in postorder_traversal(expr):
            if isinstance(node, Pow):
                base, arg = node.base, node.exp
                if base.is_number and (base.is_zero or abs(base) == 1):
                    continue
            elif isinstance(node, (factorial, gamma)):
                arg = node.args[0]
            else:
                continue
            if not arg.is_number:
                continue
            if any(sub in beyond for sub in postorder_traversal(arg)) or abs(N(arg, 15)) > 10**15:
                beyond.add(node)
        if beyond:
            return _BEYOND_EVALF
        v = N(expr, 40)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None
    if not isinstance(v, Float) or v.is_zero or not v.is_finite:
        return None
    _sign, _mantissa, exponent, bits = v._mpf_
    return v if abs(exponent + bits) * math.log10(2) > _MAX_EXACT_DIGITS else None
