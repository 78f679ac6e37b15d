"""The math fallback (last number or span) reads only the end of a long text, with spans paired as before."""

from __future__ import annotations

from reward_server.verifiers.math import extract_final_answer
from reward_server.verifiers.math.clauses import _FALLBACK_CHARS

PROSE = "We keep going with the reasoning and check every case once more before we conclude. "


def test_a_long_text_without_an_answer_takes_its_last_value() -> None:
    text = "The first guess is 12.\n" + PROSE * 2000 + "\nSo far the count stands at 41"
    found = extract_final_answer(text)
    assert (found.parts, found.source) == (("41",), "fallback")


def test_a_span_opened_before_the_window_is_still_one_span() -> None:
    # The display span starts ~6,000 characters from the end: inside the window, its closing $$ must close it
    # (read alone, the window would take that $$ for an opener and answer "7").
    body = "a+" * 3000
    text = PROSE * 200 + "\n$$" + body + "7$$"
    assert len(text) - text.index("$$") > _FALLBACK_CHARS
    found = extract_final_answer(text)
    assert (found.parts, found.source) == ((body + "7",), "fallback")
