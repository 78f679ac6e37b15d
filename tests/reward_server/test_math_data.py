"""The math verifier on real data: MATH-500, GSM8K, labelled model outputs, and Math-Verify's own table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from reward_server.verifiers.math import MathOptions, verify_math
from tests.conftest import require_file

pytestmark = pytest.mark.data


def _rows(path: Path) -> list[dict]:
    # The folder may be there without this file (a partial copy): skip naming the variable, as for the folder.
    return [json.loads(line) for line in require_file(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def _wrong_value(answer: str) -> str:
    """The same answer with a different final value: bump its last digit, or change its word/letter.

    A unit ("864 \\mbox{ inches}^2") is not the value, so only digits before the unit are bumped.
    """
    unit = re.search(r"\\(?:mbox|text)\{", answer)
    value_part = answer[: unit.start()] if unit and re.search(r"\d", answer[: unit.start()]) else answer
    digits = list(re.finditer(r"\d", value_part))
    if digits:
        d = digits[-1]
        return answer[: d.start()] + str((int(d.group()) + 1) % 10) + answer[d.end() :]
    letter = re.fullmatch(r"\\text\{\(([A-E])\)\}", answer)
    if letter:
        return "\\text{(" + "BCDEA"["ABCDE".index(letter.group(1))] + ")}"
    if answer.startswith("\\text{"):
        return "\\text{zebra}"
    return answer + "+1"


def test_math500_reference_solutions_are_correct(shared_data: Path) -> None:
    """Each problem's worked solution (ending in \\boxed{...}) is judged correct against its answer."""
    rows = _rows(shared_data / "math500.jsonl")
    assert len(rows) == 500
    misses = [
        (r["unique_id"], r["answer"]) for r in rows if verify_math(r["solution"], r["answer"]).correct is not True
    ]
    assert misses == []


def test_math500_wrong_final_value_is_incorrect(shared_data: Path) -> None:
    """The same solution with its final boxed value changed is judged incorrect for >= 99.5% of problems."""
    rows = _rows(shared_data / "math500.jsonl")
    fooled = []
    for r in rows:
        solution = r["solution"]
        start = solution.rfind("\\boxed{")
        assert start >= 0, r["unique_id"]
        wrong = _wrong_value(r["answer"])
        assert wrong != r["answer"]
        end = start + len("\\boxed{") + len(r["answer"])
        # Replace the box content only when it is the answer verbatim; otherwise box the wrong value anew.
        if solution[start + len("\\boxed{") : end] == r["answer"]:
            tampered = solution[: start + len("\\boxed{")] + wrong + solution[end:]
        else:
            tampered = solution + f"\n\nFinal answer: $\\boxed{{{wrong}}}$"
        if verify_math(tampered, r["answer"]).correct:
            fooled.append((r["unique_id"], r["answer"], wrong))
    rate = 1 - len(fooled) / len(rows)
    print(f"\nMATH-500 wrong final value judged incorrect: {rate:.1%} ({len(rows) - len(fooled)}/{len(rows)})")
    assert rate >= 0.995, fooled


def test_gsm8k_reference_solutions_are_correct(shared_data: Path) -> None:
    """Each GSM8K test solution is correct against its #### answer, for all 1,319 problems."""
    rows = _rows(shared_data / "gsm8k_test.jsonl")
    assert len(rows) == 1319
    misses = []
    for r in rows:
        gold = r["answer"].rsplit("####", 1)[1].strip()
        if verify_math(r["answer"], gold).correct is not True:
            misses.append(gold)
    assert misses == []


# Rows of math_model_outputs.jsonl whose published label we believe is wrong (listed in the README).
LABEL_ERRORS = {
    # Qwen's grader marked "\boxed{10000}" wrong against the reference "10{,}000"; they are the same number.
    5859: "10000 equals 10{,}000",
}


def test_model_outputs_agree_with_labels(shared_data: Path) -> None:
    """Agreement with the published labels on 6,076 real model outputs (GSM8K and MATH) is >= 99.9%."""
    rows = _rows(shared_data / "math_model_outputs.jsonl")
    disagree = [i for i, r in enumerate(rows) if (verify_math(r["response"], r["gold"]).correct is True) != r["label"]]
    agree = len(rows) - len(disagree)
    print(f"\nmodel outputs: agree with labels on {agree}/{len(rows)} ({agree / len(rows):.3%}); differ on {disagree}")
    assert agree / len(rows) >= 0.999
    assert set(disagree) <= set(LABEL_ERRORS), [rows[i]["gold"] for i in disagree]


# Where our policy differs from Math-Verify's own test expectations on purpose (also in the README).
MATH_VERIFY_DIFFERENCES = {
    5: "decimal comma: we read '1000,99' as a list, never as 1000.99",
    6: "decimal comma: the reference '1,22' is the list {1, 22}",
    7: "decimal comma: '2,74' is not 2.74",
    32: "same, for \\( ... \\) across lines",
    133: "the test passes precision=2 per call; our precision comes from the reference (exact 1/3 != 0.33)",
    139: "same: the reference (3/5, 8/3] is exact, the answer (0.6, 2.6667] is rounded",
    186: "the test allows set/relation comparison per call; we keep Math-Verify's default (off)",
    190: "the reference holds literal '\\\\boxed' text, not boxes",
    226: "a prose reference is invalid_ground_truth, even when the response repeats it",
    263: "1 - 1/e is not 1 + 1/e (Math-Verify's table expects equal; its data notes flag it as questionable)",
}


def test_math_verify_table(shared_data: Path) -> None:
    """Math-Verify's own test table: print our agreement; the only differences are the documented ones."""
    rows = _rows(shared_data / "math_verify_cases.jsonl")
    differ = []
    for i, r in enumerate(rows):
        options = MathOptions(strict=r["compare_kwargs"].get("strict", True))
        got = verify_math(r["pred"], r["gold"], options).correct is True
        if int(got) != r["expected"]:
            differ.append(i)
    agree = len(rows) - len(differ)
    print(f"\nMath-Verify table: agree on {agree}/{len(rows)}; documented differences at {differ}")
    assert set(differ) == set(MATH_VERIFY_DIFFERENCES), sorted(set(differ) ^ set(MATH_VERIFY_DIFFERENCES))
