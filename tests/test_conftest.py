"""The end-of-run summary of skipped tests (tests/conftest.py)."""

from __future__ import annotations

from tests.conftest import skip_summary


def test_skip_summary_counts_each_reason_most_frequent_first() -> None:
    reasons = ["docker is not running"] * 3 + ["bwrap is missing"] + ["x" * 300]
    assert skip_summary(reasons) == [
        "skipped 3: docker is not running",
        "skipped 1: bwrap is missing",
        "skipped 1: " + "x" * 197 + "...",
    ]
    assert skip_summary([]) == []
