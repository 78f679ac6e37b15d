"""Equivalent forms that rule verifiers miss, one table per kind (issue 23): other values in the same form
that must be accepted, and near misses of the same form that must stay wrong.

Each row is (answer, reference, expected). The answer is sent boxed; the examples are our own.
"""

from __future__ import annotations

import pytest

from reward_server.verifiers.math import MathStatus, verify_math

Row = tuple[str, str, bool]

RENAMED_FUNCTION: list[Row] = [
    ("g(x) = x^2", "g(t) = t^2", True),
    ("h(k)=3k-4", "h(n)=3n-4", True),
    ("f(y) = \\frac{1}{y+1}", "f(x) = \\frac{1}{x+1}", True),
    ("p(z) = z^3 - 2z + 1", "p(x) = x^3-2x+1", True),
    ("q(s) = \\sqrt{s} + 2", "q(r) = 2 + \\sqrt{r}", True),
    ("f(t) = e^{2t}", "f(x) = e^{2x}", True),
    ("a^2 + 1", "F(u) = u^2 + 1", True),
    ("3w - 4", "h(n) = 3n - 4", True),
    # near misses
    ("g(x) = x^3", "g(t) = t^2", False),
    ("h(k)=3k+4", "h(n)=3n-4", False),
    ("f(x) = x^2", "g(t) = t^2", False),
    ("g(x) = x^2 + 1", "g(t) = t^2", False),
    ("g(x) = x^2 + t", "g(t) = t^2 + t", False),
    ("x^2 + t", "g(t) = t^2 + t", False),
    ("f(y) = \\frac{1}{y-1}", "f(x) = \\frac{1}{x+1}", False),
    ("3w + 4", "h(n) = 3n - 4", False),
    ("f(n) = (n+1)!", "f(k) = k!", False),
    # conservative: two bare expressions in different letters are not renamed
    ("x^2", "y^2", False),
    ("3a - 4", "3b - 4", False),
]

RENAMED_PARAMETER: list[Row] = [
    ("\\frac{\\pi}{2} + m\\pi", "\\frac{\\pi}{2} + k\\pi", True),
    ("x = \\frac{\\pi}{4} + n\\pi", "x = \\frac{\\pi}{4} + k\\pi", True),
    ("2j\\pi", "2k\\pi", True),
    ("\\frac{\\pi}{2} + m\\pi", "x = \\frac{\\pi}{2} + k\\pi, k \\in \\mathbb{Z}", True),
    ("\\frac{\\pi}{2} + k\\pi", "x = \\frac{\\pi}{2} + k\\pi, k \\in \\mathbb{Z}", True),
    ("\\frac{\\pi}{5} + 2n\\pi \\; (n \\in \\mathbb{Z})", "\\frac{\\pi}{5} + 2k\\pi", True),
    ("\\frac{\\pi}{2} + m\\pi", "x = \\frac{\\pi}{2} + k\\pi", True),
    ("\\frac{\\pi}{6} + 2\\pi n", "\\frac{\\pi}{6} + 2k\\pi", True),
    ("(1+4s, 2-3s)", "(1+4u, 2-3u)", True),
    ("(2t, 1-t, 3+t)", "(2s, 1-s, 3+s)", True),
    ("x = \\frac{\\pi}{3} + m\\pi, m \\in \\mathbb{Z}", "x = \\frac{\\pi}{3} + k\\pi, k \\in \\mathbb{Z}", True),
    # near misses
    ("\\frac{\\pi}{2} + 2m\\pi", "\\frac{\\pi}{2} + k\\pi", False),
    ("\\frac{\\pi}{3} + m\\pi", "\\frac{\\pi}{2} + k\\pi", False),
    ("(1+4s, 2+3s)", "(1+4u, 2-3u)", False),
    ("(1+4s, 2-3s, s)", "(1+4u, 2-3u)", False),
    ("(1+4s, 2-3t)", "(1+4u, 2-3u)", False),
    ("y = \\frac{\\pi}{2} + m\\pi", "x = \\frac{\\pi}{2} + k\\pi", False),
    ("\\frac{\\pi}{2} + a\\pi", "\\frac{\\pi}{2} + k\\pi", False),
    ("(2t, 1+t, 3+t)", "(2s, 1-s, 3+s)", False),
    ("n\\pi", "2k\\pi", False),
    ("\\frac{\\pi}{3} + m\\pi, m \\in \\mathbb{Z}", "\\frac{\\pi}{2} + k\\pi", False),
    ("\\frac{\\pi}{2} + 2m\\pi", "x = \\frac{\\pi}{2} + k\\pi, k \\in \\mathbb{Z}", False),
    ("\\frac{\\pi}{2} - m\\pi", "x = \\frac{\\pi}{3} + k\\pi", False),
    ("(x, x^2)", "(s, s^2)", False),
    # conservative: no parameter role (no period, no parametric tuple), so not renamed
    ("2m + 1", "2k + 1", False),
]


def _verdict(answer: str, reference: str) -> bool | None:
    return verify_math(f"The answer is \\boxed{{{answer}}}.", reference).correct


SETS: list[Row] = [
    ("\\{x \\mid -2 < x \\le 5\\}", "(-2, 5]", True),
    ("(-2, 5]", "\\{x \\mid -2 < x \\le 5\\}", True),
    ("-2 < x \\le 5", "\\{x \\mid -2 < x \\le 5\\}", True),
    ("\\{y : 0 \\le y < 7\\}", "[0, 7)", True),
    ("\\{x \\in \\mathbb{R} \\mid x > 4\\}", "(4, \\infty)", True),
    ("\\{0\\} \\cup [3, \\infty)", "b \\ge 3 \\text{ or } b = 0", True),
    ("[0, 0] \\cup [3, \\infty)", "b \\ge 3 \\text{ or } b = 0", True),
    ("b = 0 \\text{ or } b \\ge 3", "\\{0\\} \\cup [3, \\infty)", True),
    ("(1, 3] \\cup [6, 9)", "1 < t \\le 3 \\text{ or } 6 \\le t < 9", True),
    ("1 < t \\le 3 \\text{ or } 6 \\le t < 9", "(1, 3] \\cup [6, 9)", True),
    ("\\{x : x \\ne 3\\}", "(-\\infty, 3) \\cup (3, \\infty)", True),
    ("x \\in [\\sqrt{2}, 4)", "\\sqrt{2} \\le x < 4", True),
    ("x > 1 \\text{ and } x < 3", "(1, 3)", True),
    ("x < 2, x > 3", "(-\\infty, 2) \\cup (3, \\infty)", True),
    ("p = -1 \\text{ and } p = 2", "-1, 2", True),
    ("a < -1 \\text{ or } a > \\frac{1}{2}", "(-\\infty, -1) \\cup (\\frac{1}{2}, \\infty)", True),
    # near misses: a bound changed, an open end closed, a dropped piece, another variable, "and" for "or"
    ("\\{x \\mid -2 < x < 5\\}", "(-2, 5]", False),
    ("\\{x \\mid -2 \\le x \\le 5\\}", "(-2, 5]", False),
    ("\\{x \\mid -2 < x \\le 6\\}", "(-2, 5]", False),
    ("[3, \\infty)", "b \\ge 3 \\text{ or } b = 0", False),
    ("b > 3 \\text{ or } b = 0", "\\{0\\} \\cup [3, \\infty)", False),
    ("(1, 3] \\cup (6, 9)", "1 < t \\le 3 \\text{ or } 6 \\le t < 9", False),
    ("(1, 3]", "1 < t \\le 3 \\text{ or } 6 \\le t < 9", False),
    ("1 < t \\le 3 \\text{ or } 6 \\le t < 8", "(1, 3] \\cup [6, 9)", False),
    ("y \\in [\\sqrt{2}, 4)", "\\sqrt{2} \\le x < 4", False),
    ("x > 1 \\text{ and } x < 3", "(-\\infty, \\infty)", False),
    ("\\{x : x \\ne -3\\}", "(-\\infty, 3) \\cup (3, \\infty)", False),
    ("a < -1 \\text{ or } a > 2", "(-\\infty, -1) \\cup (\\frac{1}{2}, \\infty)", False),
    # a comma between overlapping conditions may mean "and" or "or": never read as the union
    ("x > 1, x < 3", "(-\\infty, \\infty)", False),
    ("x < 2, x > 3", "(-\\infty, 2) \\cup [3, \\infty)", False),
]

VECTORS: list[Row] = [
    ("\\begin{pmatrix} 3 \\\\ -1 \\\\ 4 \\end{pmatrix}", "(3, -1, 4)", True),
    ("\\begin{bmatrix} 3 \\\\ -1 \\\\ 4 \\end{bmatrix}", "(3, -1, 4)", True),
    ("(2, \\frac{1}{2})", "\\begin{pmatrix} 2 \\\\ \\frac{1}{2} \\end{pmatrix}", True),
    ("\\begin{pmatrix} 0 \\\\ 5 \\\\ -2 \\\\ 1 \\end{pmatrix}", "(0, 5, -2, 1)", True),
    ("\\begin{pmatrix} 1 & 7 \\end{pmatrix}", "(1, 7)", True),
    ("\\begin{pmatrix} 2a \\\\ a+1 \\end{pmatrix}", "(2a, a+1)", True),
    # near misses: one coordinate, a sign, the order, a coordinate dropped, a matrix that is no vector
    ("\\begin{pmatrix} 3 \\\\ 1 \\\\ 4 \\end{pmatrix}", "(3, -1, 4)", False),
    ("\\begin{pmatrix} 3 \\\\ -1 \\\\ 5 \\end{pmatrix}", "(3, -1, 4)", False),
    ("\\begin{pmatrix} -1 \\\\ 3 \\\\ 4 \\end{pmatrix}", "(3, -1, 4)", False),
    ("\\begin{pmatrix} 3 \\\\ -1 \\end{pmatrix}", "(3, -1, 4)", False),
    ("(2, -\\frac{1}{2})", "\\begin{pmatrix} 2 \\\\ \\frac{1}{2} \\end{pmatrix}", False),
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "(1, 2, 3, 4)", False),
    ("\\begin{vmatrix} 1 \\\\ 2 \\end{vmatrix}", "(1, 2)", False),
]

LABELLED: list[Row] = [
    ("2n+3", "k_{\\min} = 2n + 3", True),
    ("k_{\\min} = 2n + 3", "2n+3", True),
    ("\\frac{n(n+1)}{2}", "S_n = \\frac{n(n+1)}{2}", True),
    ("S = \\frac{a}{1-r}", "\\frac{a}{1-r}", True),
    ("A = \\pi r^2", "\\pi r^2", True),
    ("4m - 1", "a_m = 4m - 1", True),
    # near misses: another value, a sign, the terms swapped, another label
    ("2n+5", "k_{\\min} = 2n + 3", False),
    ("k_{\\min} = 2n - 3", "2n+3", False),
    ("\\frac{n(n-1)}{2}", "S_n = \\frac{n(n+1)}{2}", False),
    ("3n + 2", "k_{\\min} = 2n + 3", False),
    ("k_{\\max} = 2n + 3", "k_{\\min} = 2n + 3", False),
    ("S = \\frac{a}{1+r}", "\\frac{a}{1-r}", False),
]

FRACTION_COEFFICIENTS: list[Row] = [
    ("\\frac{5}{3}p + \\frac{1}{3}q", "\\frac{5p+q}{3}", True),
    ("\\frac{5p+q}{3}", "\\frac{5}{3}p + \\frac{1}{3}q", True),
    ("\\frac{2}{7}a - \\frac{3}{7}b", "\\frac{2a-3b}{7}", True),
    ("\\frac{x}{4} + \\frac{3y}{4}", "\\frac{x+3y}{4}", True),
    ("\\frac{5}{3}p - \\frac{1}{3}q", "\\frac{5p+q}{3}", False),
    ("\\frac{5}{3}p + \\frac{1}{3}q", "\\frac{5p+q}{6}", False),
    ("\\frac{2}{7}a - \\frac{3}{7}c", "\\frac{2a-3b}{7}", False),
]

DEGREES_MINUTES: list[Row] = [
    ("35^\\circ 18'", "35^\\circ18'", True),
    ("35°18'", "35^\\circ 18'", True),
    ("35.3^\\circ", "35^\\circ 18'", True),
    ("35^\\circ 18'", "35.3^\\circ", True),
    ("35^{\\circ} 18^{\\prime}", "35.3", True),
    ("12^\\circ 45'", "12.75^\\circ", True),
    ("10^\\circ 30' 36''", "10.51^\\circ", True),
    ("35^\\circ 19'", "35^\\circ 18'", False),
    ("53^\\circ 18'", "35^\\circ 18'", False),
    ("35^\\circ 18'", "35.18^\\circ", False),
    ("35^\\circ 18'", "3518", False),
    ("12^\\circ 45'", "12.7^\\circ", False),
    ("35^\\circ 20'", "35.33^\\circ", False),
]

NAMED_TUPLE: list[Row] = [
    ("p = 4, q = -1", "4, -1", True),
    ("4, -1", "p = 4, q = -1", True),
    ("a = \\frac{1}{2}, b = 3", "(\\frac{1}{2}, 3)", True),
    ("m = 2, n = 0, k = 5", "(2, 0, 5)", True),
    ("p = 4, q = 1", "4, -1", False),
    ("q = 4, p = -1", "p = 4, q = -1", False),
    ("a = 3, b = \\frac{1}{2}", "a = \\frac{1}{2}, b = 3", False),
    ("m = 2, n = 5", "(2, 0, 5)", False),
]


TEXT_REFERENCES: list[Row] = [
    ("\\text{the second player}", "The second player wins.", True),
    ("\\text{Second player}", "The second player wins.", True),
    ("\\text{The second player wins}", "The second player wins.", True),
    ("\\text{primes}", "All prime numbers", True),
    ("\\text{prime numbers}", "All prime numbers", True),
    ("\\text{yes}", "Yes, it is always possible.", True),
    ("\\text{Bob}", "Bob has a winning strategy.", True),
    ("\\text{circle}", "It is a circle.", True),
    ("\\text{Equilateral triangles}", "an equilateral triangle", True),
    ("\\text{The answer is Carol}", "Carol", True),
    # near misses: another name, a negated sentence, another word, a negation, yes for no
    ("\\text{the first player}", "The second player wins.", False),
    ("\\text{The second player does not win}", "The second player wins.", False),
    ("\\text{odd numbers}", "All prime numbers", False),
    ("\\text{no prime numbers}", "All prime numbers", False),
    ("\\text{composites}", "All prime numbers", False),
    ("\\text{no}", "Yes, it is always possible.", False),
    ("\\text{Alice}", "Bob has a winning strategy.", False),
    ("\\text{ellipse}", "It is a circle.", False),
    ("\\text{isosceles triangle}", "an equilateral triangle", False),
    ("\\text{second}", "The second player wins.", False),
    ("\\text{Yes, no}", "Yes", False),
    ("\\text{Yes. No, wait, it is no}", "Yes, it is possible.", False),
    ("\\text{Alice never wins}", "Alice wins.", False),
]

# Sentences without an unambiguous key span: not scoreable, whatever the answer.
TEXT_NOT_SCOREABLE = [
    ("\\text{Alice}", "The first player cannot win if both play well."),
    ("\\text{isosceles}", "The triangle is isosceles but not equilateral in general."),
    ("\\text{regular hexagon}", "The midpoints form a regular hexagon"),
    ("\\text{Bob}", "Bob does not have a winning strategy."),
]


KINDS: dict[str, list[Row]] = {
    "renamed function variable": RENAMED_FUNCTION,
    "renamed integer parameter": RENAMED_PARAMETER,
    "sets three ways": SETS,
    "column vector and tuple": VECTORS,
    "labelled and bare expression": LABELLED,
    "fraction with implicit coefficients": FRACTION_COEFFICIENTS,
    "degrees and minutes": DEGREES_MINUTES,
    "tuple as named values": NAMED_TUPLE,
    "text references": TEXT_REFERENCES,
}
ROWS = [(kind, *row) for kind, rows in KINDS.items() for row in rows]


@pytest.mark.parametrize(
    ("kind", "answer", "reference", "expected"),
    ROWS,
    ids=[f"{kind}: {'accept' if expected else 'near miss'} {answer}" for kind, answer, _, expected in ROWS],
)
def test_form_of_a_kind(kind: str, answer: str, reference: str, expected: bool) -> None:
    """An answer in another form of the kind is accepted; its near miss in the same form stays wrong."""
    assert _verdict(answer, reference) is expected


@pytest.mark.parametrize(("answer", "reference"), TEXT_NOT_SCOREABLE)
def test_sentences_without_a_key_span_stay_invalid(answer: str, reference: str) -> None:
    verdict = verify_math(f"\\boxed{{{answer}}}", reference)
    assert verdict.status is MathStatus.INVALID_GROUND_TRUTH
    assert verdict.correct is None
