"""A small, fast evaluator for constant LaTeX expressions (``\\frac{\\sqrt{21}}{5}``, ``2\\pi``, ``3^{-2}``).

sympy's LaTeX parser costs ~10 ms an expression; most answers in math RL are constants that a float can
tell apart in microseconds. The verifier uses this to *reject* unequal constants without sympy; equality is
still confirmed symbolically. Anything outside the subset (variables, functions, sets, matrices) returns
``None`` and goes the slow, general way.

Subset: decimal numbers; ``+ - * / ^``; ``\\cdot \\times \\div``; ``\\frac{a}{b}`` (and ``\\dfrac``,
``\\tfrac``); ``\\sqrt{x}``, ``\\sqrt[n]{x}``; ``\\pi``; parentheses and braces; implicit multiplication
(``2\\sqrt{3}``, ``3(4)``); ``i`` as the imaginary unit; single-letter variables when values are given.
"""

from __future__ import annotations

import cmath
import math
import re

__all__ = ["SAMPLE_POINTS", "latex_value"]

# Two fixed assignments of "generic" values to single-letter variables: expressions that differ at a point
# are different. Fixed, so verdicts are deterministic.
SAMPLE_POINTS: tuple[dict[str, float], ...] = tuple(
    {
        c: 0.5 + ((k + 3) * 0.6180339887 * (j + 1.7)) % 1.9
        for j, c in enumerate("abcdfghjklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    }
    for k in range(2)
)

_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?|\.\d+)|(\\[A-Za-z]+)|(\S))")
_MAX_EXPONENT = 4096.0
_MAX_LEN = 300


class _Unsupported(Exception):
    pass


class _Parser:
    def __init__(self, text: str, variables: dict[str, float] | None = None) -> None:
        self.variables = variables or {}
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                break
            pos = m.end()
            if m.group(1):
                self.tokens.append(("num", m.group(1)))
            elif m.group(2):
                self.tokens.append(("cmd", m.group(2)))
            elif m.group(3):
                self.tokens.append(("chr", m.group(3)))
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise _Unsupported("unexpected end")
        self.i += 1
        return tok

    def expect(self, ch: str) -> None:
        tok = self.take()
        if tok != ("chr", ch):
            raise _Unsupported(f"expected {ch}")

    # expr := term (('+'|'-') term)*
    def expr(self) -> complex:
        value = self.term()
        while (tok := self.peek()) in (("chr", "+"), ("chr", "-")):
            self.i += 1
            rhs = self.term()
            value = value + rhs if tok == ("chr", "+") else value - rhs
        return value

    # term := unary (('*'|'/'|implicit) unary)*
    def term(self) -> complex:
        value = self.unary()
        while True:
            tok = self.peek()
            if tok in (("chr", "*"), ("cmd", "\\cdot"), ("cmd", "\\times")):
                self.i += 1
                value *= self.unary()
            elif tok in (("chr", "/"), ("cmd", "\\div")):
                self.i += 1
                den = self.unary()
                if den == 0:
                    raise _Unsupported("division by zero")
                value /= den
            elif tok is not None and self._starts_atom(tok):
                if tok[0] == "num" and self.tokens[self.i - 1][0] == "num":
                    raise _Unsupported("two numbers side by side")  # "3 4" is no product
                value *= self.unary()  # implicit multiplication: 2\sqrt{3}, 3(4)
            else:
                return value

    def _starts_atom(self, tok: tuple[str, str]) -> bool:
        kind, text = tok
        return (
            kind == "num"
            or (kind == "chr" and (text in "({i" or text in self.variables))
            or (kind == "cmd" and text in ("\\frac", "\\dfrac", "\\tfrac", "\\sqrt", "\\pi"))
        )

    def unary(self) -> complex:
        tok = self.peek()
        if tok == ("chr", "-"):
            self.i += 1
            return -self.unary()
        if tok == ("chr", "+"):
            self.i += 1
            return self.unary()
        return self.power()

    # power := atom ('^' atom)?   (right-associative)
    def power(self) -> complex:
        base = self.atom()
        if self.peek() == ("chr", "^"):
            self.i += 1
            exponent = self.unary_atom()
            if exponent.imag != 0 or abs(exponent) > _MAX_EXPONENT or base == 0:
                raise _Unsupported("exponent out of range")
            e = exponent.real
            if base.imag == 0 and base.real < 0 and not e.is_integer():
                raise _Unsupported("complex power of a negative number")
            try:
                result = complex(base.real**e) if base.imag == 0 else base**e
            except (OverflowError, ZeroDivisionError) as exc:
                raise _Unsupported("overflow") from exc
            if not cmath.isfinite(result):
                raise _Unsupported("out of range")
            return result
        return base

    def unary_atom(self) -> complex:
        if self.peek() == ("chr", "-"):
            self.i += 1
            return -self.unary_atom()
        return self.power()

    def group(self) -> complex:
        """A TeX argument: ``{...}`` or a single token (``\\frac12``)."""
        tok = self.take()
        if tok == ("chr", "{"):
            value = self.expr()
            self.expect("}")
            return value
        if tok[0] == "num":
            # TeX reads one digit as the argument: \frac12 is 1/2.
            digits = tok[1]
            if len(digits) > 1 and "." not in digits:
                self.tokens.insert(self.i, ("num", digits[1:]))
                digits = digits[0]
            return complex(float(digits))
        if tok == ("cmd", "\\pi"):
            return complex(math.pi)
        if tok[0] == "chr" and tok[1] in self.variables:
            return complex(self.variables[tok[1]])
        raise _Unsupported(f"argument {tok[1]!r}")

    def atom(self) -> complex:
        kind, text = self.take()
        if kind == "num":
            return complex(float(text))
        if (kind, text) == ("chr", "i"):
            return 1j
        if kind == "chr" and text in self.variables:
            if self.peek() == ("chr", "_"):
                raise _Unsupported("subscripted variable")
            return complex(self.variables[text])
        if (kind, text) == ("chr", "("):
            value = self.expr()
            self.expect(")")
            return value
        if (kind, text) == ("chr", "{"):
            value = self.expr()
            self.expect("}")
            return value
        if kind == "cmd":
            if text in ("\\frac", "\\dfrac", "\\tfrac"):
                num = self.group()
                den = self.group()
                if den == 0:
                    raise _Unsupported("division by zero")
                return num / den
            if text == "\\sqrt":
                index: complex = 2.0
                if self.peek() == ("chr", "["):
                    self.i += 1
                    index = self.expr()
                    self.expect("]")
                radicand = self.group()
                if radicand.imag != 0 or radicand.real < 0 or index.imag != 0 or index.real == 0:
                    raise _Unsupported("complex root")
                return complex(radicand.real ** (1.0 / index.real))
            if text == "\\pi":
                return complex(math.pi)
        raise _Unsupported(f"token {text!r}")


def latex_value(text: str, variables: dict[str, float] | None = None) -> complex | None:
    """The value of a LaTeX expression as a float, or ``None`` if it is outside the subset.

    Args:
        text: the expression.
        variables: values for single-letter variables (``{"x": 0.61}``); without them any letter makes the
            expression unsupported. ``e`` and ``i`` are never variables (they may be constants).

    Returns a ``complex`` (with ``imag == 0`` for real values). Never raises and never hangs: exponents
    are bounded, the input length is capped at 300 characters.
    """
    if not text or len(text) > _MAX_LEN:
        return None
    parser = _Parser(text, {k: v for k, v in (variables or {}).items() if k not in ("e", "i")})
    if not parser.tokens:
        return None
    try:
        value = parser.expr()
    except (_Unsupported, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    if parser.i != len(parser.tokens) or not cmath.isfinite(value):
        return None
    return value
