"""The fast LaTeX evaluator that lets the math verifier reject unequal values without sympy."""

from __future__ import annotations

import math

import pytest

from reward_server.verifiers.math.latex_value import SAMPLE_POINTS, latex_value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        ("-\\frac{3}{4}", -0.75),
        ("\\frac12", 0.5),  # TeX takes one digit per argument
        ("\\frac{\\sqrt{21}}{5}", math.sqrt(21) / 5),
        ("2\\sqrt{3}", 2 * math.sqrt(3)),
        ("\\sqrt[3]{27}", 3.0),
        ("3^{-2}", 1 / 9),
        ("2^3^2", 2**9),  # right-associative
        ("2\\pi", 2 * math.pi),
        ("(1+2)(3+4)", 21),
        ("6 \\cdot 7", 42),
        ("10 \\div 4", 2.5),
        ("6 - 5i", 6 - 5j),
    ],
)
def test_values(text: str, value: complex) -> None:
    got = latex_value(text)
    assert got is not None
    assert abs(got - value) < 1e-12 * max(1, abs(value))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("x + 1", "a variable without a value"),
        ("3 4", "two numbers side by side are no product"),
        ("\\frac{1}{0}", "division by zero"),
        ("10^{10^{10}}", "exponent too large: never hang"),
        ("\\sqrt{-4}", "complex root"),
        ("\\sin(x)", "functions are outside the subset"),
        ("(1, 2)", "tuples are not a value"),
        ("x_1", "subscripts"),
        ("", "empty"),
        ("1 +", "incomplete"),
    ],
)
def test_unsupported_is_none(text: str, reason: str) -> None:
    assert latex_value(text, SAMPLE_POINTS[0] if text == "x_1" else None) is None, reason


def test_variables_at_sample_points() -> None:
    point = SAMPLE_POINTS[0]
    x = point["x"]
    assert latex_value("15x - 80", point) == pytest.approx(15 * x - 80)
    assert latex_value("x^2 + 2x + 1", point) == pytest.approx(latex_value("(x+1)^2", point))
    # The two points differ, so expressions equal at one point by chance are caught at the other.
    assert SAMPLE_POINTS[0]["x"] != SAMPLE_POINTS[1]["x"]
