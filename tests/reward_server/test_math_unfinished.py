"""Unfinished completions (issue 23): working that stops mid-chain is no answer, and a truncated item needs
an explicit final answer. Real data: MATH-500 reference solutions cut before their final box."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reward_server.verifiers.math import MathStatus, verify_math
from tests.conftest import require_file

APPENDED = "... I ran out of time before finishing."


@pytest.mark.parametrize(
    ("response", "reference"),
    [
        # a chain that ends in "=": the value before it is an intermediate
        ("So the distance is $d = \\sqrt{9 + 108}$, i.e. d = \\sqrt{117} = ", "3\\sqrt{13}"),
        ("We get 7 \\cdot 6 \\cdot 12 - 220 =", "284"),
        ("The total is 45 + 12 =", "57"),
        # a chain that ends in an operator
        ("Adding them, 12 + 30 +", "42"),
        ("Then 6 \\times", "6"),
        # past an align line break and "&"
        ("\\begin{align*} z &= \\frac{5+10i}{5} \\\\\n&=", "1+2i"),
        # a math span opened on the last line and never closed
        ("The cube has volume $6^3=" + APPENDED, "216"),
        ("By the first count there are 10 of them. So the answer is $\\frac{20}{" + APPENDED, "10"),
        ("First, $x = 4$. Then the area is \\[ A = 4^2 = " + APPENDED, "16"),
        # a closed span whose content ends in "="
        ("Dividing: $3^7/3^3=3^4=$", "81"),
    ],
)
def test_unfinished_working_is_no_answer(response: str, reference: str) -> None:
    v = verify_math(response, reference)
    assert (v.status, v.correct) == (MathStatus.NO_ANSWER, False), v


@pytest.mark.parametrize(
    ("response", "reference"),
    [
        ("So $x = 3^4 = 81$.", "81"),  # a closed chain: its result
        ("She pays $18 for the two of them", "18"),  # a price "$" is no unclosed formula
        ("Total: 7 \\cdot 6 \\cdot 12 - 220 = 284", "284"),
        ("so x = 5", "5"),  # a plain last value
        ("She earned $30.00 and spent $12.50, so she has $17.50 left.", "17.5"),
    ],
)
def test_finished_working_still_answers(response: str, reference: str) -> None:
    assert verify_math(response, reference).correct is True


@pytest.mark.parametrize(
    ("response", "reference", "correct"),
    [
        ("... so the area is $\\boxed{16}$ and then we check by", "16", True),  # a box: explicit
        ("<answer>16</answer> Now let us verify: 4 times", "16", True),  # an answer tag
        ("The answer is 16. Let us double-check: 4 \\cdot", "16", True),  # an "answer is" line
        ("The answer is 17. Let us double-check: 4 \\cdot", "16", False),  # explicit and wrong: 0, not null
        ("We have 4^2 = 16 and so on", "16", None),  # fallback only: not an answer when truncated
        ("B", "B", None),  # a bare letter is no explicit answer either
    ],
)
def test_truncated_needs_an_explicit_answer(response: str, reference: str, correct: bool | None) -> None:
    v = verify_math(response, reference, truncated=True)
    if correct is None:
        assert (v.status, v.correct) == (MathStatus.NO_ANSWER, False), v
        assert verify_math(response, reference).correct is True  # what the flag changes
    else:
        assert (v.status, v.correct) == (MathStatus.OK, correct), v


def _cut_solutions(data: Path) -> list[tuple[str, str, str]]:
    """(full solution, the solution cut before its final ``\\boxed`` with APPENDED, answer) for MATH-500."""
    rows = [json.loads(x) for x in require_file(data / "math500.jsonl").read_text(encoding="utf-8").splitlines() if x]
    out = []
    for r in rows:
        i = r["solution"].rfind("\\boxed")
        out.append((r["solution"], r["solution"][:i] + APPENDED, r["answer"]))
    return out


@pytest.mark.data
@pytest.mark.parametrize("truncated", [False, True])
def test_math500_cut_before_the_final_box_is_never_paid(shared_data: Path, truncated: bool) -> None:
    """Each of the 500 solutions cut before its last box: none without an earlier box is paid (these were 169
    of 500 paid before issue 23); the uncut solutions are all still accepted."""
    cases = _cut_solutions(shared_data)
    assert len(cases) == 500
    paid = []
    no_box = 0
    for full, cut, answer in cases:
        assert verify_math(full, answer).correct is True, full[-200:]
        if "\\boxed" in cut or "\\fbox" in cut:
            continue  # an earlier box (a second method, an intermediate) is an explicit answer
        no_box += 1
        if verify_math(cut, answer, truncated=truncated).correct:
            paid.append((cut[-120:], answer))
    print(f"\nMATH-500 cut before the final box, no earlier box: {len(paid)}/{no_box} paid (truncated={truncated})")
    assert no_box > 450
    assert paid == []
