"""Reading a framework's per-sample label (OpenRLHF ``labels``, slime ``label``) as item fields."""

from __future__ import annotations

from typing import Any

import pytest

from rlvr_client.labels import LabelError, label_fields

TESTS = {"type": "stdio", "cases": [{"input": "1 2\n", "output": "3\n"}]}

CASES: list[tuple[Any, dict[str, Any], str]] = [
    ("42", {"ground_truth": "42"}, "a plain answer"),
    ("\\frac{1}{2}", {"ground_truth": "\\frac{1}{2}"}, "LaTeX"),
    ("{1, 2}", {"ground_truth": "{1, 2}"}, "a set is not JSON: still a ground truth"),
    ("Natalia sold 48 clips.\n#### 72", {"ground_truth": "Natalia sold 48 clips.\n#### 72"}, "a GSM8K solution"),
    (72, {"ground_truth": "72"}, "a JSON number is read as its text"),
    ('{"ground_truth": "42", "language": "fr"}', {"ground_truth": "42", "language": "fr"}, "JSON with item fields"),
    ({"tests": TESTS}, {"tests": TESTS, "task": "code"}, "tests make a code item"),
    ('{"ground_truth": 7}', {"ground_truth": "7"}, "a numeric ground truth inside JSON"),
]


@pytest.mark.parametrize(("label", "fields", "reason"), CASES, ids=[c[2] for c in CASES])
def test_label_fields(label: Any, fields: dict[str, Any], reason: str) -> None:
    assert label_fields(label) == fields


BAD: list[tuple[Any, str | None, str]] = [
    (None, None, "no label"),
    (True, None, "a boolean"),
    (float("nan"), None, "NaN"),
    (["42"], None, "a list"),
    ('{"answer": "42"}', "answer", "an unknown key is named"),
    ("{}", None, "an empty object has no ground truth nor tests"),
    ({"tests": TESTS, "task": "math"}, "task", "tests with a math task"),
]


@pytest.mark.parametrize(("label", "key", "reason"), BAD, ids=[c[2] for c in BAD])
def test_bad_labels_name_the_key(label: Any, key: str | None, reason: str) -> None:
    with pytest.raises(LabelError) as info:
        label_fields(label)
    assert info.value.key == key
